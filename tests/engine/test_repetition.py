"""loop_cut: a run of one repeated unit at the end of the generated ids, cut after its first copy."""

from __future__ import annotations

from umbra.engine.repetition import loop_cut


def test_no_loop_no_cut():
    assert loop_cut(list(range(12)), 12) is None
    assert loop_cut([1, 2, 1, 2, 1, 2], 12) is None  # too short a run
    assert loop_cut([5] + [7] * 11, 12) is None  # 11 < 12 repeated ids


def test_a_loop_keeps_one_copy_of_its_smallest_unit():
    assert loop_cut([9, 5, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2], 12) == 4  # [9, 5, 1, 2]
    assert loop_cut([9] + [7] * 12, 12) == 2  # period 1
    assert loop_cut([9, 1, 2, 3, 4] + [1, 2, 3, 4] * 3, 12) == 5


def test_a_unit_longer_than_a_third_is_no_loop():
    ids = [1, 2, 3, 4, 5] * 2 + [1, 2]  # period 5 > 12 // 3: two copies and a bit are not a loop
    assert loop_cut(ids, 12) is None
    assert loop_cut([1, 2, 3] * 4, 12) == 3
    assert loop_cut([1, 2, 3] * 4, 2) is None  # off below 3
