"""LoraLocalMiddle: the Middle protocol over an in-process middle that holds ONE client's LoRA the
way the cloud service does with `--lora` (umbra/middle/lora_store.py, server/sessions.py): every
forward runs through the adapter frozen, every backward of a training session runs through it
trainable and then lets it take its clipped AdamW step.

It is the cloud that tunes alongside the client in NOIR §7 ("the cloud may fine-tune a LoRA of
the middle"), for what cannot import the service: the privacy-frontier grid tunes a client
against it and then hands the adapter to the attacks, which read the LoRA'd middle the cloud
holds. Tests check it steps exactly as the service does for the same seed."""

from __future__ import annotations

import torch

from umbra.middle.local import LocalMiddle
from umbra.middle.lora_store import LoraConfig, LoraStore
from umbra.model.adapters import AdapterSet, LoraAdapter
from umbra.model.parts import MiddleBlocks

OWNER = "client"  # the one client this middle serves


class LoraLocalMiddle(LocalMiddle):
    def __init__(self, blocks: MiddleBlocks, config: LoraConfig = LoraConfig(), max_seq_len: int | None = None):
        super().__init__(blocks, max_seq_len)
        self.store = LoraStore(blocks)
        self.store.configure(OWNER, config)

    @property
    def adapter(self) -> LoraAdapter:
        """The client's adapter as it stands (trained in place by each training backward)."""
        return self.store.adapters[OWNER].adapter

    @property
    def steps(self) -> int:
        return self.store.adapters[OWNER].steps

    def set_training(self, train: bool) -> None:
        """Start or stop updating the adapter (the service's POST /v1/lora/train)."""
        self.store.set_training(OWNER, train)

    def frozen(self) -> AdapterSet:
        """The adapter as the cloud applies it to this client's inference sessions."""
        return self.store.adapters_for(OWNER, training=False)

    async def forward(self, hidden, positions, session, key_padding=None) -> torch.Tensor:
        return self.runtime.forward(session, hidden, positions, key_padding,
                                    self.store.adapters_for(OWNER, training=False))

    async def backward(self, grad_out, session) -> torch.Tensor:
        grad_in = self.runtime.backward(session, grad_out, self.store.adapters_for(OWNER, training=True))
        self.store.after_backward(OWNER)
        return grad_in
