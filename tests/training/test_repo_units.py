"""Repository-level units: path headers after <file_sep>, FIM only on a unit's last file,
every document once per epoch, and streams without units unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from umbra.data.corpus import Document, read_split
from umbra.data.tokenizer import EOS, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from umbra.training.config import FimConfig, RepoConfig
from umbra.training.fim import fim_transform, render
from umbra.training.packing import PackedStream, StreamSpec, load_raw_tokenizer
from umbra.training.repo_units import directory_groups, epoch_items, render_item
from umbra.training.vocab_ext import FILE_SEP, VocabExtension, extend_tokenizer

FIM_IDS = (FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX)


@pytest.fixture(scope="module")
def sep_tokenizer(tiny_corpus, tmp_path_factory):
    _, tok_dir = tiny_corpus
    out = tmp_path_factory.mktemp("sep_tok")
    extend_tokenizer(VocabExtension(tok_dir, out))
    return out


def test_units_have_path_headers_and_fim_on_the_last_file_only(tiny_corpus, sep_tokenizer):
    corpus, _ = tiny_corpus
    tok = load_raw_tokenizer(sep_tokenizer)
    docs = read_split(corpus, "train")
    spec = StreamSpec(5, 64, FimConfig(rate=1.0), RepoConfig(rate=0.5, max_unit_chars=10_000))
    ids = PackedStream(docs, tok, spec, None).epoch_tokens(0)
    sep, eos = tok.token_to_id(FILE_SEP), tok.token_to_id(EOS)
    fim = {tok.token_to_id(t) for t in FIM_IDS}
    units = [seq for seq in np.split(ids, np.flatnonzero(ids == eos) + 1) if len(seq) and seq[0] == sep]
    assert len(units) >= 5
    paths = {d.path for d in docs}
    for unit in units:
        files = np.split(unit, np.flatnonzero(unit == sep))[1:]  # each starts with <file_sep>
        assert 2 <= len(files) <= 4
        for k, f in enumerate(files):
            header = tok.decode(f[1:].tolist()).split("\n", 1)[0]
            assert header in paths
            has_fim = bool(set(f.tolist()) & fim)
            assert has_fim == (k == len(files) - 1)  # FIM rate 1: exactly the last file
        dirs = {tok.decode(f[1:].tolist()).split("\n", 1)[0].rsplit("/", 1)[0] for f in files}
        assert len(dirs) == 1  # one directory per unit


def test_every_document_once_and_about_the_rate_in_units():
    docs = [Document("python", f"pkg{i % 7}/m{i}.py", "x = 1\n" * (1 + i % 5)) for i in range(400)]
    cfg = RepoConfig(rate=0.3)
    groups = directory_groups(docs, cfg.max_unit_chars)
    items = epoch_items(docs, groups, cfg, seed=1, epoch=0)
    assert sorted(i for item in items for i in item) == list(range(400))
    in_units = sum(len(it) for it in items if len(it) > 1)
    assert 0.2 < in_units / 400 < 0.4
    assert items == epoch_items(docs, groups, cfg, seed=1, epoch=0)
    assert items != epoch_items(docs, groups, cfg, seed=1, epoch=1)
    big = [Document("go", f"d/{i}.go", "y" * 7000) for i in range(3)]
    assert directory_groups(big, cfg.max_unit_chars) == []  # too large for a unit


def test_a_single_document_renders_as_before():
    doc = Document("python", "a/b.py", "def f():\n    return 1\n")
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    assert render_item([doc], (0,), FimConfig(), FILE_SEP, rng_a) == render(fim_transform(doc.text, FimConfig(), rng_b))


def test_streams_without_units_keep_their_tokens_and_fingerprint(tiny_corpus):
    corpus, tok_dir = tiny_corpus
    tok, docs = load_raw_tokenizer(tok_dir), read_split(corpus, "train")
    plain = PackedStream(docs, tok, StreamSpec(7, 64, FimConfig()), None)
    off = PackedStream(docs, tok, StreamSpec(7, 64, FimConfig(), RepoConfig(rate=0.0)), None)
    assert plain.fingerprint == off.fingerprint
    assert np.array_equal(plain.epoch_tokens(0), off.epoch_tokens(0))
    order = np.random.default_rng([7, 0]).permutation(len(docs))
    assert [it[0] for it in epoch_items(docs, [], None, 7, 0)] == order.tolist()
