"""ClientModel: what the client loads from a model directory — spec, split plan, tokenizer, FIM
format and the client parts (encoder, decoder). The monolithic baseline additionally loads the
middle blocks, which a split client never reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from umbra.engine.fim import FimFormat, detect_format
from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import ConfigError
from umbra.model.loader import Checkpoint, load_part
from umbra.model.parts import ClientDecoder, ClientEncoder, MiddleBlocks, SplitPlan
from umbra.model.spec import ModelSpec, load_spec


def check_model_dir(model_dir: str | Path) -> Path:
    """ConfigError with a clear message unless `model_dir` holds config, tokenizer and weights."""
    d = Path(model_dir)
    if not d.is_dir():
        raise ConfigError(f"model directory {d} does not exist (pass --model DIR)")
    missing = [name for name in ("config.json", "tokenizer.json") if not (d / name).is_file()]
    has_weights = (d / "model.safetensors").is_file() or (d / "model.safetensors.index.json").is_file()
    if not has_weights:
        missing.append("model.safetensors")
    if missing:
        hint = " (is the model still training?)" if missing == ["model.safetensors"] else ""
        raise ConfigError(f"model directory {d} is incomplete: missing {', '.join(missing)}{hint}")
    return d


@dataclass
class ClientModel:
    model_dir: Path
    spec: ModelSpec
    plan: SplitPlan
    tokenizer: ClientTokenizer
    fim: FimFormat
    encoder: ClientEncoder
    decoder: ClientDecoder
    checkpoint: Checkpoint
    dtype: torch.dtype = torch.float32

    @classmethod
    def load(cls, model_dir: str | Path, plan: SplitPlan | None = None,
             dtype: torch.dtype = torch.float32) -> "ClientModel":
        d = check_model_dir(model_dir)
        spec = load_spec(d)
        plan = plan or SplitPlan.default(spec.num_layers)
        plan.validate(spec.num_layers)
        tokenizer = ClientTokenizer.from_dir(d)
        if tokenizer.size > spec.vocab_size:
            raise ConfigError(f"tokenizer has {tokenizer.size} tokens but the model only {spec.vocab_size}")
        fim = detect_format(tokenizer)
        ckpt = Checkpoint(d)
        encoder = load_part(d, "encoder", plan, dtype, spec, ckpt)
        decoder = load_part(d, "decoder", plan, dtype, spec, ckpt)
        return cls(d, spec, plan, tokenizer, fim, encoder, decoder, ckpt, dtype)

    def load_middle(self) -> MiddleBlocks:
        """The middle blocks, for the monolithic baseline or an in-process LocalMiddle."""
        return load_part(self.model_dir, "middle", self.plan, self.dtype, self.spec, self.checkpoint)
