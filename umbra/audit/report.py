"""The client security report: one self-contained HTML file (inline CSS, plots as base64 PNG).

For each group of recorded traffic: what the cloud received, the defences and ε in force, every
attack's token recovery / ROUGE-1 / BLEU / clear-gist rate next to the frequency-only baseline,
two plots, and per request the truth next to what each attack reconstructed, token by token
(recovered tokens highlighted).

The report holds the client's code in clear — it is the point of the report — so it is written
with mode 0600 to a path the user chose; the recordings themselves stay encrypted."""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import os
from pathlib import Path

import numpy as np

from umbra.attacks.layer_probes import per_layer
from umbra.attacks.metrics import GistThresholds
from umbra.attacks.suite import REPORTED as ATTACKS
from umbra.audit.analysis import GroupResult

TITLES = {"baseline": "frequency-only baseline", "sampler": "frequency sampler (uses nothing received)",
          "nearest": "(a) nearest-neighbour inversion",
          "probe": "(b) learned inversion probe",
          "probe_aware": "(b′) noise-aware probe (trained on the attacker's own INDVocab draw at your ε)",
          "frequency": "(c) frequency analysis",
          "reconstruction": "(d) code reconstruction", "gradient": "(e) gradient label recovery",
          "shadow": "(f) shadow client: its probe at the split layer (its own table and π, configured like yours)",
          "shadow_layers": "(f′) shadow client: its probe at the layer it reads best (split or a middle layer)",
          "oracle": "(g) oracle probe: your own client's states of public files (a bound, not an attack)",
          "decipher": "(h) decipherment: bigram statistics of public code over clusters of the received states"}
NOT_RUN = {"gradient": "no split fine-tuning traffic recorded", "probe_aware": "no INDVocab noise to simulate: the same as (b)",
           "oracle": "needs your bundle (umbra audit --bundle DIR)", "shadow": "adaptive attacks off (--no-adaptive)",
           "shadow_layers": "adaptive attacks off (--no-adaptive)"}
CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}.tok{white-space:pre-wrap;font-family:monospace;font-size:12px;
background:#f7f7f7;padding:6px;border-radius:4px}.hit{background:#ffb3b3}.warn{color:#a00;font-weight:bold}
.ok{color:#060}details{margin:.6em 0}summary{cursor:pointer;font-weight:600}img{max-width:100%}"""


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _plots(group: GroupResult) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [a for a in ATTACKS if a in group.suite.scores]
    rec = [100 * group.suite.scores[a].recovery for a in names]
    gist = [100 * group.suite.scores[a].clear_gist_rate for a in names]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    x = np.arange(len(names))
    ax.bar(x - 0.2, rec, 0.4, label="token recovery %")
    ax.bar(x + 0.2, gist, 0.4, label="clear-gist requests %")
    if "baseline" in group.suite.scores:
        ax.axhline(100 * group.suite.scores["baseline"].recovery, color="gray", ls="--", lw=1, label="baseline")
    ax.set_xticks(x, [a for a in names], rotation=15)
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title("What the simulated cloud recovers (all recorded traffic)")
    out = [_png(fig)]
    if len(group.requests) > 1:
        fig, ax = plt.subplots(figsize=(8, 3.2))
        for a in names:
            ys = [100 * r.scores[a].recovery if a in r.scores else np.nan for r in group.requests]
            ax.plot(range(1, len(ys) + 1), ys, marker="o", ms=3, label=a)
        ax.set_xlabel("request")
        ax.set_ylabel("token recovery %")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=8, ncol=3)
        ax.set_title("Per request")
        out.append(_png(fig))
    return out


def _tokens(public, truth: np.ndarray, guess: np.ndarray, keep: np.ndarray) -> str:
    """The guessed tokens at kept positions; a red background marks a recovered token."""
    parts = []
    for t, g in zip(truth[keep], guess[keep]):
        text = public.decode([int(g)]) or "∅"
        span = html.escape(text)
        parts.append(f'<span class="hit">{span}</span>' if t == g else span)
    return "".join(parts)


def _request_html(group: GroupResult, k: int, gist: GistThresholds) -> str:
    req = group.requests[k]
    rows, blocks = [], []
    for a in ATTACKS:
        s = req.scores.get(a)
        if s is None:
            continue
        flag = '<span class="warn">clear gist</span>' if s.clear_gist_rate > 0 else '<span class="ok">no</span>'
        rows.append(f"<tr><td>{TITLES[a]}</td><td>{100 * s.recovery:.1f}</td><td>{s.rouge1:.2f}</td>"
                    f"<td>{s.bleu1:.2f}</td><td>{flag}</td></tr>")
    for j, seq in enumerate(req.record.sequences):
        i = req.first + j
        keep = seq.scored
        truth_text = html.escape(group.public.decode(seq.truth[keep]))
        blocks.append(f"<p>Sequence {j + 1}: {int(keep.sum())} new positions.</p>"
                      f"<p>Truth (what you sent, decoded):</p><div class='tok'>{truth_text}</div>")
        for a in ATTACKS:
            g = group.suite.guesses[i].get(a) if i < len(group.suite.guesses) else None
            if g is None:
                continue
            ok = keep & (g >= 0)
            blocks.append(f"<p>{TITLES[a]}:</p><div class='tok'>{_tokens(group.public, seq.truth, g, ok)}</div>")
    return (f"<details><summary>Request {k + 1} — recorded {html.escape(req.record.created)}</summary>"
            f"<table><tr><th>attack</th><th>recovery %</th><th>ROUGE-1</th><th>BLEU-1</th><th>gist</th></tr>"
            f"{''.join(rows)}</table>{''.join(blocks)}</details>")


def _group_html(group: GroupResult, gist: GistThresholds) -> str:
    f = group.facts
    eps = f.get("epsilon")
    defences = ", ".join(n for n, on in (("INDVocab", f.get("indvocab")), ("LTokenizer", f.get("ltokenizer"))) if on)
    rows = []
    for a in ATTACKS:
        s = group.suite.scores.get(a)
        if s is None:
            note = group.notes.get(a) or NOT_RUN.get(a, "did not apply")
            rows.append(f"<tr><td>{TITLES[a]}</td><td colspan=5>{html.escape(note)}</td></tr>")
            continue
        how = f"<br><small>{html.escape(group.notes[a])}</small>" if a in group.notes else ""
        rows.append(f"<tr><td>{TITLES[a]}{how}</td><td>{100 * s.recovery:.1f}</td><td>{s.rouge1:.2f}</td>"
                    f"<td>{s.bleu1:.2f}</td><td>{s.bleu4:.2f}</td><td>{100 * s.clear_gist_rate:.0f}</td></tr>")
    imgs = "".join(f"<img alt='plot' src='{src}'>" for src in _plots(group))
    reqs = "".join(_request_html(group, k, gist) for k in range(len(group.requests)))
    return f"""<h2>Base model {html.escape(f['model_dir'])}</h2>
<p>Split: {f['encoder_blocks']} encoder and {f['decoder_blocks']} decoder blocks on this machine; hidden size
{f['hidden_size']}; wire dtype {html.escape(str(f.get('wire_dtype')))}. Defences: {defences or 'none'};
ε in force: {'— (no INDVocab)' if eps is None else html.escape(str(eps))} (a uniform-prior guess of one token from
its row succeeds with probability at most {group.guess_bound:.3g}).
The cloud received {group.positions} positions in {len(group.requests)} request(s).</p>
<table><tr><th>attack</th><th>token recovery %</th><th>ROUGE-1</th><th>BLEU-1</th><th>BLEU-4</th>
<th>clear-gist sequences %</th></tr>{''.join(rows)}</table>{_layers_html(group)}{imgs}<h3>Requests</h3>{reqs}"""


def _layers_html(group: GroupResult) -> str:
    """Per-layer token recovery of the shadow and oracle probes (the cloud runs the middle itself,
    so it can read any middle layer's output of what it receives)."""
    rows = []
    for prefix in ("shadow", "oracle"):
        layers = per_layer(group.suite.scores, prefix)
        if layers:
            cells = "".join(f"<td>{html.escape(k)}: {100 * v:.1f}</td>" for k, v in layers.items())
            rows.append(f"<tr><td>{TITLES[prefix].split(':')[0]}</td>{cells}</tr>")
    if not rows:
        return ""
    return ("<p>Token recovery % per layer (split = what the cloud receives; layer<i> = the output of middle "
            f"block i, which the cloud computes itself):</p><table>{''.join(rows)}</table>")


def write_report(path: str | Path, groups: list[GroupResult], command: str, gist: GistThresholds = GistThresholds()) -> Path:
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    body = "".join(_group_html(g, gist) for g in groups)
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>Umbra client security report</title>
<style>{CSS}</style></head><body><h1>Umbra client security report</h1>
<p>Generated {now} by <code>{html.escape(command)}</code>. A simulated honest-but-curious cloud attacked the
traffic this client recorded, using only what the cloud has: the public base model, its tokenizer and public code
(never π, the randomized table or this client's tuned blocks). A request counts as leaking a <b>clear gist</b>
when BLEU-1 ≥ {gist.bleu} or ROUGE-1 ≥ {gist.rouge1} (NOIR §5.1); the frequency-only baseline is what guessing
the most common token everywhere achieves, and the frequency sampler (random common tokens, using nothing the
cloud received) shows how much ROUGE-1 / BLEU-1 any code-looking output gets for free — an attack only tells you
something where it beats both. Highlighted tokens are ones the attack recovered.</p>
<p class="warn">This file contains your code in clear. Keep it private.</p>{body}</body></html>"""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(doc)
    return out
