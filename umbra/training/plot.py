"""PNG plot of a run's curves (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def smooth(values: list[float], window: int = 50) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def plot_run(train_rows: list[dict], valid_rows: list[dict], path: Path) -> Path:
    """Training loss + lr vs tokens, validation loss and top-1 per language."""
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    tokens = [int(r["tokens_seen"]) / 1e6 for r in train_rows]
    loss = [float(r["loss"]) for r in train_rows]
    ax = axes[0]
    ax.plot(tokens, loss, alpha=0.25, label="train loss")
    ax.plot(tokens, smooth(loss), label="train loss (smoothed)")
    ax.set_xlabel("tokens (M)")
    ax.set_ylabel("loss (nats)")
    ax.legend(loc="upper right")
    lr_ax = ax.twinx()
    lr_ax.plot(tokens, [float(r["lr"]) for r in train_rows], color="gray", linestyle=":")
    lr_ax.set_ylabel("lr")
    for lang in sorted({r["lang"] for r in valid_rows}):
        rows = [r for r in valid_rows if r["lang"] == lang]
        xs = [int(r["tokens_seen"]) / 1e6 for r in rows]
        axes[1].plot(xs, [float(r["loss"]) for r in rows], marker="o", label=lang)
        axes[2].plot(xs, [float(r["top1"]) for r in rows], marker="o", label=lang)
    axes[1].set_title("validation loss")
    axes[2].set_title("validation top-1 accuracy")
    for ax in axes[1:]:
        ax.set_xlabel("tokens (M)")
        if valid_rows:  # before the first validation there is nothing to label
            ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
