"""Membership inference from per-document scores (seed 000 App. C.4): ROC, AUC, TPR at a low
false-positive rate, bootstrap intervals, and the ROC plot as a dependency-free SVG.

A higher score means "member" (the attack's score is a document's mean log-likelihood under the
model: training documents tend to be likelier). Everything here is numpy on two score arrays, so
the same functions serve any attack that ranks documents.

    r = membership_result(member_scores, nonmember_scores, seed=0)
    r.auc, r.auc_ci, r.tpr_at_1pct
    write_roc_svg({"go ← python": roc_curve(m, n)}, Path("roc.svg"), "cross-domain MIA")"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from umbra.errors import ConfigError


def _scores(members, nonmembers) -> tuple[np.ndarray, np.ndarray]:
    m = np.asarray(members, dtype=np.float64).ravel()
    n = np.asarray(nonmembers, dtype=np.float64).ravel()
    if m.size == 0 or n.size == 0:
        raise ConfigError(f"membership inference needs members and non-members (got {m.size} and {n.size})")
    if not (np.isfinite(m).all() and np.isfinite(n).all()):
        raise ConfigError("membership scores must be finite")
    return m, n


def roc_curve(members, nonmembers) -> tuple[np.ndarray, np.ndarray]:
    """(fpr [T+1], tpr [T+1]) over every distinct threshold, from (0, 0) to (1, 1); tied scores
    move both rates at once (a diagonal step), as a threshold cannot split them."""
    m, n = _scores(members, nonmembers)
    thresholds = np.unique(np.concatenate([m, n]))[::-1]  # descending
    # fraction of each group with score >= threshold
    m_sorted, n_sorted = np.sort(m), np.sort(n)
    tpr = (m.size - np.searchsorted(m_sorted, thresholds, side="left")) / m.size
    fpr = (n.size - np.searchsorted(n_sorted, thresholds, side="left")) / n.size
    return np.concatenate([[0.0], fpr]), np.concatenate([[0.0], tpr])


def auc(members, nonmembers) -> float:
    """P(score of a random member > that of a random non-member) + ½ P(tie): the Mann–Whitney U
    statistic over |members|·|non-members|, from mid-ranks (equal to the ROC curve's area)."""
    m, n = _scores(members, nonmembers)
    both = np.concatenate([m, n])
    order = np.argsort(both, kind="mergesort")
    ranks = np.empty(both.size, dtype=np.float64)
    sorted_vals = both[order]
    # mid-ranks (1-based) for ties
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    ends = np.r_[starts[1:], both.size]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + 1 + e) / 2.0
    u = ranks[: m.size].sum() - m.size * (m.size + 1) / 2.0
    return float(u / (m.size * n.size))


def tpr_at_fpr(members, nonmembers, fpr: float = 0.01) -> float:
    """The highest true-positive rate of a threshold whose false-positive rate is at most `fpr`."""
    if not 0.0 <= fpr <= 1.0:
        raise ConfigError(f"fpr must be in [0, 1], got {fpr}")
    f, t = roc_curve(members, nonmembers)
    return float(t[f <= fpr + 1e-12].max())


def bootstrap_ci(members, nonmembers, statistic, *, rounds: int = 1000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile interval of `statistic(members, nonmembers)` over `rounds` resamples, each group
    drawn with replacement at its own size (stratified), from a seeded generator."""
    if rounds < 1 or not 0.0 < level < 1.0:
        raise ConfigError(f"bootstrap needs rounds >= 1 and 0 < level < 1 (got {rounds}, {level})")
    m, n = _scores(members, nonmembers)
    rng = np.random.default_rng(seed)
    values = np.array([statistic(m[rng.integers(0, m.size, m.size)], n[rng.integers(0, n.size, n.size)])
                       for _ in range(rounds)])
    tail = (1.0 - level) / 2.0
    return float(np.quantile(values, tail)), float(np.quantile(values, 1.0 - tail))


@dataclass(frozen=True)
class MembershipResult:
    auc: float  # area under the ROC curve (0.5 = chance)
    auc_ci: tuple[float, float]  # its 95 % bootstrap interval
    tpr_at_1pct: float  # true-positive rate at 1 % false positives
    tpr_ci: tuple[float, float]
    members: int
    nonmembers: int


def membership_result(members, nonmembers, *, seed: int = 0, rounds: int = 1000) -> MembershipResult:
    m, n = _scores(members, nonmembers)
    return MembershipResult(
        auc=auc(m, n), auc_ci=bootstrap_ci(m, n, auc, rounds=rounds, seed=seed),
        tpr_at_1pct=tpr_at_fpr(m, n, 0.01),
        tpr_ci=bootstrap_ci(m, n, lambda a, b: tpr_at_fpr(a, b, 0.01), rounds=rounds, seed=seed),
        members=int(m.size), nonmembers=int(n.size))


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def write_roc_svg(curves: dict[str, tuple[np.ndarray, np.ndarray]], path: Path, title: str) -> Path:
    """ROC curves (linear axes, the chance diagonal dashed) with each curve's AUC in its legend."""
    size, pad = 360, 48

    def xy(f: float, t: float) -> str:
        return f"{pad + f * size:.1f},{pad + (1.0 - t) * size:.1f}"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size + 2 * pad + 170}" height="{size + 2 * pad}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="{pad}" y="{pad - 18}" font-size="13">{html.escape(title)}</text>',
             f'<rect x="{pad}" y="{pad}" width="{size}" height="{size}" fill="none" stroke="#444"/>',
             f'<polyline points="{xy(0, 0)} {xy(1, 1)}" fill="none" stroke="#999" stroke-dasharray="4 3"/>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{pad + tick * size:.1f}" y="{pad + size + 14}" text-anchor="middle">{tick:g}</text>')
        parts.append(f'<text x="{pad - 6}" y="{pad + (1 - tick) * size + 4:.1f}" text-anchor="end">{tick:g}</text>')
    parts.append(f'<text x="{pad + size / 2}" y="{pad + size + 32}" text-anchor="middle">false-positive rate</text>')
    parts.append(f'<text x="{pad - 34}" y="{pad + size / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 {pad - 34} {pad + size / 2})">true-positive rate</text>')
    for i, (label, (fpr, tpr)) in enumerate(curves.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        area = float(np.trapezoid(tpr, fpr))
        points = " ".join(xy(float(f), float(t)) for f, t in zip(fpr, tpr))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        y = pad + 14 + 16 * i
        parts.append(f'<line x1="{pad + size + 12}" y1="{y - 4}" x2="{pad + size + 30}" y2="{y - 4}" '
                     f'stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{pad + size + 36}" y="{y}">{html.escape(label)} (AUC {area:.3f})</text>')
    parts.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")
    return path
