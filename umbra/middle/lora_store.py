"""Per-client LoRA on the middle blocks (NOIR §7: "the cloud may fine-tune a LoRA of the middle").

The adapter is the project's one LoRA (`umbra.model.adapters.LoraAdapter`, placement MIDDLE: every
attention and MLP projection of the middle blocks); this module keeps only what is the cloud's:
ownership and training. Adapters belong to one client — the name its bearer token resolves to —
and the SessionManager passes `adapters(owner)` into that client's own forward and backward calls
only (an argument of the forward pass, never a switch on shared modules), so another client's
sessions never see them. While an adapter is in training mode, each backward of its owner's
training sessions (MiddleRuntime recomputes the forward with autograd) leaves gradients in A and
B; the store clips them and takes an AdamW step. B starts at zero, so a new adapter changes
nothing until its first step. Adapters live in this process's memory only (restart = gone); the
HTTP routes (server/routes/lora.py) never return their weights.

It lives in the middle layer, not in server/, because it is the cloud's *computation*, not its
service: the service (server/sessions.py) and an in-process middle with the same LoRA
(umbra/middle/lora_local.py: the benchmarks' simulated cloud, which may not import the service)
run this one implementation. In the service all calls run on the compute worker's single thread."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from umbra.errors import SessionError, ValidationError
from umbra.model.adapters import AdapterSet, LoraAdapter, Placement
from umbra.model.adapters import LoraConfig as AdapterLoraConfig
from umbra.model.adapters.config import SplitShape
from umbra.model.parts import MiddleBlocks

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


class Owned:
    """One client's adapter, its optimizer and its training switch."""

    def __init__(self, adapter: LoraAdapter, config: LoraConfig):
        self.adapter, self.config = adapter.requires_grad_(True), config
        self.optimizer = torch.optim.AdamW(adapter.parameters(), lr=config.lr, weight_decay=0.0)
        self.training_on = True  # steps after each backward of the owner's training sessions
        self.steps = 0
        self._set: tuple[str, AdapterSet] | None = None  # (revision, inference set)

    def inference_set(self) -> AdapterSet:
        """A frozen set for forward passes, rebuilt after each step (new revision)."""
        if self._set is None or self._set[0] != self.adapter.revision:
            self._set = (self.adapter.revision, AdapterSet([self.adapter]))
        return self._set[1]

    def after_backward(self) -> None:
        params = list(self.adapter.parameters())
        if self.training_on and any(p.grad is not None for p in params):
            torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
            self.optimizer.step()
            self.adapter.touch()
            self.steps += 1
        self.optimizer.zero_grad(set_to_none=True)

    def info(self) -> dict:
        c = self.config
        return {"enabled": True, "rank": c.rank, "alpha": c.alpha, "lr": c.lr, "train": self.training_on,
                "steps": self.steps, "parameters": self.adapter.parameter_count}


class LoraStore:
    def __init__(self, blocks: MiddleBlocks):
        stack = blocks.stack
        self.spec = blocks.spec
        # the middle's range as a split: E = first middle block, D = blocks after the last
        self.shape = SplitShape(self.spec.num_layers, stack.first, self.spec.num_layers - stack.last)
        self.dtype = next(blocks.parameters()).dtype
        self.device = next(blocks.parameters()).device  # each client's adapter lives with the blocks
        if stack.first == stack.last:
            raise ValidationError("the middle blocks have no Linear layers to adapt")
        self.adapters: dict[str, Owned] = {}  # client name -> its adapter

    # -- per-client adapters (callers pass the authenticated client name) ----------------------------
    def configure(self, owner: str, config: LoraConfig) -> dict:
        """A fresh adapter for `owner` (replacing its old one), in training mode."""
        config.validate()
        adapter = LoraAdapter(f"cloud-{owner}", AdapterLoraConfig(rank=config.rank, alpha=config.alpha,
                                                                   placement=Placement.MIDDLE, init_seed=config.seed),
                              self.spec, self.shape.blocks(Placement.MIDDLE), self.dtype).to(self.device)
        self.adapters[owner] = Owned(adapter, config)
        return self.adapters[owner].info()

    def _own(self, owner: str) -> Owned:
        owned = self.adapters.get(owner)
        if owned is None:
            raise SessionError("this client has no LoRA adapter")
        return owned

    def set_training(self, owner: str, train: bool) -> dict:
        owned = self._own(owner)
        owned.training_on = bool(train)
        return owned.info()

    def info(self, owner: str) -> dict:
        owned = self.adapters.get(owner)
        return owned.info() if owned is not None else {"enabled": False}

    def delete(self, owner: str) -> None:
        self._own(owner)
        del self.adapters[owner]

    # -- compute hooks (SessionManager) ------------------------------------------------------------
    def adapters_for(self, owner: str, *, training: bool) -> AdapterSet | None:
        """`owner`'s adapter as the set its forward (frozen) or backward (trainable) passes get."""
        owned = self.adapters.get(owner)
        if owned is None:
            return None
        return AdapterSet([owned.adapter], frozen=False) if training else owned.inference_set()

    def after_backward(self, owner: str) -> None:
        owned = self.adapters.get(owner)
        if owned is not None:
            owned.after_backward()
