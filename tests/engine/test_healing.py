"""Token healing at the cursor (umbra/engine/healing.py): which prefix tokens the prompt leaves
out, and which ids the constraint lets through, on the default model's tokenizer and on tiny
byte-level tokenizers of every FIM style."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tiny_models import build_tiny_tokenizer
from umbra.engine.healing import MAX_HEALED_TOKENS, HealingConstraint, healed_tokens, unfinished_start
from umbra.engine.tokenizer import ClientTokenizer

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "umbra-code-tiny"
AFTER_INDENT = "def f(x):\n    if x:\n        "


@pytest.fixture(scope="module")
def default_tok() -> ClientTokenizer:
    return ClientTokenizer.from_dir(DEFAULT_MODEL)


@pytest.fixture(scope="module", params=["starcoder", "qwen", "codellama"])
def tiny_tok(request, tmp_path_factory) -> ClientTokenizer:
    d = tmp_path_factory.mktemp(f"tok-{request.param}")
    build_tiny_tokenizer(d, request.param)
    return ClientTokenizer.from_dir(d)


@pytest.mark.parametrize("prefix, start", [
    (AFTER_INDENT, len(AFTER_INDENT) - 8),  # the indentation after Enter
    ("x = ", 3),  # a typed blank
    ("    retu", 4),  # a partial identifier
    ("print('hel", 7),  # a partial word inside a string
    ("\tfoo(\t \t", 5),  # mixed blanks
    ("foo(", 4),  # punctuation: nothing unfinished, only the last token is healed
    ("", 0),
])
def test_unfinished_start(prefix, start):
    assert unfinished_start(prefix) == start


def _healed_text(tok, prefix):
    ids = tok.encode(prefix)
    k = healed_tokens(tok, prefix, ids)
    return tok.decode(ids[-k:]) if k else "", k


@pytest.mark.parametrize("prefix", [AFTER_INDENT, "x = ", "    retu", "print('hel", "\tfoo\n\t\t", "x = foo(",
                                    "def f(x):\n\t    ", "a = 1\r\n    "])
def test_the_healed_text_covers_the_cursors_unfinished_text(default_tok, tiny_tok, prefix):
    for tok in (default_tok, tiny_tok):
        text, k = _healed_text(tok, prefix)
        assert 1 <= k <= MAX_HEALED_TOKENS
        assert prefix.endswith(text) and len(text) >= len(prefix) - unfinished_start(prefix)
        # the fewest tokens that do: one token less would not cover it (unless one token did)
        if k > 1:
            shorter = tok.decode(tok.encode(prefix)[-(k - 1):])
            assert len(shorter) < len(prefix) - unfinished_start(prefix)


def test_after_auto_indent_the_prompt_ends_before_the_newline(default_tok):
    """The default tokenizer writes "\\n        " as one token that training text never holds
    before code: the prompt leaves it out and ends after the previous line."""
    text, k = _healed_text(default_tok, AFTER_INDENT)
    assert text == "\n        " and k == 1


def test_the_healing_is_capped(default_tok):
    prefix = "x = [" + " " * 300
    ids = default_tok.encode(prefix)
    assert healed_tokens(default_tok, prefix, ids) <= MAX_HEALED_TOKENS


def _texts(tok, mask):
    return {tok.decode([i]) for i in torch.nonzero(mask).flatten().tolist()}


def test_the_constraint_lets_the_model_split_the_indentation_its_own_way(default_tok):
    allowed = default_tok.vocab_mask(default_tok.size)
    heal = "\n        "
    c = HealingConstraint(default_tok, heal, allowed)
    first = _texts(default_tok, c.mask(""))
    assert "\n       " in first and "\n" in first and heal in first  # inside the healed text
    assert all(heal.startswith(t) or t.startswith(heal) for t in first)
    assert not any(t.startswith(heal) and t[len(heal):][:1] in (" ", "\t") for t in first)  # no 9th blank
    assert "<|endoftext|>" not in first and "" not in first  # no stop, no special token
    second = _texts(default_tok, c.mask("\n       "))  # one blank left: " if" and the like
    assert " if" in second and " return" in second and " " in second
    assert not any(t.startswith("  ") for t in second)
    after = c.mask(heal)  # the healed text is re-created exactly: the next token starts the code
    texts = _texts(default_tok, after)
    assert "if" in texts and not any(t[:1] in (" ", "\t") for t in texts)
    assert c.mask(heal + "if") is None  # free from then on


def test_without_a_trailing_blank_only_the_healed_text_is_constrained(default_tok):
    allowed = default_tok.vocab_mask(default_tok.size)
    c = HealingConstraint(default_tok, "retu", allowed)
    texts = _texts(default_tok, c.mask(""))
    assert "return" in texts and "re" in texts
    assert c.mask("return") is None  # the heal was passed inside a token: free
    c = HealingConstraint(default_tok, "(", allowed)
    assert c.mask("(") is None  # ended on a boundary, but not after a blank: free


def test_the_constraint_respects_the_requests_own_mask(default_tok):
    allowed = default_tok.vocab_mask(default_tok.size)
    target = default_tok.encode("\n       ")[0]
    narrowed = allowed.clone()
    narrowed[target] = False
    c = HealingConstraint(default_tok, "\n        ", narrowed)
    mask = c.mask("")
    assert not mask[target] and mask.any()
    assert not (mask & ~narrowed).any()


def test_no_heal_no_constraint(default_tok):
    assert HealingConstraint(default_tok, "", default_tok.vocab_mask(default_tok.size)).mask("") is None


def test_ids_of_prefixes(default_tok, tiny_tok):
    for tok in (default_tok, tiny_tok):
        ids = tok.ids_of_prefixes("\n        ", tok.size)
        assert ids and all("\n        ".startswith(tok.decode([i])) for i in ids)
        assert tok.encode("\n")[0] in ids
