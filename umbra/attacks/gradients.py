"""Attack (e): label recovery from the gradients of split fine-tuning.

In STuning the client sends g = ∂L/∂m, the gradient of its loss at the middle's output m (the
cloud computed m itself). With the PUBLIC decoder D (blocks, final norm, head) and z = D(m) the
logits, a cross-entropy loss averaged over the labelled positions gives

    g = α · Jᵀ (P − Y),     J = ∂z/∂m,  P = softmax(z),  Y = one-hot labels,  α = 1 / #labels,

which is LINEAR in the unknown labels. The cloud computes b = α·JᵀP − g = α·JᵀY and scores
every (position s, candidate v) by (J b)[s, v] / ‖γ ⊙ w_v‖ — the inner product of b with the
gradient candidate v would have produced (one forward-mode JVP gives all of them), normalized
by the head row's length after the final norm's gain, which is where candidates' gradient
norms differ. Cauchy–Schwarz makes the true label the maximum, up to cross-position terms.
α is estimated, not assumed: a first guess from J(−g) gives Y₀, α is the least-squares scale
of Jᵀ(P − Y₀) onto g, and the scoring repeats with b (`rounds` times).

The labels are the client's next tokens, i.e. its training code. LTokenizer does not change g
(the head rows and labels are permuted together), INDVocab does not touch the head or the
decoder, so only tuned client blocks (STuning) move D away from the public decoder."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from umbra.attacks.public import PublicModel
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError


@dataclass(frozen=True)
class GradientConfig:
    rounds: int = 2  # refinements after the first guess (each: one VJP and one JVP)

    def validate(self) -> None:
        if self.rounds < 0:
            raise ConfigError("rounds must be >= 0")


class GradientLabelRecovery:
    name = "gradient"

    def __init__(self, public: PublicModel, config: GradientConfig = GradientConfig()):
        config.validate()
        self.public, self.config = public, config
        dec = public.decoder
        n = min(public.tokenizer.size, public.vocab_size)
        self.allowed = torch.zeros(public.vocab_size, dtype=torch.bool)
        self.allowed[:n] = True
        self.row_norm = (dec.lm_head.weight * dec.norm.weight).norm(dim=-1).clamp_min(1e-12)

    def _fn(self, positions: torch.Tensor):
        dec, pos = self.public.decoder, positions[None]
        return lambda x: dec(x[None], pos)[0]

    def _jvp(self, f, m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.MATH):  # the fused CPU kernel has no forward-mode AD
            return torch.func.jvp(f, (m,), (v,))[1]

    @staticmethod
    def _vjp(f, m: torch.Tensor, cotangent: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            x = m.detach().requires_grad_(True)
            return torch.autograd.grad(f(x), x, grad_outputs=cotangent)[0]

    def _pick(self, scores: torch.Tensor) -> torch.Tensor:
        s = (scores / self.row_norm).masked_fill(~self.allowed, float("-inf"))
        return s.argmax(-1)

    @torch.no_grad()
    def guess(self, seq: ObservedSequence) -> np.ndarray | None:
        """Guesses of the tokens at t + 1 (the labels at t), or None without a gradient."""
        if seq.grad is None:
            return None
        f = self._fn(seq.positions)
        m = seq.output if seq.output is not None else self.public.middle(seq.hidden[None].float(), seq.positions[None])[0]
        m, g = m.float(), seq.grad.float()
        labelled = torch.from_numpy(seq.real.copy()) & _has_own_loss(g)
        probs = torch.softmax(f(m), -1) * labelled[:, None]
        y = self._pick(self._jvp(f, m, -g))
        jp = self._vjp(f, m, probs)
        for _ in range(self.config.rounds):
            onehot = torch.zeros_like(probs).scatter_(1, y[:, None], 1.0) * labelled[:, None]
            u = self._vjp(f, m, probs - onehot)
            alpha = float((g * u).sum() / (u * u).sum().clamp_min(1e-30))
            if not alpha > 0:
                break
            y = self._pick(self._jvp(f, m, alpha * jp - g))
        out = np.full(seq.length, -1, dtype=np.int64)
        lab = labelled.numpy()
        nxt = np.where(lab, y.numpy(), -1)
        out[1:] = nxt[:-1]
        return out

    def run(self, sequences: list[ObservedSequence]) -> list[np.ndarray | None]:
        return [self.guess(s) for s in sequences]


def _has_own_loss(g: torch.Tensor) -> torch.Tensor:
    """Positions that can carry a label: all but the trailing run of exactly-zero gradients
    (the last position of a causal LM step has no loss of its own, so nothing reaches it)."""
    nonzero = g.abs().amax(-1) > 0
    keep = torch.ones(g.shape[0], dtype=torch.bool)
    idx = torch.nonzero(nonzero).flatten()
    last = int(idx[-1]) if idx.numel() else -1
    keep[last + 1 :] = False
    return keep
