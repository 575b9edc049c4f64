"""decode_slab: a session's step is bit-identical whatever else shares the slab and wherever it sits,
and in every slab width the start-up check keeps; close to BlockStack.forward's own step (a GEMV's
last bits)."""

from __future__ import annotations

import pytest
import torch

from tiny_models import FAMILIES
from umbra.model.batch_decode import (DecodeStep, decode_slab, check_slab_shape, slab_width, slab_widths,
                                      slabs)
from umbra.errors import ValidationError
from umbra.model.loader import load_middle

WIDTH = 8


def _prefilled(middle, n: int, length: int, seed: int, dtype, padded: bool):
    """`n` sessions, each prefilled with `length + i` random positions (ragged caches)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        t = length + i
        cache = middle.stack.new_cache(dtype)
        x = torch.randn(1, t, middle.spec.hidden_size, generator=g).to(dtype)
        kp = None
        if padded:
            kp = torch.ones(1, t, dtype=torch.bool)
            kp[0, : i % 3] = False
        middle(x, torch.arange(t)[None], cache, kp)
        out.append([cache, kp])
    return out


def _steps(middle, sessions, seed: int, dtype):
    g = torch.Generator().manual_seed(seed)
    steps = []
    for session in sessions:
        cache, kp = session
        x = torch.randn(1, 1, middle.spec.hidden_size, generator=g).to(dtype)
        if kp is not None:  # the session's mask so far plus this step's real slot
            kp = session[1] = torch.cat([kp, torch.ones(1, 1, dtype=torch.bool)], 1)
        steps.append(DecodeStep(x, torch.tensor([[cache.length]]), cache, kp))
    return steps


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_step_is_the_same_alone_and_in_any_company(family, dtype, tiny_model_dirs):
    middle = load_middle(tiny_model_dirs[family]).to(dtype)
    n = 6
    padded = family == "llama"  # one family with key-padding masks of their own per session
    # alone: each session runs three steps in a slab of its own
    alone_sessions = _prefilled(middle, n, 5, 0, dtype, padded)
    alone = []
    for step_seed in range(3):
        steps = _steps(middle, alone_sessions, 100 + step_seed, dtype)
        alone.append([decode_slab(middle.stack, [s], WIDTH)[0] for s in steps])
    # together: the same sessions, all in one slab, in reversed order
    shared_sessions = _prefilled(middle, n, 5, 0, dtype, padded)
    for step_seed in range(3):
        steps = _steps(middle, shared_sessions, 100 + step_seed, dtype)
        order = list(reversed(range(n)))
        outs = decode_slab(middle.stack, [steps[i] for i in order], WIDTH)
        for i, out in zip(order, outs):
            assert torch.equal(out, alone[step_seed][i]), (family, dtype, step_seed, i)
    # the plain path (GEMV for one row) agrees up to rounding
    ref_sessions = _prefilled(middle, n, 5, 0, dtype, padded)
    tol = 1e-5 if dtype == torch.float32 else 0.05
    for step_seed in range(3):
        for (cache, _), s, want in zip(ref_sessions, _steps(middle, ref_sessions, 100 + step_seed, dtype),
                                        alone[step_seed]):
            got = middle(s.x, s.positions, cache, s.key_padding)
            assert (got.float() - want.float()).abs().max() <= tol


def test_slabs_pack_rows_in_order_and_refuse_oversize_steps(tiny_model_dirs):
    middle = load_middle(tiny_model_dirs["qwen2-tied"])
    cache = middle.stack.new_cache()

    def step(rows):
        return DecodeStep(torch.zeros(rows, 1, 64), torch.zeros(rows, 1, dtype=torch.int64), cache)

    assert slabs([step(3), step(3), step(2), step(1), step(8)], 8) == [[0, 1, 2], [3], [4]]
    with pytest.raises(Exception, match="at most 8 rows"):
        slabs([step(9)], 8)


def test_slab_widths_double_from_the_smallest_to_the_largest_and_a_slab_takes_the_first_that_fits():
    assert slab_widths(16, 64) == [16, 32, 64]
    assert slab_widths(16, 48) == [16, 32, 48]
    assert slab_widths(16, 16) == [16] and slab_widths(16, 8) == [8]
    assert [slab_width(r, [16, 32, 64]) for r in (1, 16, 17, 33, 64)] == [16, 16, 32, 64, 64]
    with pytest.raises(Exception, match="at most 64 rows"):
        slab_width(65, [16, 32, 64])
    with pytest.raises(Exception, match="positive"):
        slab_widths(0, 64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("floor,smallest", [(16, False), (1, True)])
def test_every_width_the_check_keeps_gives_each_row_the_bits_of_the_smallest(dtype, floor, smallest, tiny_model_dirs):
    """The start-up check on its own random sessions; then other sessions (ragged, padded, several
    steps) in every kept width equal the same sessions alone in the smallest width, bit for bit.
    With `smallest` (the CPU's default) the check picks the floor itself: the narrowest tried
    width whose bits the widest shares — every narrower one gives some row other bits."""
    middle = load_middle(tiny_model_dirs["llama"]).to(dtype)
    tried = slab_widths(floor, 64)
    shape = check_slab_shape(middle.stack, tried, dtype, smallest=smallest)
    kept = list(shape.widths)
    assert shape.group_slots > 0, "grouped attention is batch-invariant on this machine"
    assert set(kept) <= set(tried) and kept == sorted(kept) and kept[-1] == 64
    assert kept[0] == 16 if not smallest else kept[0] in tried
    for narrower in tried[: tried.index(kept[0])]:  # each gives a row other bits than the widest
        try:
            assert check_slab_shape(middle.stack, slab_widths(narrower, 64), dtype).widths[-1] != 64
        except ValidationError:
            pass  # not even its own slots agree
    runs = {}
    for width in kept:
        sessions = _prefilled(middle, 5, 7, 3, dtype, padded=True)
        runs[width] = []
        for k in range(3):  # in slabs of `width` (5 sessions may take two)
            steps = _steps(middle, sessions, 200 + k, dtype)
            runs[width].append([y for group in slabs(steps, width)
                                for y in decode_slab(middle.stack, [steps[j] for j in group], width, shape.group_slots)])
    sessions = _prefilled(middle, 5, 7, 3, dtype, padded=True)
    alone = [[decode_slab(middle.stack, [s], kept[0], shape.group_slots)[0] for s in _steps(middle, sessions, 200 + k, dtype)]
             for k in range(3)]
    for width in kept:
        for step, base in zip(runs[width], alone):
            assert all(map(torch.equal, step, base)), (width, dtype)


def test_a_lone_step_is_unpadded_only_when_asked_and_the_cpu_picks_its_own_floor():
    from umbra.model.batch_decode import slab_floor, solo_widths

    assert solo_widths((16, 32, 64), True) == (1, 16, 32, 64)
    assert solo_widths((16, 32, 64), False) == (16, 32, 64)
    assert solo_widths((1, 2), True) == (1, 2)  # one row is a checked width already
    assert slab_floor("cpu", None) == (1, True) and slab_floor(torch.device("cpu"), None) == (1, True)
    assert slab_floor("cuda:0", None) == (16, False) and slab_floor(torch.device("cuda"), None) == (16, False)
    assert slab_floor("cpu", 8) == (8, False) and slab_floor("cuda", 4) == (4, False)
