"""A simulated honest-but-curious cloud and its attacks on what the client sends (NOIR §5).

The cloud records every hidden state and gradient it receives (`RecordingMiddle`, around any
Middle) and attacks using only what it has: the PUBLIC base model, the public tokenizer and
public code — never π, the randomized table or the client's tuned blocks.

    recorder.py        RecordingMiddle: the cloud's view, as events
    transcript.py      events -> ObservedSequence (what the cloud's sessions hold)
    public.py          PublicModel: public parts, tokenizer, public-code samples
    nearest.py     (a) nearest-neighbour inversion against per-token public states
    probe.py       (b) learned inversion probe (MLP over a state and its neighbours)
    probe_config.py    its ProbeConfig (torch-free: the CLI's defaults)
    frequency.py   (c) frequency analysis (cluster states, match public frequencies) and the
                       frequency-only baseline
    reconstruction.py (d) code reconstruction through the public middle + decoder + head
    gradients.py   (e) label recovery from split fine-tuning gradients
    layer_probes.py    probes at the split layer and every middle layer's output (shadow, oracle)
    client_states.py   what a given client sends for given code (shadow, oracle, volume)
    oracle.py          the oracle probe: the REAL client's states of held-out files (a bound)
    decipher.py    (h) bigram decipherment of the clusters of received states (matrix EM)
    volume.py          k× the grid's traffic (encoder outputs) for decipherment
    metrics.py         token recovery, ROUGE-1, BLEU, NOIR's "clear gist"
    suite.py           AttackSuite: build all attacks once, run and score them on a transcript

This package is the cloud's side only and sits below the client code that uses it: the
inversion penalty of `umbra tune` runs attack (a) on the client itself (umbra/tuning), and
`umbra audit` runs the suite on the client's own recorded traffic (umbra/audit). The simulated
clients that send traffic, and the benchmark grid that tunes them, are umbra/attack_grid/
(experiments/privacy_attacks.py, docs/privacy/attacks.md); so is the shadow client (f), which runs
the tuning loop (umbra/attack_grid/shadow.py). umbra.privacy never imports this
package (tests/test_architecture.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from umbra.lazy import exports

_HOME = {"RecordingMiddle": "recorder", "ObservedSequence": "transcript", "assemble": "transcript"}
__all__ = sorted(_HOME)

if TYPE_CHECKING:
    from umbra.attacks.recorder import RecordingMiddle
    from umbra.attacks.transcript import ObservedSequence, assemble

__getattr__ = exports(__name__, _HOME)  # probe_config.py loads without torch
