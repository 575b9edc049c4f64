"""STuning: split fine-tuning of the client encoder and decoder (NOIR §7, DESIGN §4).

    from umbra.tuning import TuneConfig, TuneData, tune
    bundle = load_bundle(bundle_dir)                          # or clean_client / defended_client
    data = TuneData.from_corpus(corpus_dir, bundle.dir / "base", config, cache_dir=...)
    result = await tune(bundle, middle, data, config, out_dir=None | DIR, resume=False)
    save_client_weights(bundle)                               # write the tuned weights back

`middle` is any Middle (LocalMiddle, RemoteMiddle, or a wrapper that records what the cloud
sees); `tune` trains the client's modules in place and returns a TuneResult (losses, step
times, position). Modules: config (TuneConfig), data (TuneData: packed public ids), client
(what is trained; fClean and in-memory defended clients), loop (the split step and the run),
checkpoint (exact resume, vocab rows in public order — no π on disk), evaluate (utility in
private-id space)."""

from umbra.tuning.client import TuneClient, clean_client, defended_client
from umbra.tuning.config import TuneConfig
from umbra.tuning.data import TuneData
from umbra.tuning.loop import StepReport, TuneResult, split_step, tune

__all__ = ["StepReport", "TuneClient", "TuneConfig", "TuneData", "TuneResult", "clean_client", "defended_client",
           "split_step", "tune"]
