"""Per-document scores: a document's tiles summed give the whole document's score."""

from __future__ import annotations

import numpy as np
import pytest

from tiny_models import CODE_SNIPPETS
from umbra.data.corpus import Document
from umbra.errors import ConfigError
from umbra.evaluation.doc_scores import DocScores, doc_scores
from umbra.middle.local import LocalMiddle
from umbra.tuning.doc_blocks import DocumentBlocks


def test_grouped_sums_rows_by_document():
    s = DocScores(np.array([3, 2, 4, 1]), np.array([1, 0, 2, 1]), np.array([3.0, 1.0, 2.0, 0.5]))
    g = s.grouped(np.array([0, 0, 2, 2]), 3)
    assert g.count.tolist() == [5, 0, 5] and g.correct.tolist() == [1, 0, 3] and g.loss.tolist() == [4.0, 0.0, 2.5]
    assert g.accuracy == s.accuracy and g.mean_loss == s.mean_loss
    assert g.log_likelihood.tolist() == [-0.8, 0.0, -0.5]
    for bad in (np.array([0, 1, 2]), np.array([0, 1, 2, 3]), np.array([-1, 0, 0, 0])):
        with pytest.raises(ConfigError, match="group"):
            s.grouped(bad, 3)


@pytest.fixture(scope="module")
def model(fim_qwen2_dir):
    from umbra.engine import ClientModel

    return ClientModel.load(fim_qwen2_dir)


async def test_a_document_scored_whole_or_in_tiles(model):
    """One tile per document (the block holds it whole) against 16-token tiles summed by document:
    every token of the document is predicted once, except each tile's first."""
    docs = [Document("python", f"d{i}", "".join(CODE_SNIPPETS[i : i + 2])) for i in range(4)]
    middle = LocalMiddle(model.load_middle())
    wide, narrow = DocumentBlocks(docs, model.tokenizer, 512), DocumentBlocks(docs, model.tokenizer, 16)
    one, one_doc = wide.tiles()
    assert one_doc.tolist() == list(range(len(docs)))
    whole = (await doc_scores(model, middle, one.ids, one.mask)).grouped(one_doc, len(docs))
    tiles, doc = narrow.tiles()
    tiled = (await doc_scores(model, middle, tiles.ids, tiles.mask)).grouped(doc, len(docs))
    assert whole.count.tolist() == (wide.lengths - 1).tolist()
    assert tiled.count.tolist() == (narrow.lengths - np.bincount(doc, minlength=len(docs))).tolist()
    # losing a little context at tile edges costs likelihood on a trained model; here (random
    # weights) only: finite, negative, and the same documents' order of magnitude
    assert np.isfinite(tiled.log_likelihood).all() and (tiled.log_likelihood < 0).all()
    assert np.allclose(tiled.log_likelihood, whole.log_likelihood, rtol=0.5)
