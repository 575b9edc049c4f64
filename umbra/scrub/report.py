"""The scrub report: per file, its path, counts per kind and each finding's kind, line, column and
length — never a found value, so the report can be shared or committed beside the scrubbed view.

    {"format": "umbra-scrub-report/v1", "totals": {"secret": 3, ...}, "files_scanned": 12,
     "files_changed": 4, "files": [{"path": "src/db.py", "counts": {...},
     "findings": [{"kind": "secret", "line": 7, "column": 12, "length": 40}, ...]}, ...],
     "skipped": [{"path": "img/logo.png", "reason": "binary"}]}"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from umbra.atomic import write_atomic
from umbra.scrub.findings import KINDS
from umbra.scrub.scrubber import ScrubResult

REPORT_FORMAT = "umbra-scrub-report/v1"


def file_entry(path: str, result: ScrubResult) -> dict:
    """One file's report entry (`path` as it appears in the mirror, '/'-separated)."""
    return {"path": path, "counts": result.counts(), "findings": [f.to_json() for f in result.findings]}


@dataclass
class ScrubReport:
    files: list[dict] = field(default_factory=list)  # file_entry() of every scrubbed file, in walk order
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"} of files not scrubbed (not copied)

    def add(self, path: str, result: ScrubResult) -> None:
        self.files.append(file_entry(path, result))

    def skip(self, path: str, reason: str) -> None:
        self.skipped.append({"path": path, "reason": reason})

    def totals(self) -> dict[str, int]:
        return {kind: sum(f["counts"][kind] for f in self.files) for kind in KINDS}

    def files_changed(self) -> int:
        return sum(1 for f in self.files if f["findings"])

    def to_json(self) -> dict:
        return {
            "format": REPORT_FORMAT,
            "totals": self.totals(),
            "files_scanned": len(self.files),
            "files_changed": self.files_changed(),
            "files": self.files,
            "skipped": self.skipped,
        }

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, (json.dumps(self.to_json(), indent=2) + "\n").encode("utf-8"), mode=0o644)

    def summary(self) -> str:
        """A few lines for a terminal: files, per-kind counts, skipped files (no values)."""
        totals = self.totals()
        lines = [f"scrubbed {len(self.files)} file(s), {self.files_changed()} changed; "
                 f"{sum(totals.values())} finding(s)",
                 "  " + "  ".join(f"{kind} {totals[kind]}" for kind in KINDS)]
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} file(s), not copied: "
                         + ", ".join(f"{s['path']} ({s['reason']})" for s in self.skipped[:5])
                         + (" ..." if len(self.skipped) > 5 else ""))
        return "\n".join(lines)
