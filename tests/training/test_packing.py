"""The packed stream is a deterministic function of (seed, epoch) and respects EOS/FIM ids."""

from __future__ import annotations

import numpy as np

from umbra.data.corpus import read_split
from umbra.data.tokenizer import EOS, FIM_MIDDLE, FIM_PREFIX
from umbra.training.config import FimConfig
from umbra.training.packing import PackedStream, StreamSpec, encode_documents, load_raw_tokenizer
from umbra.training.schedule import lr_at


def _stream(corpus, tok_dir, seed=7, cache=None):
    tok = load_raw_tokenizer(tok_dir)
    return PackedStream(read_split(corpus, "train"), tok, StreamSpec(seed, 64, FimConfig()), cache)


def test_epochs_are_deterministic_and_differ(tiny_corpus, tmp_path):
    corpus, tok_dir = tiny_corpus
    a, b = _stream(corpus, tok_dir), _stream(corpus, tok_dir, cache=tmp_path)
    assert np.array_equal(a.epoch_blocks(0), b.epoch_blocks(0))
    assert np.array_equal(a.epoch_blocks(1), b.epoch_blocks(1))
    assert not np.array_equal(a.epoch_blocks(0)[:4], a.epoch_blocks(1)[:4])
    reloaded = _stream(corpus, tok_dir, cache=tmp_path)  # from the on-disk cache
    assert np.array_equal(reloaded.epoch_blocks(1), a.epoch_blocks(1))
    assert not np.array_equal(_stream(corpus, tok_dir, seed=8).epoch_blocks(0), a.epoch_blocks(0))


def test_batches_advance_and_roll_over(tiny_corpus):
    corpus, tok_dir = tiny_corpus
    s = _stream(corpus, tok_dir)
    n = len(s.epoch_blocks(0))
    first, epoch, block = s.batch(0, 0, 4)
    assert (epoch, block) == (0, 4) and first.shape == (4, 64)
    _, epoch, block = s.batch(0, n - 2, 4)  # tail shorter than a batch -> next epoch
    assert (epoch, block) == (1, 4)


def test_sentinels_are_ids_and_special_strings_in_code_are_text(tiny_corpus):
    _, tok_dir = tiny_corpus
    tok = load_raw_tokenizer(tok_dir)
    ids = encode_documents(tok, [[FIM_PREFIX, "a = '<fim_middle>'", FIM_MIDDLE, "b"]])
    assert ids[0] == tok.token_to_id(FIM_PREFIX) and ids[-1] == tok.token_to_id(EOS)
    assert list(ids).count(tok.token_to_id(FIM_MIDDLE)) == 1
    assert tok.decode(ids[1:-3].tolist()) == "a = '<fim_middle>'"


def test_lr_schedule_warmup_then_cosine():
    lrs = [lr_at(s, 1.0, 10, 110, 0.1) for s in range(110)]
    assert lrs[0] == 0.1 and lrs[9] == 1.0
    assert all(x >= y for x, y in zip(lrs[9:], lrs[10:]))
    assert abs(lr_at(110, 1.0, 10, 110, 0.1) - 0.1) < 1e-12


def test_blocks_are_shuffled_across_files(tiny_corpus):
    corpus, tok_dir = tiny_corpus
    s = _stream(corpus, tok_dir)
    blocks = s.epoch_blocks(0)
    unshuffled = s.epoch_tokens(0)[: blocks.size].reshape(blocks.shape)
    assert not np.array_equal(blocks, unshuffled)
    assert sorted(map(bytes, blocks)) == sorted(map(bytes, unshuffled))  # same blocks, new order
