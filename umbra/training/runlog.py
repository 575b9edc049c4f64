"""CSV logs of a run: per-step training metrics and periodic validation metrics.

On resume, rows past the checkpoint's step (written after the last checkpoint by an interrupted
run) are dropped so the logs describe exactly one trajectory."""

from __future__ import annotations

import csv
from pathlib import Path

TRAIN_FIELDS = ("step", "tokens_seen", "lr", "loss", "grad_norm", "elapsed_s", "tokens_per_s")
VALID_FIELDS = ("step", "tokens_seen", "lang", "loss", "top1", "tokens")


class CsvLog:
    def __init__(self, path: Path, fields: tuple[str, ...]):
        self.path, self.fields = path, fields

    def truncate_after(self, step: int) -> None:
        """Keep only rows with step <= `step` (all rows are dropped when step == 0)."""
        rows = [r for r in self.read() if int(r["step"]) <= step]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=self.fields)
            w.writeheader()
            w.writerows(rows)

    def append(self, row: dict) -> None:
        new = not self.path.exists()
        with self.path.open("a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=self.fields)
            if new:
                w.writeheader()
            w.writerow(row)

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        with self.path.open(newline="") as fh:
            return list(csv.DictReader(fh))
