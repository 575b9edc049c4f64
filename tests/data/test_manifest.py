"""Manifests: deterministic content, change detection, and token statistics that survive an
identical rebuild but not a changed one."""

from __future__ import annotations

import json

from umbra.data.build import _carry_token_stats
from umbra.data.manifest import ManifestRow, read_rows, write_rows, write_summary

ROWS = [ManifestRow("python", "cpython", "b.py", "00" * 32, 10),
        ManifestRow("go", "go", "a.go", "11" * 32, 20)]


def test_write_rows_reports_change(tmp_path):
    path = tmp_path / "train.tsv"
    assert write_rows(path, ROWS) is True
    assert write_rows(path, list(reversed(ROWS))) is False  # same rows, any order: same file
    assert [r.path for r in read_rows(path)] == ["a.go", "b.py"]
    assert write_rows(path, ROWS[:1]) is True


def test_token_stats_carried_only_over_identical_manifests(tmp_path):
    write_summary(tmp_path / "summary.json", {"seed": 1, "tokens": {"go": {"train": 5}},
                                              "tokenizer_vocab_size": 8192})
    same = {"seed": 1}
    _carry_token_stats(tmp_path, same, manifests_changed=False)
    assert same == {"seed": 1, "tokens": {"go": {"train": 5}}, "tokenizer_vocab_size": 8192}
    changed = {"seed": 1}
    _carry_token_stats(tmp_path, changed, manifests_changed=True)
    assert changed == {"seed": 1}
    assert json.loads((tmp_path / "summary.json").read_text())["tokens"] == {"go": {"train": 5}}
