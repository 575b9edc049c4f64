"""DocumentBlocks' evaluation windows: a document whole, as consecutive tiles."""

from __future__ import annotations

import numpy as np

from umbra.data.corpus import read_split
from umbra.tuning.doc_blocks import DocumentBlocks


def test_tiles_cover_every_document_whole_and_in_order(model, corpus_dir):
    docs = read_split(corpus_dir, "train")[:7]
    blocks = DocumentBlocks(docs, model.tokenizer, 16)
    tiles, doc = blocks.tiles()
    assert tiles.ids.shape == (len(doc), 16) and tiles.mask.shape == tiles.ids.shape
    assert np.array_equal(np.unique(doc), np.arange(len(docs)))
    assert (np.diff(doc) >= 0).all()  # a document's tiles are consecutive rows
    eos = model.tokenizer.token_id("<|endoftext|>")
    for i, d in enumerate(docs):
        rows = np.flatnonzero(doc == i)
        got = tiles.ids[rows][tiles.mask[rows]].tolist()
        want = model.tokenizer.encode(d.text) + ([eos] if eos is not None else [])
        assert got == want  # every token once, nothing from another document
        assert tiles.mask[rows[:-1]].all()  # only a document's last tile is padded
    assert int(tiles.mask.sum()) == int(blocks.lengths.sum())
    assert (tiles.weight == 1).all()
