"""The privacy-utility frontier's variants (docs/privacy/frontier.md; the cells that tune and
measure them: umbra/attack_grid/frontier.py): what a client is and how it tunes, by name. The
three controls are

    base          the public model, untuned — no defence
    fclean        NOIR's fClean: the same client parameters STuned, no defence
    client_alone  the same parameters tuned with the middle SKIPPED (umbra/middle/skip.py):
                  nothing is sent anywhere; a private mode that does not beat it is not worth it

A variant tuned longer (`@1000`, `@3000`) is held against the client-alone control tuned as long
(`control_for`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from umbra.model.private_path_config import PrivatePathConfig
from umbra.tuning.adversary import AdversaryConfig
from umbra.tuning.config import CLEAN_GATE_LR
from umbra.tuning.gradient_noise import DEFAULT_SIGMA


@dataclass(frozen=True)
class Variant:
    name: str
    label: str
    noir: bool = True  # INDVocab table at the cell's ε + LTokenizer π; False: public table and ids
    stuning: bool = True  # split fine-tuned before it is attacked and evaluated
    middle: str = "cloud"  # "cloud": through the public middle (recorded); "skip": client blocks alone
    gradient_noise: float = 0.0  # σ of the clip-and-noise on the sent gradient (0: exact)
    inversion_penalty: float = 0.0  # λ of the inversion penalty (0: off)
    steps: int | None = None  # tuning steps; None: the run's FrontierParams.tune_steps
    control: bool = False  # a reference row (base, fClean, client alone), not a private mode
    # the private local path (decoder gets y + W·h; what is sent is noised / low-rank), off by default
    private_path: PrivatePathConfig = PrivatePathConfig()
    adversary: AdversaryConfig = AdversaryConfig()  # STuning with a probe in the loop, off by default
    gate_lr: float | None = None  # the clean residual's gate lr (TuneConfig.gate_lr); None: the run's lr
    # rank of the cloud's own LoRA on the middle, trained by the client's STuning backward as the
    # service does with --lora (umbra/middle/lora_local.py; `umbra tune --cloud-lora`); 0: off
    cloud_lora: int = 0
    # False: the cloud runs only the forward pass while the client tunes (TuneConfig.cloud_backward):
    # no gradient is sent, the encoder learns through the private path alone
    cloud_backward: bool = True

    @property
    def needs_epsilon(self) -> bool:
        return self.noir

    @property
    def seed_invariant(self) -> bool:
        """Nothing of the cell depends on its seed: no secret is drawn (no INDVocab table, π or
        path secret), nothing is tuned, no cloud LoRA is initialized — the base model. Every seed
        gives the first seed's client, traffic and measures (the attacks' own seeds are fixed)."""
        return not (self.noir or self.stuning or self.private_path.enabled or self.cloud_lora)


_CLEAN = PrivatePathConfig(enabled=True, residual="clean")

VARIANTS = {v.name: v for v in (
    Variant("base", "base model, untuned (no defence)", noir=False, stuning=False, control=True),
    Variant("fclean", "fClean: STuned, no defence", noir=False, control=True),
    Variant("client_alone", "client blocks alone (middle skipped, nothing sent)", noir=False, middle="skip",
            control=True),
    Variant("noir", "NOIR untuned (INDVocab + LTokenizer)", stuning=False),
    Variant("noir+stuning", "NOIR + STuning"),
    Variant("noir+stuning+noise", "NOIR + STuning, noised gradient", gradient_noise=DEFAULT_SIGMA),
    Variant("noir+stuning+noise+penalty", "NOIR + STuning, noised gradient, inversion penalty",
            gradient_noise=DEFAULT_SIGMA, inversion_penalty=10.0),
    Variant("noir+stuning+noise@1000", "NOIR + STuning (1,000 steps), noised gradient",
            gradient_noise=DEFAULT_SIGMA, steps=1000),
    # longer tuning of a configuration that holds, beside the control at the same budget
    Variant("client_alone@1000", "client blocks alone (1,000 steps; middle skipped, nothing sent)", noir=False,
            middle="skip", control=True, steps=1000),
    Variant("client_alone@3000", "client blocks alone (3,000 steps; middle skipped, nothing sent)", noir=False,
            middle="skip", control=True, steps=3000),
    Variant("noir+stuning+noise+adversary", "NOIR + STuning, noised gradient, adversary in the loop (λ = 5)",
            gradient_noise=DEFAULT_SIGMA, adversary=AdversaryConfig(weight=5.0)),
    Variant("noir+path", "NOIR + private local path (lossless send), noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=PrivatePathConfig(enabled=True)),
    Variant("noir+path+noise1", "NOIR + private local path, keyed noise s = 1, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=PrivatePathConfig(enabled=True, noise=1.0)),
    Variant("noir+path+noise4", "NOIR + private local path, keyed noise s = 4, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=PrivatePathConfig(enabled=True, noise=4.0)),
    Variant("noir+path+rank8+noise1", "NOIR + private local path, rank 8 + keyed noise s = 1, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=PrivatePathConfig(enabled=True, noise=1.0, rank=8)),
    # the clean residual: decoder reads h_c (encoder over the clean public table, never sent) + g ⊙ (y − sent)
    Variant("noir+clean", "NOIR + clean residual (lossless send), noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=_CLEAN, gate_lr=CLEAN_GATE_LR),
    Variant("noir+clean+noise1", "NOIR + clean residual, keyed noise s = 1, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=1.0), gate_lr=CLEAN_GATE_LR),
    Variant("noir+clean+noise4", "NOIR + clean residual, keyed noise s = 4, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=4.0), gate_lr=CLEAN_GATE_LR),
    Variant("noir+clean+rank8+noise1", "NOIR + clean residual, rank 8 + keyed noise s = 1, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=1.0, rank=8), gate_lr=CLEAN_GATE_LR),
    # gate lr is not in the privacy mode's key: this row shares noir+clean+noise1's key (an experiment on the lr)
    Variant("noir+clean+noise1+gate5x", "NOIR + clean residual, keyed noise s = 1, gate lr 5·10⁻², noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=1.0), gate_lr=5 * CLEAN_GATE_LR),
    Variant("noir+clean+noise1+gate5x+exact", "NOIR + clean residual, keyed noise s = 1, gate lr 5·10⁻², exact gradient",
            private_path=replace(_CLEAN, noise=1.0), gate_lr=5 * CLEAN_GATE_LR),
    Variant("noir+clean+noise1@1000", "NOIR + clean residual (1,000 steps), keyed noise s = 1, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=1.0), gate_lr=CLEAN_GATE_LR, steps=1000),
    Variant("noir+clean+noise1@3000", "NOIR + clean residual (3,000 steps), keyed noise s = 1, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=1.0), gate_lr=CLEAN_GATE_LR, steps=3000),
    # `umbra tune`'s default path (DEFAULT_PRIVATE_PATH) tuned longer: what `--steps` buys a user
    Variant("noir+clean+noise4@1000", "NOIR + clean residual (1,000 steps), keyed noise s = 4, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=4.0), gate_lr=CLEAN_GATE_LR, steps=1000),
    Variant("noir+clean+noise4@3000", "NOIR + clean residual (3,000 steps), keyed noise s = 4, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=4.0), gate_lr=CLEAN_GATE_LR, steps=3000),
    Variant("noir+stuning+noise+cloudlora", "NOIR + STuning, noised gradient, the cloud's LoRA (rank 8) tuned alongside",
            gradient_noise=DEFAULT_SIGMA, cloud_lora=8),
    # the clean residual with nothing sent back (forward-only tuning): what the middle's gradient is
    # worth to the encoder, and no gradient for attack (e) to read
    Variant("noir+clean+noise1+forward", "NOIR + clean residual, keyed noise s = 1, forward only (no gradient sent)",
            private_path=replace(_CLEAN, noise=1.0), gate_lr=CLEAN_GATE_LR, cloud_backward=False),
    Variant("noir+clean+noise1+scalar", "NOIR + clean residual (scalar gate), keyed noise s = 1, noised gradient",
            gradient_noise=DEFAULT_SIGMA, private_path=replace(_CLEAN, noise=1.0, gate="scalar"),
            gate_lr=CLEAN_GATE_LR),
)}


def control_for(name: str) -> str:
    """The client-alone control tuned with the same number of steps as `name`: a variant tuned
    longer is held against the client's blocks alone tuned as long (its "− client alone")."""
    steps = VARIANTS[name].steps if name in VARIANTS else None
    longer = f"client_alone@{steps}"
    return longer if steps is not None and longer in VARIANTS else "client_alone"
