"""The deep model's tokenizer: umbra-code-tiny's ids unchanged, <file_sep> = 8192, vocab padded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from umbra.errors import ConfigError
from umbra.training.vocab_ext import FILE_SEP, VocabExtension, extend_tokenizer, pad_embedding, padded_vocab_size

TINY = Path(__file__).resolve().parents[2] / "models" / "umbra-code-tiny"
CODE = "def f(x):\n\treturn x + 1  # café <fim_middle> <file_sep>\r\n"


def test_extension_keeps_every_old_id_and_appends_file_sep(tmp_path):
    vocab = extend_tokenizer(VocabExtension(TINY, tmp_path / "deep"))
    old, new = Tokenizer.from_file(str(TINY / "tokenizer.json")), Tokenizer.from_file(str(tmp_path / "deep" / "tokenizer.json"))
    assert vocab == 8256 and new.get_vocab_size() == 8193
    assert new.token_to_id(FILE_SEP) == 8192 and old.token_to_id(FILE_SEP) is None
    assert {t: i for t, i in new.get_vocab().items() if t != FILE_SEP} == old.get_vocab()
    for tok in (old, new):
        tok.encode_special_tokens = True  # as the packer encodes code
    assert new.encode(CODE, add_special_tokens=False).ids == old.encode(CODE, add_special_tokens=False).ids
    assert new.decode([8192], skip_special_tokens=False) == FILE_SEP
    cfg = json.loads((tmp_path / "deep" / "tokenizer_config.json").read_text())
    assert cfg["additional_special_tokens"][-1] == FILE_SEP and cfg["model_max_length"] == 1024
    with pytest.raises(ConfigError):  # extending twice would shift ids
        extend_tokenizer(VocabExtension(tmp_path / "deep", tmp_path / "again"))


def test_padding_rounds_up_and_new_rows_are_the_mean():
    assert [padded_vocab_size(n, 64) for n in (8192, 8193, 8256, 8257)] == [8192, 8256, 8256, 8320]
    w = torch.randn(10, 4)
    p = pad_embedding(w, 16)
    assert p.shape == (16, 4) and torch.equal(p[:10], w)
    torch.testing.assert_close(p[10:], w.mean(0).expand(6, 4))
    with pytest.raises(ConfigError):
        pad_embedding(w, 9)
