"""Split assignment is a deterministic, seeded function of the path; reserved slices are disjoint."""

from __future__ import annotations

from collections import Counter

from umbra.data.manifest import ManifestRow, read_rows, write_rows
from umbra.data.split import RESERVED_PREFIXES, assign_split, cap_order, is_reserved, unit_hash

PATHS = [f"pkg{i % 37}/mod{i}.py" for i in range(5000)]


def test_split_is_deterministic_and_seeded():
    a = [assign_split(1234, p, 0.05, 0.05) for p in PATHS]
    b = [assign_split(1234, p, 0.05, 0.05) for p in PATHS]
    c = [assign_split(99, p, 0.05, 0.05) for p in PATHS]
    assert a == b
    assert a != c
    counts = Counter(a)
    assert 150 < counts["valid"] < 350 and 150 < counts["test"] < 350
    # adding files never moves existing ones
    more = [assign_split(1234, p, 0.05, 0.05) for p in PATHS + ["new/file.py"]]
    assert more[:-1] == a


def test_unit_hash_range_and_cap_order():
    assert all(0.0 <= unit_hash(1, p) < 1.0 for p in PATHS[:200])
    assert cap_order(1, PATHS) == cap_order(1, list(reversed(PATHS)))
    assert sorted(cap_order(1, PATHS)) == sorted(PATHS)


def test_reserved_slices_are_whole_directories_per_language():
    for lang, prefixes in RESERVED_PREFIXES.items():
        for prefix in prefixes:
            assert prefix.endswith("/")
            assert is_reserved(lang, prefix + "x/y.src")
            assert not is_reserved("other", prefix + "x/y.src")
    assert not is_reserved("python", "cpython-3.11/asyncio/tasks.py")


def test_manifest_round_trip(tmp_path):
    rows = [ManifestRow("python", "s", f"s/{i}.py", "0" * 64, i) for i in range(5)]
    write_rows(tmp_path / "m.tsv", rows)
    assert read_rows(tmp_path / "m.tsv") == rows
