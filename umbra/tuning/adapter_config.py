"""How a LoRA is trained on cached trunk states (dual_adapters.py): SecureGate's secure and
revealing adapters and NOESIS's per-language experts. Torch-free: the CLI's parser reads the
defaults."""

from __future__ import annotations

from dataclasses import dataclass

from umbra.errors import ConfigError
from umbra.model.adapters.config import LORA_TARGETS, LoraConfig, Placement


@dataclass(frozen=True)
class AdapterTrainConfig:
    rank: int = 8  # LoRA rank r (paper: r in {4, 8, 12, 16})
    alpha: float | None = None  # LoRA alpha; None = 4·r, the paper's "scaling factor 4×r" (scale 4)
    targets: tuple[str, ...] = LORA_TARGETS  # every attention and MLP projection of the decoder blocks
    lr: float = 2e-3  # AdamW (paper: 1e-4 on 1-3B models; 20x for a rank-8 LoRA on a 256-wide decoder)
    epochs: int = 3  # passes over the view (as in the paper)
    weight_decay: float = 1e-3  # paper App. A.1
    batch_size: int = 8  # blocks per optimizer step
    block_len: int = 256  # tokens per block (the default model's context is 512)
    fim_rate: float = 0.5  # share of texts as FIM examples, as in pretraining (completions use FIM prompts)
    grad_clip: float = 1.0  # max global gradient norm of the adapter
    seed: int = 0  # LoRA init, FIM draws and batch order

    def lora(self) -> LoraConfig:
        alpha = 4.0 * self.rank if self.alpha is None else float(self.alpha)
        return LoraConfig(self.rank, alpha, tuple(self.targets), Placement.DECODER, self.seed).validate()

    def validate(self) -> "AdapterTrainConfig":
        self.lora()
        if not self.lr > 0 or self.weight_decay < 0 or not self.grad_clip > 0:
            raise ConfigError("adapter training needs lr > 0, weight_decay >= 0 and grad_clip > 0")
        if self.epochs < 1 or self.batch_size < 1 or self.block_len < 2:
            raise ConfigError("adapter training needs epochs >= 1, batch_size >= 1 and block_len >= 2")
        if not 0.0 <= self.fim_rate <= 1.0:
            raise ConfigError(f"fim_rate must lie in [0, 1], got {self.fim_rate}")
        return self
