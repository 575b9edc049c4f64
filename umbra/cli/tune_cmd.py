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
from umbra.errors import ConfigError
from umbra.tuning.config import CLEAN_GATE_LR, DEFAULT_PRIVATE_PATH, TuneConfig
from umbra.tuning.gradient_noise import DEFAULT_SIGMA, GradientNoise, default_sigma
from umbra.tuning.adversary import AdversaryConfig
from umbra.tuning.inversion_penalty import InversionPenalty
from umbra.model.private_path_config import PrivatePathConfig

_D = TuneConfig()


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
    t = p.add_argument_group("training")
    t.add_argument("--steps", type=int, default=_D.steps)
    t.add_argument("--batch-size", type=int, default=_D.batch_size, help="packed blocks per step")
    t.add_argument("--context-length", type=int, default=_D.context_length, help="tokens per block")
    t.add_argument("--lr", type=float, default=_D.lr, help="peak learning rate")
    t.add_argument("--warmup-steps", type=int, default=_D.warmup_steps)
    t.add_argument("--seed", type=int, default=_D.seed, help="data order and FIM draws")
    t.add_argument("--train-embedding", action="store_true",
                   help="also train the INDVocab table (its ε-IND guarantee then no longer covers the rows "
                        "in use; see docs/privacy/utility.md)")
    g = p.add_argument_group("gradient noise (against label recovery from the gradient sent to the middle, and "
                             "against the encoder re-learning the public geometry; docs/privacy/attacks.md)")
    g.add_argument("--gradient-noise", type=float, default=None, metavar="SIGMA",
                   help="σ: clip each sequence's gradient at the middle's output to C and add N(0, (σC)²) "
                        f"(default: {DEFAULT_SIGMA:g} for a bundle with INDVocab noise, 0 for ε = inf; 0 = exact)")
    g.add_argument("--gradient-clip", type=float, default=_D.gradient_noise.clip_norm, metavar="C",
                   help="per-sequence bound on the sent gradient (of its own mean token loss)")
    g.add_argument("--forward-only", action="store_true",
                   help="send no gradient at all: the cloud runs only the forward pass while you tune, and the "
                        "encoder learns through the private local path alone (needs one, e.g. --clean-residual; "
                        "no gradient noise then)")
    inv = p.add_argument_group("inversion penalty (keeps the tuned encoder's states away from what the cloud's "
                               "public codebook inverts; umbra/tuning/inversion_penalty.py)")
    inv.add_argument("--inversion-penalty", type=float, default=_D.inversion_penalty.weight, metavar="LAMBDA",
                     help="weight of the simulated nearest-neighbour attacker's probability of the true token "
                          "(default: 0, off)")
    inv.add_argument("--penalty-temperature", type=float, default=_D.inversion_penalty.temperature, metavar="TAU")
    pp = p.add_argument_group("private local path (the decoder also gets the client's own encoder output locally; "
                              "what is sent can be made lossy; default without these flags: --clean-residual "
                              "--path-noise 4, the frontier's choice; umbra/model/private_path.py, "
                              "docs/privacy/frontier.md)")
    pp.add_argument("--private-path", action="store_true",
                    help="the local path y + W·h (kept, with its settings, once the bundle has one)")
    pp.add_argument("--path-noise", type=float, default=None, metavar="S",
                    help="Gaussian noise on every sent position, std S × that position's RMS, keyed by the bundle's "
                         "secret and the prefix (a re-sent prefix gets the same noise); implies --private-path")
    pp.add_argument("--path-rank", type=int, default=None, metavar="R",
                    help="send only a rank-R projection (a fixed orthonormal basis drawn from the bundle's secret); "
                         "implies --private-path")
    pp.add_argument("--clean-residual", action="store_true",
                    help="the decoder reads the encoder over the base model's CLEAN public table (kept in the "
                         "bundle, never sent) plus the middle's gated residual g ⊙ (y − sent) instead of y + W·h; "
                         "read once from the base model (--model); implies --private-path")
    pp.add_argument("--path-gate", choices=("channel", "scalar"), default="channel",
                    help="the clean residual's gate g: one per hidden channel or a single number (starts at 1)")
    pp.add_argument("--gate-lr", type=float, default=None, metavar="LR",
                    help=f"peak learning rate of the clean residual's gate (default: {CLEAN_GATE_LR:g})")
    pp.add_argument("--no-private-path", action="store_true",
                    help="plain STuning: send the encoder's output as it is, no keyed noise, no clean residual "
                         "(not defended: the decipherment reads it; docs/privacy/frontier.md)")
    adv = p.add_argument_group("adversary in the loop (a probe trained on the states the client sends; the encoder "
                               "is penalized for what it reads; umbra/tuning/adversary.py)")
    adv.add_argument("--adversary", type=float, default=_D.adversary.weight, metavar="LAMBDA",
                     help="weight of the confusion loss (the probe's posterior pulled to the token prior; 0 = off)")
    adv.add_argument("--adversary-monitor", action="store_true",
                     help="train the probe and log its accuracy even with LAMBDA = 0 (a control; not a defence)")
    adv.add_argument("--adversary-steps", type=int, default=_D.adversary.inner_steps, metavar="N",
                     help="probe updates per tuning step")
    adv.add_argument("--adversary-hidden", type=int, default=_D.adversary.hidden, metavar="N",
                     help="the probe's hidden width (0: a linear probe)")
    adv.add_argument("--adversary-lr", type=float, default=_D.adversary.lr, help="the probe's learning rate")
    t.add_argument("--checkpoint-every", type=int, default=_D.checkpoint_every, help="steps between checkpoints")
    t.add_argument("--stop-at-step", type=int, default=None, help="stop early (checkpointed); schedule unchanged")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads, here and in a cloud this command starts (default: torch's)")
    add_device_arg(p)
    p.set_defaults(func=run)
    from umbra.cli import noesis_cmd

    noesis_cmd.register(p.add_subparsers(dest="tune_command", metavar="{shared,experts}",
                                         help="NOESIS (docs/noesis.md); without one: STuning of the client blocks"))


def _config(args) -> TuneConfig:
    path = _private_path(args)
    sigma = args.gradient_noise
    if sigma is None and args.forward_only:
        sigma = 0.0  # nothing is sent back to noise
    if sigma is None:  # the product default follows the bundle's ε
        from umbra.privacy.manifest import Manifest

        sigma = default_sigma(Manifest.read(args.bundle).epsilon)
    return TuneConfig(steps=args.steps, batch_size=args.batch_size, context_length=args.context_length, lr=args.lr,
                      warmup_steps=args.warmup_steps, seed=args.seed, train_embedding=args.train_embedding,
                      gradient_noise=GradientNoise(sigma, args.gradient_clip),
                      inversion_penalty=InversionPenalty(args.inversion_penalty, args.penalty_temperature),
                      private_path=path, gate_lr=_gate_lr(args, path),
                      adversary=AdversaryConfig(args.adversary, args.adversary_monitor, args.adversary_steps,
                                                args.adversary_lr, args.adversary_hidden),
                      cloud_backward=not args.forward_only,
                      checkpoint_every=args.checkpoint_every, stop_at_step=args.stop_at_step).validate()


def _gate_lr(args, path: PrivatePathConfig) -> float | None:
    """--gate-lr, else the frontier's CLEAN_GATE_LR for a clean residual (a gate that must find its
    scale in a few hundred steps); it is a setting of the clean residual only."""
    if args.gate_lr is not None and not path.clean:
        raise ConfigError("--gate-lr is a setting of the clean residual")
    if args.gate_lr is not None:
        return args.gate_lr
    return CLEAN_GATE_LR if path.clean else None


def _private_path(args) -> PrivatePathConfig:
    """The private path to tune with. A bundle that has one keeps it (its settings win; other flags
    are refused); else the flags' path, or with no path flag the measured default
    DEFAULT_PRIVATE_PATH (the clean residual, keyed noise s = 4), or none with --no-private-path."""
    from umbra.privacy.manifest import Manifest

    flags = args.private_path or args.path_noise is not None or args.path_rank is not None or args.clean_residual
    if args.no_private_path and (flags or args.path_gate != "channel"):
        raise ConfigError("--no-private-path tunes without a private path: drop the path flags")
    if args.no_private_path:
        asked = PrivatePathConfig()
    elif flags:
        asked = PrivatePathConfig(True, args.path_noise or 0.0, args.path_rank,
                                  "clean" if args.clean_residual else "local", args.path_gate)
    else:
        asked = replace(DEFAULT_PRIVATE_PATH, gate=args.path_gate)
    if args.path_gate != "channel" and not asked.clean:
        raise ConfigError("--path-gate is a setting of --clean-residual")
    asked.validate()
    have = Manifest.read(args.bundle).privacy.get("private_path")  # umbra/privacy/bundle_private_path.py
    if isinstance(have, dict):
        kept = PrivatePathConfig.from_dict(have.get("config"))
        if (flags or args.no_private_path) and asked != kept:
            raise ConfigError(f"the bundle's private path is {kept}; it cannot be changed in place (make a new bundle)")
        return kept
    return asked


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
    config = _config(args)
    if args.resume:  # the checkpoint's own trajectory settings win; runtime knobs from the flags
        saved = TuneConfig.from_dict(ckpt.load(out / ckpt.CHECKPOINT_NAME)["config"])
        config = replace(saved, stop_at_step=config.stop_at_step, checkpoint_every=config.checkpoint_every)
    if config.gradient_noise.enabled and not args.in_process:
        print(f"sent gradient: clipped to {config.gradient_noise.clip_norm:g} per sequence, noise σ = "
              f"{config.gradient_noise.noise_multiplier:g}; each message is ({config.gradient_noise.message_epsilon():.3g}, "
              "1e-05)-DP about its sequence given the client's weights (docs/privacy/attacks.md)", file=sys.stderr)
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
