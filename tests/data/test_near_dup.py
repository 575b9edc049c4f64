"""MinHash near duplicates: a lightly edited copy is caught, an unrelated file is not; signatures
are deterministic; the layered DedupIndex names why a file is a duplicate."""

from __future__ import annotations

import numpy as np
import pytest

from umbra.data.config import MinHashConfig
from umbra.data.dedup import DedupIndex
from umbra.data.near_dup import MinHasher, MinHashIndex, estimated_jaccard
from umbra.errors import ConfigError

from .archives import code_text, lightly_edited

CFG = MinHashConfig()


def _true_jaccard(hasher: MinHasher, a: str, b: str) -> float:
    sa, sb = set(hasher.shingles(a).tolist()), set(hasher.shingles(b).tolist())
    return len(sa & sb) / len(sa | sb)


def test_edited_copy_is_caught_and_unrelated_file_is_not():
    hasher, index = MinHasher(CFG), MinHashIndex(CFG)
    original, other = code_text(1), code_text(2)
    edited = lightly_edited(original)
    index.add(hasher.signature(original))
    assert index.is_near_duplicate(hasher.signature(edited))
    assert not index.is_near_duplicate(hasher.signature(other))
    assert index.best_match(hasher.signature(original)) == (0, 1.0)
    # the estimate tracks the true Jaccard of the shingle sets
    for a, b in ((original, edited), (original, other)):
        est = estimated_jaccard(hasher.signature(a), hasher.signature(b))
        assert abs(est - _true_jaccard(hasher, a, b)) < 0.15
    assert _true_jaccard(hasher, original, edited) > 0.8 > 0.1 > _true_jaccard(hasher, original, other)


def test_layout_is_ignored_and_order_matters():
    hasher = MinHasher(CFG)
    text = code_text(3)
    relaid = text.replace("    ", "\t").replace("(", " ( ")
    assert np.array_equal(hasher.signature(text), hasher.signature(relaid))
    shuffled = "\n".join(reversed(text.split(" ")))  # same tokens, other order
    assert estimated_jaccard(hasher.signature(text), hasher.signature(shuffled)) < 0.3


def test_signatures_are_deterministic_and_seeded():
    text = code_text(4)
    a, b = MinHasher(CFG).signature(text), MinHasher(CFG).signature(text)
    assert a.dtype == np.uint64 and a.shape == (CFG.num_perm,) and np.array_equal(a, b)
    assert not np.array_equal(a, MinHasher(MinHashConfig(seed=7)).signature(text))
    assert MinHasher(CFG).shingles("x").shape == (1,)  # fewer tokens than a shingle: one shingle
    assert MinHasher(CFG).shingles("").shape == (1,)


def test_bad_settings_are_refused():
    with pytest.raises(ConfigError, match="multiple of bands"):
        MinHasher(MinHashConfig(num_perm=100, bands=32))
    with pytest.raises(ConfigError, match="threshold"):
        MinHasher(MinHashConfig(threshold=0.0))


def test_dedup_index_reasons_per_language():
    hasher, index = MinHasher(CFG), DedupIndex(CFG)
    text = code_text(5)
    index.add("python", text, hasher.signature(text))

    def match(lang: str, t: str) -> str | None:
        return index.match(lang, t, hasher.signature(t))

    assert match("python", text) == "exact"
    assert match("python", text.replace("\n", "\r\n")) == "whitespace"
    assert match("python", lightly_edited(text)) == "minhash"
    assert match("go", lightly_edited(text)) is None  # MinHash compares within a language
    assert match("python", code_text(6)) is None
    assert index.files == 1
