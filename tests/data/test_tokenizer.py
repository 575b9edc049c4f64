"""decode(encode(x)) == x byte-exactly, on tricky strings and on every test-split file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from umbra.data.corpus import LANGS, corpus_file, read_documents
from umbra.data.stats import roundtrip_failures
from umbra.data.tokenizer import (
    EOS,
    FIM_MIDDLE,
    FIM_PREFIX,
    FIM_SUFFIX,
    PAD,
    SPECIAL_TOKENS,
    TokenizerConfig,
    build_bpe,
    load_tokenizer,
    save_hf_tokenizer,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "models" / "umbra-code-tiny"
CORPUS = REPO / "data" / "corpus"
TRICKY = [
    "def f():\r\n\treturn 'héllo wörld 世界 🚀'\r\n",
    "  leading spaces\n\n\n\t\t\ttabs\ttrailing  \n",
    "func main() {\n\tfmt.Println(\"ß\\u00e9\")\n}\n",
    "x = '<fim_prefix>' + '<|endoftext|>'\n",
    "\ufeffBOM then NUL-free text\x0b\x0c\n",
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The shipped tokenizer if present, else a tiny one built here."""
    if (SHIPPED / "tokenizer.json").exists():
        return load_tokenizer(SHIPPED)
    rng = random.Random(0)
    texts = [f"def f{i}(x):\n\treturn x * {rng.randint(0, 9)}\r\n" for i in range(200)] + TRICKY
    tok = build_bpe(iter(texts), TokenizerConfig(vocab_size=400, min_frequency=1))
    return load_tokenizer(save_hf_tokenizer(tok, tmp_path_factory.mktemp("tok")))


def _test_split_texts() -> list[str]:
    """Every file of the test split (all languages); `scripts/test` builds the corpus."""
    missing = [lang for lang in LANGS if not corpus_file(CORPUS, "test", lang).exists()]
    if missing:
        pytest.fail(f"no test split for {missing} under {CORPUS}: run `umbra data build`")
    return [d.text for lang in LANGS for d in read_documents(CORPUS, "test", lang)]


def test_round_trip_tricky_strings(tokenizer):
    assert roundtrip_failures(tokenizer, TRICKY) == 0


def test_round_trip_every_test_split_file(tokenizer):
    texts = _test_split_texts()
    assert len(texts) > 100
    assert roundtrip_failures(tokenizer, texts) == 0


def test_special_tokens_have_fixed_ids(tokenizer):
    ids = tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    assert ids == list(range(len(SPECIAL_TOKENS)))
    assert tokenizer.eos_token == EOS and tokenizer.pad_token == PAD
    assert tokenizer.encode(FIM_PREFIX + "x" + FIM_SUFFIX + FIM_MIDDLE, add_special_tokens=False)[0] == 1
    assert tokenizer.encode("x = 1", add_special_tokens=True) == tokenizer.encode("x = 1", add_special_tokens=False)


def test_shipped_tokenizer_is_8192_byte_level():
    if not (SHIPPED / "tokenizer.json").exists():
        pytest.fail("models/umbra-code-tiny/tokenizer.json must be committed")
    tok = load_tokenizer(SHIPPED)
    assert len(tok) == 8192
    assert tok.decode(tok.encode("\t\r\n", add_special_tokens=False)) == "\t\r\n"
