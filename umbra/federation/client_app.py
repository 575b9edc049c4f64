"""The federation's Flower ClientApp: one organization's SuperNode trains the SECURE adapter on
its scrubbed view each round (org_training.py) and replies with that adapter's arrays and its
count of scrubbed tokens — nothing else. The raw code stays in this process (it is read and
scrubbed here), the revealing adapter is never built, and no access key is read (a bundle's own
key is, to open its private tokenizer, and it never leaves this process).

The node's own settings come from its `--node-config` (`umbra federation join` writes it):
    data              the organization's code: directories, files or .jsonl, joined by os.pathsep
    model             the public base model directory (the same model at every organization)
    bundle            the organization's client bundle ("" or absent: none): the secure adapter is
                      then trained on the bundle's private tokenizer and embedding table (INDVocab,
                      LTokenizer), its keys read from this machine's OS keyring; the global adapter
                      is a LoRA of the decoder blocks, which a bundle shares with the public model
    keyring-service   the OS keyring's service holding the bundle's keys ("" or absent: umbra's)
    internal-domains  the organization's own domains, comma-separated (their hosts/URLs are scrubbed)
    threads           torch threads (0: torch's default)
    global-out        where to keep the federation's final global secure adapter (.npz; "" none),
                      for `umbra securegate train --global` (fusion, eqs. 6-8); under DP the ε
                      spent is kept beside it (`<global-out>.privacy.json`)
    dp-epsilon        > 0: train the secure adapter by document-level DP-SGD at this ε for the whole
                      federation (org_training.py); 0 or absent: no DP
    dp-delta, dp-clip, dp-batch   δ, the clip bound C and the expected batch of files B
The training settings come from the server with each round (the same LoRA at every organization):
rank, lr, epochs, block-len, batch-size, fim-rate, seed, rounds, server-round."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from umbra.errors import ConfigError
from umbra.federation.strategy import ARRAYS, CONFIG, METRICS, SAMPLES, to_record

if TYPE_CHECKING:
    from umbra.tuning.adapter_config import AdapterTrainConfig

app = ClientApp()
_TRAINERS: dict = {}  # (node settings, training settings) -> OrgTrainer, kept while this process lives
DP_STATE = "umbra-dp"  # the node context's record of the DP plan's progress (rounds, steps, privacy record)


def train_config(config) -> "AdapterTrainConfig":
    from umbra.tuning.adapter_config import AdapterTrainConfig

    try:
        return AdapterTrainConfig(rank=int(config["rank"]), lr=float(config["lr"]), epochs=int(config["epochs"]),
                                  block_len=int(config["block-len"]), batch_size=int(config["batch-size"]),
                                  fim_rate=float(config["fim-rate"]), seed=int(config["seed"])).validate()
    except KeyError as exc:
        raise ConfigError(f"the server's training config lacks {exc}") from None


def dp_settings(node_config):
    """The organization's DP setting (a DPConfig) or None when dp-epsilon is absent or 0."""
    eps = float(node_config.get("dp-epsilon", 0) or 0)
    if eps == 0:
        return None
    from umbra.tuning.noesis_config import DEFAULT_CLIP_NORM, DEFAULT_DELTA, DPConfig

    return DPConfig(epsilon=eps, delta=float(node_config.get("dp-delta", DEFAULT_DELTA)),
                    clip_norm=float(node_config.get("dp-clip", DEFAULT_CLIP_NORM)),
                    expected_batch=int(node_config.get("dp-batch", 8))).validate()


@dataclass(frozen=True)
class NodeSettings:
    """One organization's SuperNode, from its --node-config (converted once, here)."""

    data: tuple[Path, ...]  # its code: directories, files or .jsonl
    model: Path  # the public base model
    internal_domains: tuple[str, ...] = ()  # scrubbed as the organization's own
    threads: int = 0  # torch threads (0: torch's default)
    bundle: Path | None = None  # its client bundle: train on the private tokenizer
    keyring_service: str = ""  # the OS keyring's service of the bundle's keys ("": umbra's)


def node_settings(node_config) -> NodeSettings:
    try:
        data = tuple(Path(p) for p in str(node_config["data"]).split(os.pathsep) if p)
        model = Path(str(node_config["model"]))
    except KeyError as exc:
        raise ConfigError(f"this SuperNode's --node-config lacks {exc} (umbra federation join sets it)") from None
    domains = tuple(d for d in str(node_config.get("internal-domains", "")).split(",") if d)
    bundle = str(node_config.get("bundle", ""))
    return NodeSettings(data, model, domains, int(node_config.get("threads", 0)), Path(bundle) if bundle else None,
                        str(node_config.get("keyring-service", "")))


