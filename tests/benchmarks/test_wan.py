"""benchmarks/wan.py's record of a run (wan_load.py's too): every argument as given, `--bundle-dir`'s path as its text
(a Path in the arguments once made the record's write fail after the whole measurement)."""

from __future__ import annotations

import argparse
import json

from wan import write_record


def test_the_record_keeps_every_argument_a_path_as_its_text(tmp_path):
    args = argparse.Namespace(rtts="0,30", bundle_dir=tmp_path / "bundle", service="umbra", k_max=None)
    out = tmp_path / "wan.json"
    write_record(out, "2026-12-07 15:00", args, results=[{"rtt_ms": 0.0, "texts_differ": 0}])
    record = json.loads(out.read_text())
    assert record["args"] == {"rtts": "0,30", "bundle_dir": str(tmp_path / "bundle"), "service": "umbra", "k_max": None}
    assert record["results"] == [{"rtt_ms": 0.0, "texts_differ": 0}] and record["started"] == "2026-12-07 15:00"
    assert record["machine"]
