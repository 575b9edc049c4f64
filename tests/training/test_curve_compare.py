"""Two runs' curves at equal tokens (umbra/training/curve_compare.py), from real log files."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from umbra.errors import ConfigError
from umbra.training import deep
from umbra.training.curve_compare import compare_runs, mean_loss_at, milestones, read_curve


def _write_run(root: Path, name: str, steps: int, loss_of, valid: dict | None = None) -> Path:
    run = root / name
    run.mkdir()
    with (run / "train_log.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "tokens_seen", "lr", "loss", "grad_norm", "elapsed_s", "tokens_per_s"])
        for s in range(1, steps + 1):
            w.writerow([s, s * 4096, 5e-4, loss_of(s), 1.0, s, 700])
    with (run / "valid_log.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "tokens_seen", "lang", "loss", "top1", "tokens"])
        for (step, lang), (loss, top1) in (valid or {}).items():
            w.writerow([step, step * 4096, lang, loss, top1, 50000])
    return run


def test_the_table_reads_both_runs_at_equal_tokens_up_to_the_shorter(tmp_path):
    up = _write_run(tmp_path, "upscaled", 300, lambda s: 2.0, {(200, "python"): (2.1, 0.55)})
    scratch = _write_run(tmp_path, "scratch", 200, lambda s: 6.0 - s / 100, {(200, "python"): (4.0, 0.2)})
    a, b = read_curve(up), read_curve(scratch)
    points = milestones(a, b)
    assert points[-1] == 200 * 4096 and points[0] == 50 * 4096  # never past the shorter run
    # the mean of the 50 steps ending at step 200: 6 - (151..200)/100
    assert mean_loss_at(b, 200 * 4096) == pytest.approx(6.0 - 175.5 / 100)
    table = compare_runs(up, scratch, tmp_path / "pair.png")
    assert "| 0.82 M | 2.000 | 4.245 | -2.245 |" in table
    assert "| 200 | python | 2.100 / 55.0% | 4.000 / 20.0% |" in table
    assert (tmp_path / "pair.png").stat().st_size > 1000


def test_a_directory_without_a_training_log_is_a_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no train_log.csv"):
        read_curve(tmp_path / "empty")


def test_an_unknown_init_is_refused_before_anything_is_built(tmp_path):
    with pytest.raises(ConfigError, match="init must be one of"):
        deep.start(deep.DeepRunConfig(out_dir=tmp_path / "run", init="random"))
    assert not (tmp_path / "run").exists()
