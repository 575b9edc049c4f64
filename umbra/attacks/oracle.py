"""The oracle probe: a bound on what ANY attacker could read from the traffic.

It is trained on the REAL client's own (state, public token) pairs — the client's encoder, its
randomized table, its π, its tuned blocks — from held-out files (disjoint from the attacked
prompts), at the split layer and at every middle layer's output, and applied to the attacked
traffic. No cloud has these pairs; an attack that does worse than the oracle is not evidence that
the states hide the code, and an oracle near the frequency baseline is (for this probe family).

    probes = train_oracle(encoder, permutation, held_out_blocks, public.middle, vocab)
    suite.run(sequences, only=(), extra=oracle_attacks(probes, public.middle))

The same probes and layer choice (held-out validation) as the shadow client (layer_probes.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from umbra.attacks.client_states import client_states
from umbra.attacks.layer_probes import LayerAttack, LayerProbes, layer_attacks
from umbra.attacks.probe import ProbeConfig
from umbra.attacks.transcript import ObservedSequence
from umbra.errors import ConfigError
from umbra.model.parts import MiddleBlocks

ORACLE = "oracle"


def _truths(attacked: list[ObservedSequence]) -> set[bytes]:
    return {np.asarray(s.truth[s.real], dtype=np.int64).tobytes() for s in attacked if s.truth is not None}


def without_attacked(held_out: np.ndarray, attacked: list[ObservedSequence]) -> tuple[np.ndarray, int]:
    """`held_out` less the blocks that are, whole, an attacked sequence's truth (files duplicated
    across splits: the corpus holds some), and how many were dropped."""
    seen = _truths(attacked)
    rows = np.asarray(held_out, dtype=np.int64)
    keep = np.array([row.tobytes() not in seen for row in rows], dtype=bool)
    return np.asarray(held_out)[keep], int((~keep).sum())


def check_disjoint(held_out: np.ndarray, attacked: list[ObservedSequence]) -> None:
    """ConfigError if a held-out block is, whole, one of the attacked sequences' truths (the
    caller is to draw held-out blocks from other files; this catches the plain mistake)."""
    seen = _truths(attacked)
    for row in np.asarray(held_out, dtype=np.int64):
        if row.tobytes() in seen:
            raise ConfigError("the oracle's held-out blocks include an attacked prompt: draw them from other files")


def train_oracle(encoder, permutation, held_out: np.ndarray, middle: MiddleBlocks, vocab: int,
                 config: ProbeConfig = ProbeConfig(), adapters=None, private_path=None,
                 layers: tuple[str, ...] | None = None, validation: float = 0.1,
                 attacked: list[ObservedSequence] | None = None, progress=None,
                 checkpoint: Path | None = None) -> LayerProbes:
    """Probes on the real client's states of `held_out` [N,T] public ids (files disjoint from the
    attacked prompts; `attacked`, when given, is checked against them). `checkpoint`: where a
    benchmark's run stores each layer's probe as it is trained (LayerProbes.train); `umbra audit`
    never passes one: its oracle decodes a real user's traffic and is not kept."""
    if attacked is not None:
        check_disjoint(held_out, attacked)
    return LayerProbes.train(lambda b: client_states(encoder, permutation, b, private_path), held_out, middle,
                             vocab, config, adapters, layers, validation, progress, checkpoint)


def oracle_attacks(probes: LayerProbes, middle: MiddleBlocks, adapters=None, per_layer: bool = True) -> dict[str, object]:
    """{"oracle": the layer its validation picked} plus, with `per_layer`, {"oracle@<layer>": ...}."""
    out: dict[str, object] = {ORACLE: LayerAttack(ORACLE, probes, middle, adapters)}
    if per_layer:
        out.update(layer_attacks(ORACLE, probes, middle, adapters))
    return out
