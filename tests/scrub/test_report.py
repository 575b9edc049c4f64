"""umbra/scrub/report.py: per-file entries and the run's report — counts and positions, never a value."""

import json

from umbra.scrub import Scrubber
from umbra.scrub.report import REPORT_FORMAT, ScrubReport, file_entry

SECRETS = ["AKIAQ3EGT2ZJW6PXMN4R", "jane.doe@globex.io", "10.20.30.40", "Jane Doe", "db7.prod.internal"]
TEXT = """# Copyright (c) 2021 Jane Doe
KEY = "AKIAQ3EGT2ZJW6PXMN4R"
OWNER = "jane.doe@globex.io"
HOSTS = ["10.20.30.40", "db7.prod.internal"]
"""


def test_a_file_entry_has_counts_and_positions_only():
    result = Scrubber().scrub(TEXT, path="conf.py")
    entry = file_entry("src/conf.py", result)
    assert entry["path"] == "src/conf.py"
    assert entry["counts"] == {"secret": 1, "url": 0, "email": 1, "host": 1, "ip": 1, "name": 1}
    assert entry["findings"][0] == {"kind": "name", "line": 1, "column": 22, "length": 8}
    dumped = json.dumps(entry)
    for value in SECRETS:
        assert value not in dumped


def test_the_report_totals_skips_and_writes_json(tmp_path):
    scrubber = Scrubber()
    report = ScrubReport()
    report.add("a/conf.py", scrubber.scrub(TEXT, path="conf.py"))
    report.add("a/empty.py", scrubber.scrub("x = 1\n", path="empty.py"))
    report.skip("a/logo.png", "binary")
    assert report.totals() == {"secret": 1, "url": 0, "email": 1, "host": 1, "ip": 1, "name": 1}
    assert report.files_changed() == 1
    path = tmp_path / "out" / "report.json"
    report.write(path)
    data = json.loads(path.read_text())
    assert data["format"] == REPORT_FORMAT
    assert data["files_scanned"] == 2 and data["files_changed"] == 1
    assert data["skipped"] == [{"path": "a/logo.png", "reason": "binary"}]
    raw = path.read_text() + report.summary()
    for value in SECRETS:
        assert value not in raw
    assert "secret 1" in report.summary() and "a/logo.png (binary)" in report.summary()
