"""ClientTokenizer: ids, special tokens, EOS discovery and protection against token injection."""

from __future__ import annotations

import json

import pytest

from tiny_models import build_tiny_tokenizer
from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import ConfigError


def test_round_trip_and_specials(tmp_path):
    build_tiny_tokenizer(tmp_path, "starcoder")
    tok = ClientTokenizer.from_dir(tmp_path)
    text = "def add(a, b):\n    return a + b  # café\n"
    assert tok.decode(tok.encode(text)) == text
    assert tok.eos_ids == {tok.token_id("<|endoftext|>")}
    assert {tok.token_id(t) for t in ("<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<pad>")} <= tok.special_ids
    assert tok.encode("") == []


def test_control_tokens_in_user_text_are_plain_text(tmp_path):
    build_tiny_tokenizer(tmp_path, "starcoder")
    tok = ClientTokenizer.from_dir(tmp_path)
    ids = tok.encode("x = '<fim_middle><|endoftext|>'")
    assert not set(ids) & tok.special_ids
    assert tok.decode(ids) == "x = '<fim_middle><|endoftext|>'"


def test_offsets_are_character_spans(tmp_path):
    build_tiny_tokenizer(tmp_path, "qwen")
    tok = ClientTokenizer.from_dir(tmp_path)
    text = "import os\nprint(os.getcwd())\n"
    ids, offs = tok.encode_with_offsets(text)
    assert len(ids) == len(offs)
    assert "".join(text[a:b] for a, b in offs) == text


def test_eos_from_config_json(tmp_path):
    build_tiny_tokenizer(tmp_path, "codellama")
    tok = ClientTokenizer.from_dir(tmp_path)
    eot = tok.token_id("▁<EOT>")
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [eot, 99999]}))
    tok = ClientTokenizer.from_dir(tmp_path)
    assert tok.eos_ids == {tok.token_id("</s>"), eot}
    assert tok.bos_id == tok.token_id("<s>")


def test_missing_or_broken_tokenizer_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no tokenizer.json"):
        ClientTokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        ClientTokenizer.from_dir(tmp_path)


def test_ids_starting_with_is_the_same_set_in_private_order(tmp_path):
    """Token healing's constraint: the ids whose text extends a string, in either id space."""
    from umbra.privacy.ltokenizer import Permutation

    build_tiny_tokenizer(tmp_path, "starcoder")
    public = ClientTokenizer.from_dir(tmp_path)
    mask = public.ids_starting_with(" ", public.size)
    assert mask.any() and all(public.decode([i]).startswith(" ") for i in mask.nonzero().flatten().tolist())
    assert not public.ids_starting_with("", public.size).any()
    perm = Permutation.random(public.size)
    private = public.with_permutation(perm)
    pmask = private.ids_starting_with(" ", public.size)
    assert sorted(perm.to_public(pmask.nonzero().flatten().tolist())) == mask.nonzero().flatten().tolist()
