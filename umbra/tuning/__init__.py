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
private-id space). SecureGate (seed 003): dual_adapters (the secure and revealing LoRAs of one
organization, trained on its scrubbed and raw views), fusion (eqs. 6-8, weights fitted by eq. 7)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from umbra.lazy import exports

# Names resolve on first use (PEP 562): the torch-free configs load without the training code.
_HOME = {
    "TuneClient": "client", "clean_client": "client", "defended_client": "client",
    "TuneConfig": "config", "TuneData": "data",
    "AdapterTrainConfig": "dual_adapters", "DualAdapterConfig": "dual_adapters", "DualReport": "dual_adapters",
    "train_dual": "dual_adapters", "train_view_adapter": "dual_adapters",
    "FusionConfig": "fusion", "FusionResult": "fusion", "fit_fusion_weights": "fusion", "fuse_lora": "fusion",
    "StepReport": "loop", "TuneResult": "loop", "split_step": "loop", "tune": "loop",
}
__all__ = sorted(_HOME)

if TYPE_CHECKING:
    from umbra.tuning.client import TuneClient, clean_client, defended_client
    from umbra.tuning.config import TuneConfig
    from umbra.tuning.data import TuneData
    from umbra.tuning.dual_adapters import (AdapterTrainConfig, DualAdapterConfig, DualReport, train_dual,
                                            train_view_adapter)
    from umbra.tuning.fusion import FusionConfig, FusionResult, fit_fusion_weights, fuse_lora
    from umbra.tuning.loop import StepReport, TuneResult, split_step, tune


__getattr__ = exports(__name__, _HOME)
