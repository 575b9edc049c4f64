"""Per-client LoRA on the middle blocks (NOIR §7: "the cloud may fine-tune a LoRA of the middle").

With `CloudSettings.lora` on, every nn.Linear of the middle blocks (attention q/k/v/o, MLP
gate/up/down) is wrapped by `LoraLinear`, which adds `scale · B(A(x))` of the *active* adapter
and nothing otherwise (bit-identical to the plain layer). Adapters belong to one client — the
name its bearer token resolves to — and are only ever activated around that client's own
forward / backward calls (`LoraStore.use(owner)` in the SessionManager), so another client's
sessions never see them. While an adapter is in training mode, each backward of its owner's
training sessions (MiddleRuntime recomputes the forward with autograd) leaves gradients in A and
B; the store clips them and takes an AdamW step. B starts at zero, so a new adapter changes
nothing until its first step. Adapters live in this process's memory only (restart = gone); the
HTTP routes (server/routes/lora.py) never return their weights.

All calls run on the compute worker's single thread, so `active` needs no locking."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from torch import nn

from umbra.errors import SessionError, ValidationError

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MAX_RANK = 64


@dataclass(frozen=True)
class LoraConfig:
    rank: int = 8  # r of A [r, in] and B [out, r]
    alpha: float = 16.0  # scale = alpha / rank
    lr: float = 1e-3  # AdamW learning rate of the adapter (constant)
    grad_clip: float = 1.0  # max gradient norm of one adapter's parameters per step
    seed: int | None = None  # init of A; None = fresh entropy

    def validate(self) -> "LoraConfig":
        if not 1 <= self.rank <= MAX_RANK:
            raise ValidationError(f"LoRA rank must lie in [1, {MAX_RANK}], got {self.rank}")
        if not (self.alpha > 0 and self.lr > 0 and self.grad_clip > 0):
            raise ValidationError("LoRA alpha, lr and grad_clip must be > 0")
        return self


class Adapter(nn.Module):
    def __init__(self, shapes: dict[str, tuple[int, int]], config: LoraConfig, dtype: torch.dtype):
        super().__init__()
        self.config, self.scale = config, config.alpha / config.rank
        gen = torch.Generator()
        if config.seed is None:
            gen.seed()
        else:
            gen.manual_seed(config.seed)
        self.a = nn.ParameterDict()
        self.b = nn.ParameterDict()
        for key, (fan_out, fan_in) in shapes.items():
            bound = 1.0 / math.sqrt(fan_in)  # kaiming-uniform-like, as in the LoRA paper's code
            a = (torch.rand(config.rank, fan_in, generator=gen, dtype=torch.float32) * 2 - 1) * bound
            self.a[key] = nn.Parameter(a.to(dtype))
            self.b[key] = nn.Parameter(torch.zeros(fan_out, config.rank, dtype=dtype))
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=config.lr, weight_decay=0.0)
        self.training_on = True  # steps after each backward of the owner's training sessions
        self.steps = 0

    def delta(self, key: str, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.a[key].t()) @ self.b[key].t() * self.scale

    def after_backward(self) -> None:
        if self.training_on and any(p.grad is not None for p in self.parameters()):
            torch.nn.utils.clip_grad_norm_(list(self.parameters()), self.config.grad_clip)
            self.optimizer.step()
            self.steps += 1
        self.optimizer.zero_grad(set_to_none=True)

    def info(self) -> dict:
        c = self.config
        return {"enabled": True, "rank": c.rank, "alpha": c.alpha, "lr": c.lr, "train": self.training_on,
                "steps": self.steps, "parameters": sum(p.numel() for p in self.parameters())}


class LoraLinear(nn.Module):
    """An nn.Linear plus the store's active adapter (if any) for this layer's key."""

    def __init__(self, base: nn.Linear, key: str, store: "LoraStore"):
        super().__init__()
        self.base, self.key = base, key
        self._store = (store,)  # a tuple keeps the store out of this module's children

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        adapter = self._store[0].active
        return y if adapter is None else y + adapter.delta(self.key, x)


class LoraStore:
    def __init__(self, blocks: nn.Module):
        self.adapters: dict[str, Adapter] = {}  # client name -> its adapter
        self.active: Adapter | None = None
        self.shapes: dict[str, tuple[int, int]] = {}
        self.dtype = next(blocks.parameters()).dtype
        for path, module in list(blocks.named_modules()):
            for name in TARGETS:
                child = getattr(module, name, None)
                if isinstance(child, nn.Linear):
                    key = f"{path}.{name}".replace(".", "_")
                    setattr(module, name, LoraLinear(child, key, self))
                    self.shapes[key] = (child.out_features, child.in_features)
        if not self.shapes:
            raise ValidationError("the middle blocks have no Linear layers to adapt")

    # -- per-client adapters (callers pass the authenticated client name) ----------------------------
    def configure(self, owner: str, config: LoraConfig) -> dict:
        """A fresh adapter for `owner` (replacing its old one), in training mode."""
        self.adapters[owner] = Adapter(self.shapes, config.validate(), self.dtype)
        return self.adapters[owner].info()

    def _own(self, owner: str) -> Adapter:
        adapter = self.adapters.get(owner)
        if adapter is None:
            raise SessionError("this client has no LoRA adapter")
        return adapter

    def set_training(self, owner: str, train: bool) -> dict:
        adapter = self._own(owner)
        adapter.training_on = bool(train)
        return adapter.info()

    def info(self, owner: str) -> dict:
        adapter = self.adapters.get(owner)
        return adapter.info() if adapter is not None else {"enabled": False}

    def delete(self, owner: str) -> None:
        self._own(owner)
        del self.adapters[owner]

    # -- compute hooks (SessionManager) ------------------------------------------------------------
    @contextlib.contextmanager
    def use(self, owner: str):
        """Activate `owner`'s adapter (if it has one) for the calls inside the block."""
        self.active = self.adapters.get(owner)
        try:
            yield self.active
        finally:
            self.active = None

    def after_backward(self, owner: str) -> None:
        adapter = self.adapters.get(owner)
        if adapter is not None:
            adapter.after_backward()
