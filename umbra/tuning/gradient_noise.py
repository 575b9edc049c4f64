"""Clip-and-noise of the gradient the client sends during STuning — the defence against
attack (e), label recovery from gradients (docs/privacy/attacks.md).

The gradient g = ∂L/∂y at the middle's output is linear in the labels (the client's next
tokens), and the decoder it flows back through is public, so an exact g hands the cloud the
batch's text. Before sending, the client bounds each sequence's share and adds Gaussian noise:

    g_b  = B · g[b]                                  [T, d] gradient of sequence b's own mean loss
    ĝ_b  = g_b · min(1, C / ‖g_b‖₂)                  clip to C
    sent = (ĝ + N(0, σ²C² I)) / B                    [B, T, d], same scale as g

Only the message changes: the client's decoder still learns from its exact local gradient; the
encoder (and a cloud LoRA) learn from what the cloud returns for the noisy message.

Guarantee, stated narrowly: with the client's weights at that step fixed, one message is the
Gaussian mechanism on its sequence, sensitivity 2C under replacing the sequence's content, so
(ε, δ) per message follows from the Gaussian RDP curve with noise multiplier σ/2
(`message_epsilon`; opacus' accountant). It does NOT cover the hidden states sent alongside
(INDVocab's job), repeated messages about the same code (compose with `message_epsilon(k=…)`),
or the client weights, which are trained on the exact data and shape later messages. Read the
attack table, not only ε.

The noise must be unpredictable to the cloud: by default each run draws its generator's seed
from the OS CSPRNG, so a resumed run continues with fresh noise (statistically, not bit-exactly,
the same run). A fixed `seed` is for tests and benchmarks only — whoever knows it can subtract
the noise."""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from umbra.errors import ConfigError

if TYPE_CHECKING:  # the config loads without torch (CLI --help defaults); the methods import it
    import torch


# σ that `umbra tune` uses for a bundle with INDVocab noise, wherever the middle runs: it stops
# label recovery (e), and by slowing what the encoder learns from the middle's reply it keeps the
# tuned states unreadable to attacks (a)–(d) (docs/privacy/utility.md, "The default ε").
DEFAULT_SIGMA = 0.1


def default_sigma(epsilon: float) -> float:
    """σ for a bundle drawn at `epsilon`: DEFAULT_SIGMA with INDVocab noise, 0 without (ε = ∞)."""
    return DEFAULT_SIGMA if math.isfinite(epsilon) else 0.0


@dataclass(frozen=True)
class GradientNoise:
    noise_multiplier: float = 0.0  # σ: noise std per coordinate = σ·C; 0 sends the exact gradient
    # C: bound on ‖g_b‖₂, sequence b's gradient of its own mean token loss. The default is about
    # the median ‖g_b‖ of umbra-code-tiny on 128-token blocks (0.02-0.03); set it per model.
    clip_norm: float = 0.02

    @property
    def enabled(self) -> bool:
        return self.noise_multiplier > 0

    def validate(self) -> "GradientNoise":
        if not (self.noise_multiplier >= 0 and math.isfinite(self.noise_multiplier)):
            raise ConfigError(f"noise_multiplier must be a finite number >= 0, got {self.noise_multiplier}")
        if not (self.clip_norm > 0 and math.isfinite(self.clip_norm)):
            raise ConfigError(f"clip_norm must be a finite number > 0, got {self.clip_norm}")
        return self

    def generator(self, seed: int | None = None) -> torch.Generator:
        """The noise source of one run: seeded from the OS CSPRNG unless `seed` is given."""
        import torch

        g = torch.Generator()
        g.manual_seed(secrets.randbits(63) if seed is None else seed)
        return g

    def apply(self, grad: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The message to send for the exact gradient `grad` [B, T, d] (a new tensor; float32)."""
        if grad.dim() != 3:
            raise ConfigError(f"expected a [batch, tokens, hidden] gradient, got shape {tuple(grad.shape)}")
        if not self.enabled:
            return grad
        import torch

        b = grad.shape[0]
        per_seq = grad.float() * b  # [B, T, d]
        norms = per_seq.flatten(1).norm(dim=1)  # [B]
        scale = (self.clip_norm / norms.clamp_min(1e-12)).clamp(max=1.0)
        clipped = per_seq * scale[:, None, None]
        # drawn on the CPU (the generator's), then moved: the same noise whichever device computes
        noise = torch.randn(clipped.shape, generator=generator, dtype=clipped.dtype, device="cpu").to(clipped.device)
        return ((clipped + noise * (self.noise_multiplier * self.clip_norm)) / b).to(grad.dtype)

    def message_epsilon(self, delta: float = 1e-5, k: int = 1) -> float:
        """ε of `k` messages about the same sequence at `delta` (Gaussian RDP, replace-one
        adjacency: sensitivity 2C, noise σC); inf when the noise is off."""
        if not 0 < delta < 1 or k < 1:
            raise ConfigError("need 0 < delta < 1 and k >= 1")
        if not self.enabled:
            return math.inf
        from opacus.accountants import RDPAccountant
        from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

        orders = RDPAccountant.DEFAULT_ALPHAS
        rdp = compute_rdp(q=1.0, noise_multiplier=self.noise_multiplier / 2, steps=k, orders=orders)
        eps, _ = get_privacy_spent(orders=orders, rdp=rdp, delta=delta)
        return float(eps)
