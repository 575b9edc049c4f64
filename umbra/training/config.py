"""Typed configuration of the model and of pretraining."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class ModelConfig:
    vocab_size: int = 8192  # must equal the tokenizer's vocabulary
    hidden_size: int = 256  # model width
    num_layers: int = 8  # transformer blocks
    num_heads: int = 8  # attention heads (head dim = hidden_size / num_heads)
    num_kv_heads: int = 4  # grouped-query attention: key/value heads
    intermediate_size: int = 768  # SwiGLU MLP width
    context_length: int = 512  # training block length = max positions
    rope_theta: float = 10_000.0  # rotary embedding base
    tie_embeddings: bool = True  # share input embedding and LM head
    init_std: float = 0.02  # weight init standard deviation


@dataclass
class FimConfig:
    rate: float = 0.5  # share of documents turned into fill-in-the-middle examples
    spm_rate: float = 0.5  # share of FIM examples in suffix-prefix-middle order (rest PSM)


@dataclass
class RepoConfig:
    """Repository-level sequences: files of one directory packed together (see repo_units.py)."""

    rate: float = 0.0  # share of eligible documents grouped into multi-file units (0: off)
    min_files: int = 2  # files per unit, at least
    max_files: int = 4  # files per unit, at most
    max_unit_chars: int = 6_000  # characters per unit, at most (about two 1,024-token blocks)
    file_sep: str = "<file_sep>"  # special token before each file's path header (must be in the vocab)


@dataclass
class TrainConfig:
    corpus_dir: Path = Path("data/corpus")  # built by `umbra data build`
    tokenizer_dir: Path = Path("models/umbra-code-tiny")  # built by `umbra data tokenizer`
    out_dir: Path = Path("runs/pretrain")  # checkpoints, CSV logs, plot, epoch token cache
    export_dir: Path = Path("models/umbra-code-tiny")  # final safetensors + config + tokenizer
    # The line benchmark's held-out code (`umbra data heldout`): training refuses a corpus that
    # shares a project or a file with it. Checked when the directory exists; None: no check.
    heldout_dir: Path | None = None
    seed: int = 1234  # model init, data order and FIM draws derive from it
    batch_size: int = 8  # blocks per optimizer step (tokens/step = batch_size * context_length)
    total_tokens: int = 36_000_000  # training budget; sets the number of steps
    lr: float = 1e-3  # peak learning rate
    min_lr_ratio: float = 0.1  # final lr = lr * min_lr_ratio (cosine decay)
    warmup_steps: int = 300  # linear warmup from 0
    weight_decay: float = 0.1  # AdamW decay on matrices (not on norms)
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0  # max global gradient norm
    bf16: bool = True  # bfloat16 autocast on CPU (fp32 master weights)
    # Set when a bf16 run is resumed with --fp32 (a CPU without native bf16 matmul runs autocast
    # ~50x slower): the step up to which the run used bf16 autocast. Recorded for the model card.
    bf16_until_step: int | None = None
    threads: int = 2  # torch intra-op threads
    # torch.compile the training forward/backward (inductor, C++ kernels via the system compiler):
    # ~1.45x faster steps on a 2-core AVX2 CPU for the default model, ~1 min to compile at start.
    # Validation stays eager (other shapes). Runtime-only: may change on resume.
    compile: bool = False
    eval_every_steps: int = 1000  # validation cadence
    eval_tokens_per_lang: int = 100_000  # validation tokens per language (from the valid split)
    checkpoint_minutes: float = 15.0  # wall-clock checkpoint cadence (also on SIGTERM and at end)
    stop_at_step: int | None = None  # stop early (checkpointed) at this step; schedule unchanged
    model: ModelConfig = field(default_factory=ModelConfig)
    fim: FimConfig = field(default_factory=FimConfig)
    repo: RepoConfig = field(default_factory=RepoConfig)  # off by default (the tiny model's stream)

    def tokens_per_step(self) -> int:
        return self.batch_size * self.model.context_length

    def total_steps(self) -> int:
        return max(1, self.total_tokens // self.tokens_per_step())

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, Path):
                d[k] = str(v)
        return d


def train_config_from_dict(d: dict) -> TrainConfig:
    """Inverse of TrainConfig.to_dict (used to resume with a checkpoint's own settings)."""
    d = dict(d)
    model = ModelConfig(**d.pop("model"))
    fim = FimConfig(**d.pop("fim"))
    repo = RepoConfig(**d.pop("repo", {}))  # checkpoints written before repo units had none
    for key in ("corpus_dir", "tokenizer_dir", "out_dir", "export_dir"):
        d[key] = Path(d[key])
    if d.get("heldout_dir") is not None:
        d["heldout_dir"] = Path(d["heldout_dir"])
    return TrainConfig(model=model, fim=fim, repo=repo, **d)
