"""Two pretraining runs side by side at equal tokens: the deep model up-scaled from trained
blocks against the same shape trained from random weights (`python -m umbra.training.deep compare`).

Each run directory holds the trainer's `train_log.csv` (one row per step) and `valid_log.csv`
(one row per language per validation). The table reads both at the same token counts, up to the
tokens the shorter run has seen: training loss as the mean over the 50 steps ending there (one
step's batch is noisy), and the validation rows both runs logged at the same step."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from umbra.errors import ConfigError

WINDOW = 50  # steps averaged into one training-loss point


@dataclass(frozen=True)
class RunCurve:
    name: str
    tokens: list[int]  # tokens seen after each logged step
    loss: list[float]  # that step's training loss
    valid: dict[tuple[int, str], tuple[float, float]]  # (step, lang) -> (loss, top1)


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def read_curve(run_dir: Path) -> RunCurve:
    train = _rows(run_dir / "train_log.csv")
    if not train:
        raise ConfigError(f"{run_dir} has no train_log.csv rows: not a pretraining run directory")
    valid = {(int(r["step"]), r["lang"]): (float(r["loss"]), float(r["top1"]))
             for r in _rows(run_dir / "valid_log.csv")}
    return RunCurve(run_dir.name, [int(r["tokens_seen"]) for r in train], [float(r["loss"]) for r in train], valid)


def mean_loss_at(curve: RunCurve, tokens: int, window: int = WINDOW) -> float:
    """Mean training loss of the `window` logged steps ending at the last one with ≤ tokens."""
    end = max(i for i, t in enumerate(curve.tokens) if t <= tokens) + 1
    chunk = curve.loss[max(0, end - window):end]
    return sum(chunk) / len(chunk)


def milestones(a: RunCurve, b: RunCurve, points: int = 6) -> list[int]:
    """Evenly spaced token counts both runs reached (at least one window in)."""
    last = min(a.tokens[-1], b.tokens[-1])
    first = max(a.tokens[min(WINDOW, len(a.tokens)) - 1], b.tokens[min(WINDOW, len(b.tokens)) - 1])
    if last < first:
        return [last]
    step = (last - first) / max(1, points - 1)
    return sorted({int(first + i * step) for i in range(points)})


def comparison_table(a: RunCurve, b: RunCurve) -> str:
    rows = [f"| tokens seen | {a.name} train loss | {b.name} train loss | difference |", "|---:|---:|---:|---:|"]
    for t in milestones(a, b):
        la, lb = mean_loss_at(a, t), mean_loss_at(b, t)
        rows.append(f"| {t / 1e6:.2f} M | {la:.3f} | {lb:.3f} | {la - lb:+.3f} |")
    shared = sorted(set(a.valid) & set(b.valid))
    if shared:
        rows += ["", f"| step | language | {a.name} valid loss / top-1 | {b.name} valid loss / top-1 |",
                 "|---:|---|---:|---:|"]
        for step, lang in shared:
            (la, ta), (lb, tb) = a.valid[(step, lang)], b.valid[(step, lang)]
            rows.append(f"| {step} | {lang} | {la:.3f} / {ta:.1%} | {lb:.3f} / {tb:.1%} |")
    return "\n".join(rows)


def plot_pair(a: RunCurve, b: RunCurve, path: Path) -> Path:
    from umbra.training.plot import plt, smooth

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for c in (a, b):
        ax.plot([t / 1e6 for t in c.tokens], smooth(c.loss), label=f"{c.name} (smoothed)")
    ax.set_xlabel("tokens (M)")
    ax.set_ylabel("training loss (nats)")
    ax.legend(loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def compare_runs(run_a: Path, run_b: Path, plot: Path | None = None) -> str:
    a, b = read_curve(run_a), read_curve(run_b)
    if plot is not None:
        plot_pair(a, b, plot)
    return comparison_table(a, b)
