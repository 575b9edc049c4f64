"""A random-weight stand-in for a real code model, built here without downloads.

    python benchmarks/synthetic_model.py OUT [--shape qwen2.5-coder-1.5b] [--dtype bfloat16]
                                             [--shard-bytes 500000000]

Writes OUT/config.json (the shape's config, Qwen2 family), a byte-level BPE tokenizer trained on
this repository's Python sources with Qwen2.5-Coder's special tokens (its ids all below the
config's vocab_size, which is the real model's padded vocabulary: 151,936 rows of embedding),
and safetensors shards + model.safetensors.index.json as `save_pretrained` writes them, in the
checkpoint order (embedding, layer 0 ... layer N-1, final norm), a shard never splitting a layer,
so removing the shards that hold none of one side's tensors leaves that side a working directory.

Tensors are drawn one at a time (normal, std 0.02; norms 1) and written shard by shard, so the
builder never holds more than one shard in memory. `--side client|middle` writes only the shards of
one side's tensors (a directory as a machine serving that side would keep it; the 7B shape's client
side fits this disk and memory where the whole model would not). `--shape small` is the same build at a size the
tests use (4 layers of 64)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

# Qwen2.5-Coder-1.5B's config.json (Qwen/Qwen2.5-Coder-1.5B), and a small model of the same form.
QWEN_CODER_1_5B = dict(
    architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu", hidden_size=1536,
    intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
    vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, use_sliding_window=False, sliding_window=32768, max_window_layers=28,
    bos_token_id=151643, eos_token_id=151643, attention_dropout=0.0, initializer_range=0.02, use_cache=True,
)
SHAPES = {
    "qwen2.5-coder-1.5b": QWEN_CODER_1_5B,
    # Qwen2.5-Coder-7B's block shapes (client-side measurements only: 15 GB in bf16)
    "qwen2.5-coder-7b": {**QWEN_CODER_1_5B, "hidden_size": 3584, "intermediate_size": 18944,
                         "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                         "tie_word_embeddings": False},
    "small": {**QWEN_CODER_1_5B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 2048,
              "max_position_embeddings": 512},
}
# Qwen2.5-Coder's special tokens, in id order after the regular vocabulary
SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
            "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>"]


def layer_tensors(cfg: dict, i: int) -> list[tuple[str, tuple[int, ...]]]:
    """(checkpoint key, shape) of decoder layer i, in the order transformers writes them."""
    c, m = cfg["hidden_size"], cfg["intermediate_size"]
    hd = c // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    p = f"model.layers.{i}."
    return [(p + "input_layernorm.weight", (c,)), (p + "mlp.down_proj.weight", (c, m)),
            (p + "mlp.gate_proj.weight", (m, c)), (p + "mlp.up_proj.weight", (m, c)),
            (p + "post_attention_layernorm.weight", (c,)),
            (p + "self_attn.k_proj.bias", (kv,)), (p + "self_attn.k_proj.weight", (kv, c)),
            (p + "self_attn.o_proj.weight", (c, c)),
            (p + "self_attn.q_proj.bias", (c,)), (p + "self_attn.q_proj.weight", (c, c)),
            (p + "self_attn.v_proj.bias", (kv,)), (p + "self_attn.v_proj.weight", (kv, c))]


def checkpoint_groups(cfg: dict) -> list[list[tuple[str, tuple[int, ...]]]]:
    """The tensors in checkpoint order, grouped so that no shard splits a group (a layer)."""
    c = cfg["hidden_size"]
    groups = [[("model.embed_tokens.weight", (cfg["vocab_size"], c))]]
    groups += [layer_tensors(cfg, i) for i in range(cfg["num_hidden_layers"])]
    tail = [("model.norm.weight", (c,))]
    if not cfg["tie_word_embeddings"]:
        tail.append(("lm_head.weight", (cfg["vocab_size"], c)))
    return groups + [tail]


def _draw(key: str, shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if key.endswith("norm.weight"):
        return torch.ones(shape, dtype=dtype)
    return torch.empty(shape, dtype=torch.float32).normal_(0.0, 0.02, generator=gen).to(dtype)


def side_of(key: str, cfg: dict) -> str:
    """"client" or "middle": the side whose part holds a checkpoint tensor under the default split."""
    from umbra.model.parts import SplitPlan

    if not key.startswith("model.layers."):
        return "client"
    first, last = SplitPlan.default(cfg["num_hidden_layers"]).middle_range(cfg["num_hidden_layers"])
    return "middle" if first <= int(key.split(".")[2]) < last else "client"


def write_weights(out: Path, cfg: dict, dtype: torch.dtype, shard_bytes: int, seed: int = 0,
                  side: str | None = None) -> list[str]:
    """Shards model-0000i-of-0000n.safetensors and the index; returns the shard names written.
    `side` "client" / "middle": only the shards holding that side's tensors are written (the index
    names them all), as a machine that serves one side would keep the directory."""
    size = torch.empty((), dtype=dtype).element_size()
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    filled = 0
    for group in checkpoint_groups(cfg):
        nbytes = sum(torch.Size(s).numel() for _, s in group) * size
        if shards[-1] and filled + nbytes > shard_bytes:
            shards.append([])
            filled = 0
        shards[-1].extend(group)
        filled += nbytes
    names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    gen = torch.Generator().manual_seed(seed)
    weight_map, total = {}, 0
    written = []
    for name, tensors in zip(names, shards):
        weight_map.update({key: name for key, _ in tensors})
        total += sum(torch.Size(shape).numel() for _, shape in tensors) * size
        if side is not None and all(side_of(key, cfg) != side for key, _ in tensors):
            continue
        state = {key: _draw(key, shape, dtype, gen) for key, shape in tensors}
        save_file(state, str(out / name), metadata={"format": "pt"})
        written.append(name)
        del state
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return written


def write_tokenizer(out: Path, vocab_size: int, corpus: list[Path] | None = None) -> int:
    """A byte-level BPE (Qwen2's pre-tokenizer family) with Qwen2.5-Coder's special tokens, trained
    on this repository's Python sources to min(32k, vocab_size) entries; returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    files = corpus if corpus is not None else sorted((Path(__file__).resolve().parents[1] / "umbra").rglob("*.py"))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(32768, vocab_size), special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator((f.read_text(errors="replace") for f in files), trainer=trainer)
    if tok.get_vocab_size() > vocab_size:
        raise SystemExit(f"tokenizer of {tok.get_vocab_size()} entries does not fit vocab_size {vocab_size}")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|fim_pad|>")
    fast.save_pretrained(out)
    return tok.get_vocab_size()


def build(out: str | Path, shape: str = "qwen2.5-coder-1.5b", dtype: torch.dtype = torch.bfloat16,
          shard_bytes: int = 500_000_000, seed: int = 0, corpus: list[Path] | None = None,
          overrides: dict | None = None, side: str | None = None) -> Path:
    """Write the whole directory; returns it. `overrides`: config fields changed from the shape's."""
    if shape not in SHAPES:
        raise SystemExit(f"unknown shape {shape!r} (known: {', '.join(SHAPES)})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(SHAPES[shape], **(overrides or {}), torch_dtype=str(dtype).replace("torch.", ""))
    write_tokenizer(out, cfg["vocab_size"], corpus)
    cfg.update(bos_token_id=0, eos_token_id=0)  # this tokenizer's <|endoftext|> (151643 in the real one)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    write_weights(out, cfg, dtype, shard_bytes, seed, side)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="directory to write (never commit it: runs/ or /tmp)")
    p.add_argument("--shape", default="qwen2.5-coder-1.5b", choices=sorted(SHAPES))
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--shard-bytes", type=int, default=500_000_000, help="largest shard (a layer is never split)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--side", choices=["client", "middle"], default=None,
                   help="write only the shards of this side's tensors (default split; the index names them all)")
    args = p.parse_args(argv)
    out = build(args.out, args.shape, getattr(torch, args.dtype), args.shard_bytes, args.seed, side=args.side)
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e9:.2f} GB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
