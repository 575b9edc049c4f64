"""`umbra tune shared` and `umbra tune experts`: NOESIS on a client bundle (docs/noesis.md).

    umbra tune shared  --bundle DIR [--family soft_prompt] [--epsilon 1]   stage 1: DP-SGD, every language
    umbra tune experts --bundle DIR                                        stage 2: one LoRA per language

Stage 1 trains the shared parameters on the documents of every language with document-level
DP-SGD (Poisson sampling, per-document clipping, Gaussian noise; σ from opacus' accountant for
(ε, δ)) and stores them as the bundle's shared adapter with the ε actually spent (`--family full`
tunes the client's own blocks and records the ε beside the weights). Stage 2 trains a LoRA expert
per language on that language's documents, the shared adapters frozen in place, stored as the
language's expert; the language server, `umbra serve` and `umbra complete` route to it by the
editor's language. Documents: the private domains of `umbra data private` by default, or
any corpus directory in that layout. The middle runs in a cloud started here by default,
`--cloud URL`, or `--in-process`; a cloud not on this machine only under the bundle's privacy
mode's rule (umbra/privacy/cloud_policy.py, --allow-undefended-remote-cloud).

`--family full` rewrites the client weights with their DP record and no STuning record: an
earlier `umbra tune`'s record (manifest privacy `stuning`) is dropped, since those weights are no
longer the ones it describes; the mode then names the NOESIS-tuned blocks, which no attack table
has measured (umbra/privacy/mode.py, `mode_of_manifest`)."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path

from umbra.cli.cloud_args import add_cloud_args, cloud_config, with_middle
from umbra.cli.device_args import add_device_arg
from umbra.errors import ConfigError

PRIVATE_CORPUS = Path("data/corpus/private")


def register(tune_sub) -> None:
    """Add `shared` and `experts` under `umbra tune`."""
    from umbra.tuning.noesis_config import FAMILIES, FAMILY_CLIP_NORM, DPConfig, SharedConfig, StageOneConfig

    d, dp, sc = StageOneConfig(), DPConfig(), SharedConfig()
    s = tune_sub.add_parser("shared", help="NOESIS stage 1: shared parameters by document-level DP-SGD",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(s)
    s.add_argument("--family", choices=FAMILIES, default=sc.family, help="what is shared (default: %(default)s)")
    s.add_argument("--prompt-length", type=int, default=sc.prompt_length, help="soft / deep prompt vectors")
    s.add_argument("--rank", type=int, default=sc.rank, help="common LoRA rank")
    s.add_argument("--bottleneck", type=int, default=sc.bottleneck, help="bottleneck adapter width")
    s.add_argument("--name", default=sc.name, help="the shared adapter's name in the bundle (default: %(default)s)")
    g = s.add_argument_group("differential privacy (the unit is one document: one file)")
    g.add_argument("--epsilon", type=float, default=dp.epsilon, help="target ε; inf = non-private (default: %(default)s)")
    g.add_argument("--delta", type=float, default=dp.delta, help="target δ, below 1/N (default: %(default)g)")
    g.add_argument("--clip", type=float, default=None,
                   help=f"per-document gradient bound C (default: the family's: {dp.clip:g}, "
                        f"{', '.join(f'{k} {v:g}' for k, v in FAMILY_CLIP_NORM.items())})")
    g.add_argument("--expected-batch", type=int, default=dp.expected_batch, help="B; sampling rate q = B / N")
    g.add_argument("--epochs", type=float, default=dp.epochs, help="expected passes; steps = epochs / q")
    g.add_argument("--accountant", choices=("rdp", "prv", "gdp"), default=dp.accountant)
    g.add_argument("--noise-seed", type=int, default=None,
                   help="reproducible sampling and noise, for experiments ONLY: whoever knows it knows the noise")
    t = s.add_argument_group("training")
    t.add_argument("--context-length", type=int, default=d.context_length, help="positions per block incl. a soft prompt")
    t.add_argument("--physical-batch", type=int, default=d.physical_batch, help="rows per forward/backward")
    t.add_argument("--lr", type=float, default=d.lr)
    t.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    t.add_argument("--fim-rate", type=float, default=d.fim_rate)
    t.add_argument("--init-seed", type=int, default=sc.init_seed, help="initialisation of the shared adapter")
    s.set_defaults(func=run_shared)

    from umbra.tuning.adapter_config import AdapterTrainConfig

    a = AdapterTrainConfig()
    e = tune_sub.add_parser("experts", help="NOESIS stage 2: one LoRA expert per language, the shared parameters frozen",
                            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(e)
    e.add_argument("--rank", type=int, default=16, help="expert LoRA rank (default: %(default)s)")
    e.add_argument("--epochs", type=int, default=a.epochs)
    e.add_argument("--lr", type=float, default=a.lr)
    e.add_argument("--batch-size", type=int, default=a.batch_size)
    e.add_argument("--block-len", type=int, default=a.block_len)
    e.add_argument("--fim-rate", type=float, default=a.fim_rate)
    e.add_argument("--seed", type=int, default=a.seed)
    e.add_argument("--name", default="expert-{language}", help="expert names (default: %(default)s)")
    e.set_defaults(func=run_experts)


def _common(p) -> None:
    p.add_argument("--bundle", type=Path, required=True, metavar="DIR", help="client bundle (`umbra init`)")
    p.add_argument("--model", type=Path, default=None, help="the bundle's base model (default: where it was made from)")
    p.add_argument("--service", default=None, help="keyring service holding the bundle's key (default: umbra)")
    p.add_argument("--corpus-dir", type=Path, default=PRIVATE_CORPUS,
                   help="documents: <dir>/train/<language>.jsonl (default: %(default)s)")
    p.add_argument("--languages", default=None, help="comma-separated languages (default: every one in the corpus)")
    p.add_argument("--replace", action="store_true", help="replace adapters of the same names")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    add_device_arg(p)
    where = p.add_argument_group("where the middle blocks run (default: a cloud service started here)")
    add_cloud_args(where)
    where.add_argument("--in-process", action="store_true", help="run the middle blocks in this process")


def _documents(args) -> list:
    """The train documents of the chosen languages (default: every language present). A language
    asked for by name with no documents is an error, never silently left out."""
    from umbra.data.corpus import LANGS, corpus_file, read_documents

    langs = tuple(x.strip() for x in args.languages.split(",")) if args.languages else LANGS
    unknown = [x for x in langs if x not in LANGS]
    if unknown:
        raise ConfigError(f"unknown language(s) {', '.join(unknown)} (known: {', '.join(LANGS)})")
    present = [x for x in langs if corpus_file(args.corpus_dir, "train", x).exists()]
    docs = [d for lang in present for d in read_documents(args.corpus_dir, "train", lang)]
    missing = sorted(set(langs) - {d.lang for d in docs})
    if not docs or (args.languages and missing):
        what = ", ".join(missing) or "any language"
        raise ConfigError(f"no documents for {what} in {args.corpus_dir / 'train'} (build them with "
                          f"`umbra data private`, or pass --corpus-dir)")
    return docs


def _setup(args):
    import torch

    from keys import DEFAULT_SERVICE, KeyStore
    from umbra.engine import ClientModel
    from umbra.model.device import resolve_device

    if args.in_process and (args.cloud or args.token):
        raise ConfigError("--in-process runs without a cloud; drop --cloud/--token")
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError("--threads must be >= 1")
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    cloud = None if args.in_process else cloud_config(args, audit=False)
    model = ClientModel.from_bundle(args.bundle, args.model, store=KeyStore(args.service or DEFAULT_SERVICE))
    return model, cloud, device


def _progress(step: int, steps: int, loss: float) -> None:
    if step == 1 or step % 10 == 0 or step == steps:
        print(f"step {step}/{steps} sampled-block loss {loss:.4f}", file=sys.stderr, flush=True)


def run_shared(args) -> int:
    from umbra.model.device import placed
    from umbra.privacy.bundle_adapters import add_adapter
    from umbra.tuning.doc_blocks import DocumentBlocks
    from umbra.tuning.dp_sgd import plan_run
    from umbra.tuning.noesis import train_shared
    from umbra.tuning.noesis_config import DPConfig, SharedConfig, StageOneConfig

    config = StageOneConfig(
        shared=SharedConfig(args.family, args.prompt_length, args.rank, bottleneck=args.bottleneck, name=args.name,
                            init_seed=args.init_seed),
        dp=DPConfig(args.epsilon, args.delta, args.clip,  # None: the family's bound (StageOneConfig)
                    args.expected_batch, args.epochs, args.accountant, args.noise_seed),
        context_length=args.context_length, physical_batch=args.physical_batch, lr=args.lr,
        warmup_steps=args.warmup_steps, fim_rate=args.fim_rate).validate()
    docs = _documents(args)
    plan = plan_run(config.dp, len(docs))  # a budget the data cannot meet fails before any model loads
    if args.noise_seed is not None:
        print("--noise-seed: sampling and noise are reproducible; the DP guarantee does not hold against anyone "
              "who knows the seed", file=sys.stderr)
    model, cloud, device = _setup(args)
    if args.family != "full" and args.name in model.adapters and not args.replace:
        raise ConfigError(f"bundle {args.bundle} already has an adapter named {args.name!r} (pass --replace)")
    blocks = DocumentBlocks(docs, model.tokenizer, config.block_len, config.fim_rate)
    counts = {lang: sum(d.lang == lang for d in docs) for lang in sorted({d.lang for d in docs})}
    eps = "∞ (non-private)" if math.isinf(plan.epsilon) else f"{plan.epsilon:.4g}"
    print(f"{len(docs)} documents {counts}; q = {plan.sample_rate:.4g}, {plan.steps} steps, σ = "
          f"{plan.noise_multiplier:.4g}, C = {plan.clip_norm:g}: ε = {eps} at δ = {plan.delta:g}", file=sys.stderr)
    with placed(device, model.encoder, model.decoder):  # in-process middle blocks follow (load_middle)
        result = asyncio.run(with_middle(model, cloud, lambda m: train_shared(model, m, blocks, config, _progress),
                                          on_link=_cloud_lora_off))
    training = result.training_record(config, counts)
    if result.adapter is None:
        from umbra.privacy.bundle import save_client_weights

        save_client_weights(model.bundle, dp={**result.plan.record(), "training": training})
        print(f"client blocks tuned (ε = {eps}) and written to the bundle", file=sys.stderr)
    else:
        add_adapter(args.bundle, result.adapter, role="shared", training=training, privacy=result.plan.record(),
                    replace=args.replace)
        print(f"stored shared {args.family} {args.name!r} ({result.params.parameter_count:,} parameters, "
              f"ε = {eps})", file=sys.stderr)
    return 0


def run_experts(args) -> int:
    from umbra.model.device import placed
    from umbra.privacy.bundle_adapters import add_adapter
    from umbra.tuning.adapter_config import AdapterTrainConfig
    from umbra.tuning.noesis import train_experts

    config = AdapterTrainConfig(rank=args.rank, lr=args.lr, epochs=args.epochs, batch_size=args.batch_size,
                                block_len=args.block_len, fim_rate=args.fim_rate, seed=args.seed).validate()
    if "{language}" not in args.name:
        raise ConfigError("--name must contain {language}: one expert per language")
    docs = _documents(args)
    model, cloud, device = _setup(args)
    texts: dict[str, list[str]] = {}
    for d in docs:
        texts.setdefault(d.lang, []).append(d.text)
    names = {lang: args.name.format(language=lang) for lang in texts}
    taken = [n for n in names.values() if n in model.adapters]
    if taken and not args.replace:
        raise ConfigError(f"bundle {args.bundle} already has adapter(s) {', '.join(taken)} (pass --replace)")
    entries = model.bundle.manifest.adapter_entries()
    shared = tuple(model.adapters[n] for n, e in sorted(entries.items()) if e.role == "shared")
    print(f"experts for {', '.join(f'{k} ({len(v)} documents)' for k, v in sorted(texts.items()))}, beside "
          f"{', '.join(a.name for a in shared) or 'no shared adapter'}", file=sys.stderr)
    with placed(device, model.encoder, model.decoder, *shared):  # the experts are built where these are
        trained = asyncio.run(with_middle(model, cloud, lambda m: train_experts(model, m, texts, shared, config,
                                                                               args.name)))
    beside = {a.name: entries[a.name].sha256 for a in shared}
    for lang, (adapter, report) in sorted(trained.items()):
        training = {"method": "noesis-stage2/adamw", "documents": report.texts, "tokens": report.tokens,
                    "steps": report.steps, "epochs": report.epochs, "rank": config.rank, "lr": config.lr,
                    "seed": config.seed, "beside": beside}
        add_adapter(args.bundle, adapter, role="expert", language=lang, training=training, replace=args.replace)
        print(f"stored expert {adapter.name!r} for {lang}: {report.steps} steps, last epoch loss "
              f"{report.epoch_losses[-1]:.4f}", file=sys.stderr)
    return 0


async def _cloud_lora_off(link) -> None:
    """Stage 1's per-document gradients assume the cloud's blocks are the base model's: refuse a
    token whose sessions the cloud applies its own LoRA to."""
    from umbra.errors import CloudRejected
    from umbra.tuning.cloud_lora import CloudLora

    async with CloudLora(link.url, link.token, link.verify) as lora:
        try:
            info = await lora.info()
        except CloudRejected as exc:
            if exc.status in (404, 501):  # a cloud without LoRA support: nothing is applied
                return
            raise
    if info.get("enabled"):
        raise ConfigError("the cloud applies a LoRA to this token's sessions; stage 1 runs with the cloud's LoRA "
                          "off: delete it (`umbra tune --cloud-lora` made it) or use another token")