def load_model(settings: NodeSettings):
    """The organization's client: its bundle's (private tokenizer and table, keys from the OS
    keyring), or the public base model's."""
    from umbra.engine import ClientModel

    if settings.bundle is None:
        return ClientModel.load(settings.model)
    from keys import KeyStore

    store = KeyStore(settings.keyring_service) if settings.keyring_service else None
    return ClientModel.from_bundle(settings.bundle, settings.model, store=store)


async def _trainer(settings, config, dp=None, rounds: int = 1):
    key = (settings, config, dp, rounds)
    if key not in _TRAINERS:
        import torch

        from umbra.federation.org_training import OrgTrainer, scrubbed_view
        from umbra.middle.local import LocalMiddle
        from umbra.scrub import ScrubConfig, Scrubber
        from umbra.tuning.securegate import read_org_code

        if settings.threads > 0:
            torch.set_num_threads(settings.threads)
        model = load_model(settings)
        domains = settings.internal_domains
        scrubber = Scrubber(ScrubConfig(internal_domains=domains) if domains else None)
        view = scrubbed_view(read_org_code(list(settings.data)), scrubber)
        _TRAINERS.clear()  # one organization per node: a new setting replaces the old
        _TRAINERS[key] = await OrgTrainer.create(model, LocalMiddle(model.load_middle()), view, config, dp, rounds)
    return _TRAINERS[key]


def train_reply(trainer, msg: Message) -> tuple[Message, dict]:
    """One organization's answer to a TRAIN message: its secure adapter trained from the global one
    in the message, and its count of scrubbed tokens, nothing else (and the local report)."""
    config = msg.content[CONFIG]
    global_arrays = {name: a.numpy() for name, a in msg.content[ARRAYS].items()}
    arrays, samples, report = trainer.round(global_arrays, int(config["server-round"]))
    reply: ArrayRecord = to_record(arrays)
    return Message(RecordDict({ARRAYS: reply, METRICS: MetricRecord({SAMPLES: int(samples)})}), reply_to=msg), report


def _saved_progress(context: Context) -> dict | None:
    record = context.state.config_records.get(DP_STATE)
    return None if record is None else {k: int(record[k]) for k in ("rounds-taken", "steps-taken")}


def _save_progress(context: Context, progress: dict | None, privacy: dict | None) -> None:
    """The DP plan's progress, and the privacy record, kept in the node's context (which Flower
    keeps for the run between the ClientApp's processes): the next round resumes from it, the
    final QUERY writes the record beside the global adapter. Nothing without DP."""
    if progress is not None:
        context.state[DP_STATE] = ConfigRecord({**progress, "privacy": json.dumps(privacy)})


@app.train()
def train(msg: Message, context: Context) -> Message:
    config = msg.content[CONFIG]
    rounds = int(config["rounds"]) if "rounds" in config else 1
    trainer = asyncio.run(_trainer(node_settings(context.node_config), train_config(config),
                                   dp_settings(context.node_config), rounds))
    trainer.resume(_saved_progress(context))
    reply, report = train_reply(trainer, msg)
    dp = report.get("privacy")
    _save_progress(context, trainer.dp_progress, dp)
    spent = f", DP ε spent {dp['epsilon_spent']:.3g} of {dp['target_epsilon']}" if dp else ""
    print(f"umbra federation: round {report['round']}: {report['steps']} steps on {report['tokens']} scrubbed tokens, "
          f"epoch losses {report['epoch_losses']} ({report['seconds']} s){spent}", flush=True)
    return reply


@app.query()
def keep_final(msg: Message, context: Context) -> Message:
    """The final global secure adapter (after the last round): kept at `global-out` if set, after
    the same checks as any adapter arrays. The reply carries nothing."""
    import numpy as np

    from umbra.federation.record import save_arrays

    out = str(context.node_config.get("global-out", ""))
    arrays = {name: a.numpy() for name, a in msg.content[ARRAYS].items()}
    if not arrays or not all(a.dtype.kind == "f" and np.isfinite(a).all() for a in arrays.values()):
        raise ConfigError("the final global adapter is empty or not finite; not kept")
    if out:
        save_arrays(Path(out), arrays)
        print(f"umbra federation: final global secure adapter kept at {out}", flush=True)
        saved = context.state.config_records.get(DP_STATE)
        if saved is not None:
            privacy = json.loads(str(saved["privacy"]))
            Path(out + ".privacy.json").write_text(json.dumps(privacy, indent=1) + "\n", encoding="utf-8")
    return Message(RecordDict(), reply_to=msg)
