"""A run directory's logs: per-step training metrics and periodic validation metrics (CSV),
and the record of schedule changes made on resume (JSON).

On resume, rows past the checkpoint's step (written after the last checkpoint by an interrupted
run) are dropped so the logs describe exactly one trajectory."""

from __future__ import annotations

import csv
import json
from pathlib import Path

TRAIN_FIELDS = ("step", "tokens_seen", "lr", "loss", "grad_norm", "elapsed_s", "tokens_per_s")
VALID_FIELDS = ("step", "tokens_seen", "lang", "loss", "top1", "tokens")
SCHEDULE_CHANGES_NAME = "schedule_changes.json"  # `--resume --total-tokens N` moves the cosine's end


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


def record_schedule_change(out_dir: Path, step: int, old_total_tokens: int, new_total_tokens: int) -> None:
    """Append one change of the run's token budget (made when resuming at `step`); a no-op when
    the budget does not change. The export copies the list into the model's provenance."""
    if old_total_tokens == new_total_tokens:
        return
    changes = read_schedule_changes(out_dir)
    changes = [c for c in changes if c["step"] < step]  # a redo of a resume replaces the old record
    changes.append({"step": step, "old_total_tokens": old_total_tokens, "new_total_tokens": new_total_tokens})
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SCHEDULE_CHANGES_NAME).write_text(json.dumps(changes, indent=2) + "\n")


def read_schedule_changes(out_dir: Path) -> list[dict]:
    path = out_dir / SCHEDULE_CHANGES_NAME
    return json.loads(path.read_text()) if path.exists() else []
