"""`umbra tune`'s training flags and their conversion, once, into a validated TuneConfig: the
schedule, the gradient sent to the middle, the inversion penalty, the private local path and the
adversary in the loop. The product's defaults that differ from TuneConfig's own are chosen here
from the measured tables: σ follows the bundle's ε (umbra/tuning/gradient_noise.py), and with no
path flag the private path is DEFAULT_PRIVATE_PATH (docs/privacy/frontier.md, "The defaults, and
why")."""

from __future__ import annotations

from dataclasses import replace

from umbra.errors import ConfigError
from umbra.model.private_path_config import PrivatePathConfig
from umbra.tuning.adversary import AdversaryConfig
from umbra.tuning.config import CLEAN_GATE_LR, DEFAULT_PRIVATE_PATH, TuneConfig
from umbra.tuning.gradient_noise import DEFAULT_SIGMA, GradientNoise, default_sigma
from umbra.tuning.inversion_penalty import InversionPenalty

_D = TuneConfig()


def add_tuning_args(p) -> None:
    """The training flags on `umbra tune`'s parser `p`, defaulted from TuneConfig."""
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


def tune_config(args) -> TuneConfig:
    """The flags' TuneConfig, validated (a bundle's own private path wins over the default)."""
    from umbra.privacy.manifest import Manifest

    manifest = Manifest.read(args.bundle)
    path = _private_path(args, manifest.privacy.get("private_path"))  # umbra/privacy/bundle_private_path.py
    sigma = args.gradient_noise
    if sigma is None and args.forward_only:
        sigma = 0.0  # nothing is sent back to noise
    if sigma is None:  # the product default follows the bundle's ε
        sigma = default_sigma(manifest.epsilon)
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


def _private_path(args, have) -> PrivatePathConfig:
    """The private path to tune with. A bundle that has one (`have`, its manifest entry) keeps it
    (its settings win; contrary flags are refused); else the flags' path, or with no path flag the
    measured default DEFAULT_PRIVATE_PATH (the clean residual, keyed noise s = 4), or none with
    --no-private-path."""
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
    if isinstance(have, dict):
        kept = PrivatePathConfig.from_dict(have.get("config"))
        if (flags or args.no_private_path or args.path_gate != "channel") and asked != kept:
            raise ConfigError(f"the bundle's private path is {kept}; it cannot be changed in place (make a new bundle)")
        return kept
    return asked
