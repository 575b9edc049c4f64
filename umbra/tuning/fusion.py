"""Personalized adapter fusion (seed 003 §4.3, eqs. 6-8): an organization's adapter fused with the
global secure adapter, ΔW_p = w1·ΔW_global + w2·ΔW_local, with (w1, w2) fitted on a held-out
query set by min_w CE(w; Q) + ψ·(|w1| + |w2|) (eq. 7). The global adapter is the federation's
(umbra.federation) or, without one, the organization's own secure one.

    fused = fuse_lora(global_adapter, local_adapter, w1, w2, "revealing-personal")
    fit = await fit_fusion_weights(model, middle, query_texts, global_adapter, local_adapter, psi=0.01)
    fused = fuse_lora(global_adapter, local_adapter, *fit.weights, name)

`fuse_lora` is exact, by rank concatenation: with each adapter's own scale s folded into its B,
    w1·s_g·B_g A_g + w2·s_l·B_l A_l = [w1·s_g·B_g | w2·s_l·B_l] · [A_g; A_l],
a LoRA of rank r_g + r_l and scale 1 whose every ΔW equals the weighted sum (a target only one
adapter has gets zero rows/columns from the other).

The optimizer. The paper follows LoraHub, which fits its weights by black-box search (it fuses
many adapters behind an API without gradients). Here there are two scalars and the exact gradient
costs one backward through the decoder on cached states (the trunk does not depend on decoder
adapters, so the query set's middle outputs are computed once through the Middle). So: proximal
gradient descent (ISTA) with backtracking on the smooth CE and the soft-threshold step for the L1
term, which is the exact proximal operator of ψ·|w|: it sets a weight to exactly 0 once ψ exceeds
the magnitude of its gradient, the sparsity eq. 7 asks for and which a black-box search reaches
only approximately. Each iteration is deterministic (full query set, no sampling)."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from umbra.errors import ConfigError
from umbra.middle.protocol import Middle
from umbra.model.adapters.config import LORA_TARGETS, LoraConfig
from umbra.model.adapters.modules import Adapter, LoraAdapter
from umbra.model.adapters.selection import AdapterSet
from umbra.tuning.dual_adapters import frozen, lm_loss, pack_view, trunk_states


def check_fusable(global_adapter: LoraAdapter, local_adapter: LoraAdapter) -> tuple[LoraAdapter, LoraAdapter]:
    """The pair, if both are LoRAs on the same blocks (ConfigError otherwise)."""
    g, loc = global_adapter, local_adapter
    if not (isinstance(g, LoraAdapter) and isinstance(loc, LoraAdapter)):
        raise ConfigError("fusion takes two LoRA adapters")
    if g.config.placement is not loc.config.placement or g.blocks != loc.blocks:
        raise ConfigError(f"cannot fuse {g.name} and {loc.name}: they sit on different blocks")
    return g, loc


def fuse_lora(global_adapter: LoraAdapter, local_adapter: LoraAdapter, w1: float, w2: float,
              name: str) -> LoraAdapter:
    """The LoRA whose every ΔW is w1·(global's ΔW) + w2·(local's ΔW), exactly (see the module doc)."""
    g, loc = check_fusable(global_adapter, local_adapter)
    if not (math.isfinite(w1) and math.isfinite(w2)):
        raise ConfigError("fusion weights must be finite")
    r = g.config.rank + loc.config.rank
    targets = tuple(t for t in LORA_TARGETS if t in g.config.targets or t in loc.config.targets)
    config = LoraConfig(r, float(r), targets, g.config.placement, 0)  # scale 1: folded into B
    fused = LoraAdapter.__new__(LoraAdapter)  # built from tensors: no model spec needed
    Adapter.__init__(fused, name, config, g.blocks)
    fused.scale = config.scale
    fused.layers = nn.ModuleDict()
    pair_type = type(next(iter(next(iter(g.layers.values())).values())))
    for block in g.layers:
        per = nn.ModuleDict()
        for target in targets:
            ref = g.layers[block][target] if target in g.layers[block] else loc.layers[block][target]
            fan_out, fan_in = ref.b.shape[0], ref.a.shape[1]
            a_parts, b_parts = [], []  # A_i [r_i, in], w_i·s_i·B_i [out, r_i]
            for adapter, w in ((g, w1), (loc, w2)):
                if target in adapter.layers[block]:
                    pair = adapter.layers[block][target]
                    a_parts.append(pair.a.detach())
                    b_parts.append(pair.b.detach() * (w * adapter.scale))
                else:  # this adapter leaves the target alone: zero rows of A, zero columns of B
                    a_parts.append(torch.zeros(adapter.config.rank, fan_in, dtype=ref.a.dtype))
                    b_parts.append(torch.zeros(fan_out, adapter.config.rank, dtype=ref.b.dtype))
            dtype = torch.promote_types(a_parts[0].dtype, a_parts[1].dtype)
            per[target] = pair_type(torch.cat(a_parts).to(dtype), torch.cat(b_parts, dim=1).to(dtype), ("a", "b"))
        fused.layers[block] = per
    return fused.requires_grad_(False)


@dataclass(frozen=True)
class FusionConfig:
    init: tuple[float, float] = (0.5, 0.5)  # (w1, w2) at the start: the two adapters weighed alike
    max_iters: int = 40  # proximal-gradient iterations at most
    step: float = 1.0  # first trial step size (halved by backtracking until the CE decreases enough)
    tol: float = 1e-4  # stop when no weight moves more than this in an iteration
    block_len: int = 256  # tokens per block of the query set
    batch_size: int = 8  # blocks per forward

    def validate(self) -> "FusionConfig":
        if self.max_iters < 1 or not self.step > 0 or not self.tol > 0 or self.block_len < 2 or self.batch_size < 1:
            raise ConfigError("fusion needs max_iters >= 1, step > 0, tol > 0, block_len >= 2, batch_size >= 1")
        return self


@dataclass(frozen=True)
class FusionResult:
    weights: tuple[float, float]  # (w1 on the global adapter, w2 on the local one)
    loss: float  # mean query CE at the weights
    objective: float  # loss + ψ·(|w1| + |w2|)
    iterations: int
    converged: bool
    history: tuple[tuple[float, float, float], ...]  # (w1, w2, objective) after each iteration


def soft_threshold(w: torch.Tensor, t: float) -> torch.Tensor:
    """prox of t·|w|: shrink every entry towards 0 by t, exactly 0 inside [-t, t]."""
    return torch.sign(w) * torch.clamp(w.abs() - t, min=0.0)


def _weighted(adapter: LoraAdapter, weight: torch.Tensor, name: str) -> LoraAdapter:
    """A shallow copy sharing the adapter's tensors whose scale is s·weight (a tensor: the training
    AdapterSet multiplies B by the scale, so the CE is differentiable in the weight)."""
    view = copy.copy(adapter)
    view.name, view.scale = name, adapter.scale * weight
    return view


async def fit_fusion_weights(model, middle: Middle, query_texts: list[str], global_adapter: LoraAdapter,
                             local_adapter: LoraAdapter, psi: float,
                             config: FusionConfig = FusionConfig()) -> FusionResult:
    """Eq. 7 on `query_texts` (held out from the local adapter's training): the weights (w1, w2)
    minimizing mean next-token CE + ψ·(|w1| + |w2|), by proximal gradient with backtracking."""
    config.validate()
    if not psi >= 0:
        raise ConfigError(f"psi must be >= 0, got {psi}")
    check_fusable(global_adapter, local_adapter)
    blocks = pack_view(model.tokenizer, list(query_texts), config.block_len)
    hidden = await trunk_states(model, middle, blocks.ids, config.batch_size)
    pos = torch.arange(blocks.ids.shape[1])

    def ce(w: torch.Tensor, grad: bool) -> tuple[float, torch.Tensor | None]:
        """Mean CE over every query token at weights w [2] (and its gradient)."""
        w = w.detach().requires_grad_(grad)
        total, count = torch.zeros(()), 0
        with torch.set_grad_enabled(grad):
            for i in range(0, len(hidden), config.batch_size):
                sl = slice(i, i + config.batch_size)
                aset = AdapterSet([_weighted(global_adapter, w[0], "fusion-global"),
                                   _weighted(local_adapter, w[1], "fusion-local")], frozen=False)
                logits = model.decoder(hidden[sl], pos.expand(hidden[sl].shape[0], -1), adapters=aset)
                n = int((blocks.mask[sl, 1:] & blocks.mask[sl, :-1]).sum())
                part = lm_loss(logits, blocks.ids[sl], blocks.mask[sl]) * n
                if grad:
                    part.backward()
                total, count = total + part.detach(), count + n
        loss = float(total) / max(count, 1)
        return loss, (w.grad / max(count, 1) if grad else None)

    w = torch.tensor(config.init, dtype=torch.float32)
    history, step, converged = [], config.step, False
    with frozen(model.decoder):
        loss, g = ce(w, grad=True)
        for _ in range(config.max_iters):
            while True:  # backtracking: accept when the smooth part's quadratic bound holds
                new = soft_threshold(w - step * g, step * psi)
                new_loss, _ = ce(new, grad=False)
                d = new - w
                if new_loss <= loss + float(g @ d) + float(d @ d) / (2 * step) + 1e-7 or step < 1e-6:
                    break
                step /= 2
            moved = float(d.abs().max())
            w, loss = new, new_loss
            history.append((float(w[0]), float(w[1]), loss + psi * float(w.abs().sum())))
            if moved < config.tol:
                converged = True
                break
            loss, g = ce(w, grad=True)
            step = min(step * 2, config.step * 64)  # let the step grow back after a cautious stretch
    return FusionResult((float(w[0]), float(w[1])), loss, loss + psi * float(w.abs().sum()), len(history),
                        converged, tuple(history))
