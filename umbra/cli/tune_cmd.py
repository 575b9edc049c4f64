"""`umbra tune --bundle DIR`: STuning of a client bundle's encoder and decoder (DESIGN §4).

The client computes logits and the loss on private labels π(t) and sends only hidden states and
the gradient at the middle's output; the middle returns the gradient at its input. By default
the middle runs in the real cloud service started on 127.0.0.1 for the duration of the command
(as `umbra complete` does); `--cloud URL` uses a running one (its token from the keyring entry of `umbra keys cloud-token set
URL`, else UMBRA_CLOUD_TOKEN); `--in-process` runs the
base model's middle blocks here. Data: the corpus train split, packed as in pretraining (plain
next-token + FIM). Checkpoints go to DIR/tuning (resume with --resume); when the schedule is
done the tuned weights are written back into the bundle (vocab rows in public order).
For a bundle with INDVocab noise the gradient at the middle's output is clipped and noised by
default (σ = 0.1), in-process too: the measured defaults of docs/privacy/utility.md. And by
default the bundle gets the clean-residual private path with keyed noise s = 4 (DEFAULT_PRIVATE_PATH):
of the configurations that held every attack on the frontier, the adaptive ones included, it
completes best at 300 steps (docs/privacy/frontier.md, "The defaults, and why");
--no-private-path tunes plain STuning, which the decipherment reads.

The tuned weights are recorded with their STuning record (manifest privacy `stuning`: the
trajectory settings and whether the cloud trained a LoRA), which names the bundle's privacy
mode from then on (umbra/privacy/mode.py). The tuning traffic — hidden states and the gradient
at the middle's output — goes to a cloud not on this machine only if the mode of the
configuration being trained is defended (the attack grid's STuning rows measure exactly that
traffic, attack (e) on the gradient included), or with --allow-undefended-remote-cloud
(umbra/privacy/cloud_policy.py); a self-started cloud and --in-process are on this machine."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from pathlib import Path

from umbra.cli.cloud_args import add_cloud_args, cloud_config, cloud_url
from umbra.cli.device_args import add_device_arg
from umbra.cli.tune_args import add_tuning_args, tune_config
from umbra.errors import ConfigError
from umbra.tuning.config import TuneConfig


def register(sub) -> None:
    p = sub.add_parser("tune", help="split fine-tuning (STuning) of a client bundle", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, default=None, metavar="DIR", help="client bundle (`umbra init`); required")
    p.add_argument("--model", type=Path, default=None,
                   help="the bundle's base model (default: the directory it was made from)")
    p.add_argument("--service", default=None, help="keyring service holding the bundle's key (default: umbra)")
    p.add_argument("--out", type=Path, default=None, help="checkpoints and log (default: DIR/tuning)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out (its own settings)")
    p.add_argument("--corpus-dir", type=Path, default=Path("data/corpus"), help="corpus with a train split")
    where = p.add_argument_group("where the middle blocks run (default: a cloud service started here)")
    add_cloud_args(where)
    where.add_argument("--in-process", action="store_true", help="run the middle blocks in this process")
    lora = p.add_argument_group("cloud LoRA (optional; needs --cloud and a cloud serving with --lora)")
    lora.add_argument("--cloud-lora", action="store_true",
                      help="also train a LoRA on the middle blocks that the cloud keeps and applies to this "
                           "token's sessions only (a fresh one; with --resume the existing one continues)")
    lora.add_argument("--lora-rank", type=int, default=8)
    lora.add_argument("--lora-alpha", type=float, default=16.0)
    lora.add_argument("--lora-lr", type=float, default=1e-3)
    lora.add_argument("--lora-seed", type=int, default=None, help="init of the adapter (default: the cloud's entropy)")
    add_tuning_args(p)
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads, here and in a cloud this command starts (default: torch's)")
    add_device_arg(p)
    p.set_defaults(func=run)
    from umbra.cli import noesis_cmd

    noesis_cmd.register(p.add_subparsers(dest="tune_command", metavar="{shared,experts}",
                                         help="NOESIS (docs/noesis.md); without one: STuning of the client blocks"))


def run(args) -> int:
    import torch

    from keys import DEFAULT_SERVICE, KeyStore
    from umbra.engine import ClientModel
    from umbra.model.device import resolve_device
    from umbra.tuning import checkpoint as ckpt

    if args.bundle is None:
        raise ConfigError("umbra tune: --bundle DIR is required")
    device = resolve_device(args.device)
    if args.in_process and (args.cloud or args.token):
        raise ConfigError("--in-process runs without a cloud; drop --cloud/--token")
    if args.cloud_lora and (args.in_process or not cloud_url(args)):
        raise ConfigError("--cloud-lora trains an adapter the cloud keeps for your token: give --cloud URL "
                          "(in-process, or a cloud started by this command, there is no cloud to keep it)")
    if args.cloud_lora and args.forward_only:
        raise ConfigError("--cloud-lora trains on the tuning backward, which --forward-only never sends")
    if args.threads is not None and args.threads < 1:
        raise ConfigError("--threads must be >= 1")
    cloud = None if args.in_process else cloud_config(args, audit=False)  # tuning traffic is not audited
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    out = args.out or args.bundle / "tuning"
    config = tune_config(args)
    if args.resume:  # the checkpoint's own trajectory settings win; runtime knobs from the flags
        saved = TuneConfig.from_dict(ckpt.load(out / ckpt.CHECKPOINT_NAME)["config"])
        config = replace(saved, stop_at_step=config.stop_at_step, checkpoint_every=config.checkpoint_every)
    if config.gradient_noise.enabled and not args.in_process:
        print(f"sent gradient: clipped to {config.gradient_noise.clip_norm:g} per sequence, noise σ = "
              f"{config.gradient_noise.noise_multiplier:g}; each message is ({config.gradient_noise.message_epsilon():.3g}, "
              "1e-05)-DP about its sequence given the client's weights (docs/privacy/attacks.md)", file=sys.stderr)
    if config.private_path.enabled:
        print(f"private path: {config.private_path.describe()} (docs/privacy/frontier.md)", file=sys.stderr)
    model = ClientModel.from_bundle(args.bundle, args.model, store=KeyStore(args.service or DEFAULT_SERVICE))
    from umbra.privacy.mode import PrivacyMode, stuning_record

    record = stuning_record(config, cloud_lora=args.cloud_lora)
    mode = PrivacyMode.of(model.bundle.manifest.epsilon, record)  # of the configuration being trained
    result = asyncio.run(_tune(model, config, out, args, cloud, mode, device))
    bundle = model.bundle
    if result.finished:
        from umbra.privacy.bundle import save_client_weights

        save_client_weights(bundle, stuning=record)
    last = f"{result.losses[-1]:.4f}" if result.losses else "-"
    state = "finished; tuned weights written to the bundle" if result.finished else "stopped (resume with --resume)"
    print(f"tuned {result.state.step}/{config.steps} steps ({result.state.tokens_seen:,} tokens), "
          f"last loss {last}: {state}. Checkpoint: {out / ckpt.CHECKPOINT_NAME}")
    return 0 if result.finished or config.stop_at_step is not None else 130


async def _tune(model, config: TuneConfig, out: Path, args, cloud, mode, device):
    """`cloud` None: the middle blocks in this process (--in-process); else the link's Middle,
    under the private-by-default rule for `mode` (the privacy mode of the configuration trained).
    The client's parts (and in-process middle blocks) train on `device`, and are back on the CPU
    before anything is written to the bundle."""
    from umbra.middle.local import LocalMiddle
    from umbra.model.device import placed
    from umbra.training.trainer import StopOnSignal
    from umbra.tuning.data import TuneData
    from umbra.tuning.loop import tune

    data = TuneData.from_corpus(args.corpus_dir, model.bundle.dir / "base", config, cache_dir=out / "data",
                                vocab_size=model.spec.vocab_size)

    def progress(r) -> None:
        if r.step == 1 or r.step % 10 == 0 or r.step == config.steps:
            probe = f" probe {r.probe_accuracy:.3f}" if r.probe_accuracy is not None else ""
            print(f"step {r.step}/{config.steps} loss {r.loss:.4f} lr {r.lr:.3g} grad {r.grad_norm:.3f} "
                  f"{r.seconds:.2f} s/step{probe}", file=sys.stderr, flush=True)

    codebook = None
    if config.inversion_penalty.enabled:  # the attacker's codebook, from our own blocks through the public encoder
        from umbra.tuning.inversion_penalty import own_codebook

        codebook = await asyncio.to_thread(own_codebook, model.check_base(), data, config.inversion_penalty,
                                           model.plan)

    if config.private_path.enabled:  # attach a fresh path (W = 0, g = 1) unless the bundle has one
        from umbra.privacy.bundle_private_path import bundle_secret
        from umbra.tuning.private_path import prepare_for_tuning

        b = model.bundle
        table = None
        if config.private_path.clean and b.private_path is None:  # the clean table: the base model's, once
            table = await asyncio.to_thread(_public_table, model)
        prepare_for_tuning(b, config, bundle_secret(b.permutation, b.manifest.bundle_id), table)
        model.private_path = b.private_path

    async def go(middle, blocks=None):
        b = model.bundle
        with StopOnSignal() as stop, placed(device, b.encoder, b.decoder, b.private_path, blocks):
            result = await tune(b, middle, data, config, out_dir=out, resume=args.resume,
                                stop=lambda: stop.requested, on_step=progress, codebook=codebook)
        if result.finished and model.bundle.private_path is not None:  # before the client weights: a crash
            from umbra.privacy.bundle_private_path import save_private_path  # between never leaves a client
            save_private_path(model.bundle)  # tuned for a lossy send without its path
        return result

    if cloud is None:
        blocks = model.load_middle()
        return await go(LocalMiddle(blocks), blocks)
    from umbra.connect import open_middle

    async with open_middle(model, cloud, mode) as link:
        print(f"tuning traffic: privacy {link.privacy.summary}", file=sys.stderr)
        if args.cloud_lora:
            return await _with_cloud_lora(go, link, args)
        return await go(link.middle)


def _public_table(model):
    """The base model's public embedding table [V, d] (public row order), from the base model
    directory the bundle was made from (checked by its weight hashes): the clean residual's table."""
    from umbra.model.loader import load_part

    return load_part(model.check_base(), "encoder", model.plan, model.dtype, model.spec).embed_tokens.weight.detach()


async def _with_cloud_lora(go, link, args):
    from umbra.tuning.cloud_lora import CloudLora, CloudLoraConfig

    async with CloudLora(link.url, link.token, link.verify) as lora:
        if args.resume:
            if not (await lora.info()).get("enabled"):
                raise ConfigError("--resume --cloud-lora: the cloud holds no LoRA for this token any more")
            await lora.set_training(True)
        else:
            await lora.configure(CloudLoraConfig(args.lora_rank, args.lora_alpha, args.lora_lr, args.lora_seed))
        try:
            return await go(link.middle)
        finally:
            state = await lora.set_training(False)  # keep serving it, stop updating it
            print(f"cloud LoRA: rank {state['rank']}, {state['steps']} steps; the cloud applies it to this "
                  f"token's sessions", file=sys.stderr)
