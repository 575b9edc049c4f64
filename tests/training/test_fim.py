"""The FIM transform only reorders a document's characters around sentinel tokens."""

from __future__ import annotations

from collections import Counter

import numpy as np

from umbra.data.tokenizer import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from umbra.training.config import FimConfig
from umbra.training.fim import PLAIN, PSM, SPM, SENTINELS, fim_transform, render

DOC = "def f(x):\r\n\treturn x + 1  # é 世界\n\nclass A:\n    pass\n"


def test_prefix_middle_suffix_reconstructs_original():
    rng = np.random.default_rng(0)
    modes = Counter()
    for _ in range(500):
        ex = fim_transform(DOC, FimConfig(rate=0.5, spm_rate=0.5), rng)
        modes[ex.mode] += 1
        assert ex.original() == DOC
        segments = render(ex)
        text = "".join(s for s in segments if s not in SENTINELS)
        assert Counter(text) == Counter(DOC)  # a permutation of the document's characters
        sentinels = [s for s in segments if s in SENTINELS]
        if ex.mode == PLAIN:
            assert segments == [DOC]
        else:
            assert sorted(sentinels) == sorted([FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE])
    assert set(modes) == {PLAIN, PSM, SPM}
    assert 200 < modes[PLAIN] < 300  # rate 0.5


def test_psm_and_spm_layouts():
    rng = np.random.default_rng(1)
    seen = set()
    while len(seen) < 2:
        ex = fim_transform(DOC, FimConfig(rate=1.0, spm_rate=0.5), rng)
        seg = render(ex)
        if ex.mode == PSM:
            assert seg == [FIM_PREFIX, ex.prefix, FIM_SUFFIX, ex.suffix, FIM_MIDDLE, ex.middle]
        else:
            assert seg == [FIM_PREFIX, FIM_SUFFIX, ex.suffix, FIM_MIDDLE, ex.prefix + ex.middle]
        seen.add(ex.mode)


def test_rate_zero_is_plain():
    rng = np.random.default_rng(2)
    assert all(fim_transform(DOC, FimConfig(rate=0.0), rng).mode == PLAIN for _ in range(50))
