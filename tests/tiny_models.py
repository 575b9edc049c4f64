"""Tiny random Hugging Face models of each supported family, built in memory from configs and
saved to a temporary directory (nothing is downloaded)."""

from __future__ import annotations

from pathlib import Path

import torch

FAMILIES = ["llama", "qwen2-untied", "qwen2-tied", "qwen2-sliding", "mistral"]
# Also built: "llama-plain", a Llama as the embedded default models are (tied embeddings, no
# biases, default RoPE), whose config.json is read without transformers (umbra/model/spec.py):
# the fixture of the tests that start language servers and clouds in their own processes.


def tiny_config(family: str, num_layers: int = 6):
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    common = dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
    )
    if family == "llama":
        return LlamaConfig(**common, attention_bias=True, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64})
    if family == "llama-plain":  # the embedded default models' shape: tied, no biases, default RoPE
        return LlamaConfig(**common, tie_word_embeddings=True)
    if family == "qwen2-untied":
        return Qwen2Config(**common, tie_word_embeddings=False)
    if family == "qwen2-tied":
        return Qwen2Config(**common, tie_word_embeddings=True)
    if family == "qwen2-sliding":
        return Qwen2Config(**common, tie_word_embeddings=True, use_sliding_window=True, sliding_window=8,
                           max_window_layers=2)
    if family == "mistral":
        return MistralConfig(**common, sliding_window=8, tie_word_embeddings=False)
    raise ValueError(family)


def build_tiny_model(family: str, directory: Path, num_layers: int = 6, seed: int = 0, shard: bool = False):
    """Save a random tiny model of `family` to `directory`; return the transformers model."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = tiny_config(family, num_layers)
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # random init is tiny; widen it so logits actually differ across tokens
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    model.save_pretrained(directory, max_shard_size="100KB" if shard else "2GB")
    return model


# -- tiny tokenizers ----------------------------------------------------------------------------

# Special tokens of each fill-in-the-middle style, in the order they get ids 0, 1, ...
FIM_STYLES = {
    # the default model (StarCoder-style, PSM order)
    "starcoder": ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<pad>"],
    # Qwen2.5-Coder
    "qwen": ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
             "<|repo_name|>", "<|file_sep|>"],
    # CodeLlama
    "codellama": ["<s>", "</s>", "▁<PRE>", "▁<MID>", "▁<SUF>", "▁<EOT>"],
    # no FIM tokens at all (template detection must refuse it)
    "plain": ["<|endoftext|>"],
}
_STYLE_ROLES = {  # eos / bos / pad of each style, for tokenizer_config.json
    "starcoder": dict(eos_token="<|endoftext|>", pad_token="<pad>"),
    "qwen": dict(eos_token="<|endoftext|>", pad_token="<|fim_pad|>"),
    "codellama": dict(bos_token="<s>", eos_token="</s>"),
    "plain": dict(eos_token="<|endoftext|>"),
}

CODE_SNIPPETS = [
    "def add(a, b):\n    return a + b\n",
    "def greet(name):\n    message = 'hello ' + name\n    print(message)\n    return message\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n\n"
    "    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n",
    "import os\nimport sys\n\nfor path in sys.argv[1:]:\n    if os.path.exists(path):\n"
    "        print(path, os.path.getsize(path))\n    else:\n        print('missing', path)\n",
    "function square(x) {\n  return x * x;\n}\nconst values = [1, 2, 3].map(square);\n",
    "async def fetch(client, url):\n    response = await client.get(url)\n"
    "    response.raise_for_status()\n    return response.json()\n",
    "numbers = [n * n for n in range(10) if n % 2 == 0]\ntotal = sum(numbers)\n",
    "# naïve café: non-ASCII text → bytes\nwith open('data.txt', encoding='utf-8') as f:\n"
    "    lines = [line.strip() for line in f]\n",
]


def build_tiny_tokenizer(directory: Path, style: str = "starcoder", vocab_size: int = 512):
    """Train a byte-level BPE tokenizer with the special tokens of FIM `style` on CODE_SNIPPETS and
    save it (tokenizer.json, tokenizer_config.json) to `directory`; return the fast tokenizer.
    Ids never exceed `vocab_size` - 1, so it fits the tiny models (vocab 512)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = FIM_STYLES[style]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CODE_SNIPPETS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **_STYLE_ROLES[style])
    Path(directory).mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(directory)
    return fast


def build_tiny_model_dir(directory: Path, family: str = "qwen2-tied", style: str = "starcoder",
                         num_layers: int = 6, seed: int = 0):
    """A complete tiny HF model directory: random weights + config + a tiny FIM tokenizer.
    Returns the transformers model."""
    model = build_tiny_model(family, directory, num_layers=num_layers, seed=seed)
    build_tiny_tokenizer(directory, style)
    return model
