"""What an honest-but-curious cloud holds after serving a client: the tensors it received, in
order, and the sequences they form in its sessions.

Events are the Middle calls as the cloud sees them (forward: encoder outputs + positions +
optional key padding, and the middle output it computed; backward: the gradient at the middle's
output; truncate; close). `assemble` replays them the way the cloud's KV cache does and yields
one ObservedSequence per stretch of context: an inference session's cache up to each truncate
(prefix reuse) and at its end, or one batch row of a training forward with its gradient. Each
position is `fresh` in exactly one sequence (the first in which the cloud received it), so
scores never count a position twice even though later sequences repeat it as context.

`truth` (public token ids) is never part of what the cloud receives: the benchmark and the
client-side audit attach it to forward events so the attacks can be scored."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from umbra.errors import ValidationError


@dataclass
class ForwardEvent:
    session: str
    hidden: torch.Tensor  # [B,T,C] float32, the encoder output as the cloud received it
    positions: torch.Tensor  # [B,T] int64
    key_padding: torch.Tensor | None  # [B, cached+T] bool (True = real token) or None
    output: torch.Tensor | None  # [B,T,C] the middle output the cloud computed
    training: bool
    truth: np.ndarray | None = None  # [B,T] public ids — attached client-side, never sent


@dataclass
class BackwardEvent:
    session: str
    grad_out: torch.Tensor  # [B,T,C] gradient at the middle's output, as received


@dataclass
class TruncateEvent:
    session: str
    length: int


@dataclass
class CloseEvent:
    session: str


Event = ForwardEvent | BackwardEvent | TruncateEvent | CloseEvent


@dataclass
class ObservedSequence:
    """One stretch of context the cloud holds, with what it can attack it with."""

    hidden: torch.Tensor  # [T,C] encoder outputs (float32)
    positions: torch.Tensor  # [T] int64
    fresh: np.ndarray  # [T] bool: first received here (scored here)
    real: np.ndarray  # [T] bool: not padding
    output: torch.Tensor | None = None  # [T,C] middle outputs, when every position has one
    grad: torch.Tensor | None = None  # [T,C] gradient at the middle output (training only)
    truth: np.ndarray | None = None  # [T] public ids (benchmark / audit only)
    session: str = ""
    training: bool = False

    @property
    def length(self) -> int:
        return int(self.hidden.shape[0])

    @property
    def scored(self) -> np.ndarray:
        return self.fresh & self.real


@dataclass
class _Open:
    rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, np.ndarray | None]] = field(default_factory=list)
    emitted: int = 0  # positions [0, emitted) already scored in an earlier sequence
    real: list[np.ndarray] = field(default_factory=list)

    @property
    def length(self) -> int:
        return sum(r[0].shape[0] for r in self.rows)


def _cat(parts: list[torch.Tensor | None]) -> torch.Tensor | None:
    return None if any(p is None for p in parts) else torch.cat(parts, 0)


def _emit(sid: str, state: _Open) -> ObservedSequence | None:
    n = state.length
    if n == 0 or state.emitted >= n:
        return None
    hidden = torch.cat([r[0] for r in state.rows], 0)
    truths = [r[3] for r in state.rows]
    fresh = np.zeros(n, dtype=bool)
    fresh[state.emitted :] = True
    seq = ObservedSequence(
        hidden=hidden, positions=torch.cat([r[1] for r in state.rows], 0), fresh=fresh,
        real=np.concatenate(state.real), output=_cat([r[2] for r in state.rows]),
        truth=None if any(t is None for t in truths) else np.concatenate(truths), session=sid,
    )
    state.emitted = n
    return seq


def _keep(state: _Open, length: int) -> None:
    kept, real, n = [], [], 0
    for row, r in zip(state.rows, state.real):
        if n >= length:
            break
        take = min(row[0].shape[0], length - n)
        kept.append(tuple(None if x is None else x[:take] for x in row))
        real.append(r[:take])
        n += take
    state.rows, state.real = kept, real
    state.emitted = min(state.emitted, n)


def _real_mask(ev: ForwardEvent, b: int) -> np.ndarray:
    t = ev.hidden.shape[1]
    if ev.key_padding is None:
        return np.ones(t, dtype=bool)
    return ev.key_padding[b, -t:].numpy().astype(bool)


def assemble(events: list[Event]) -> list[ObservedSequence]:
    """Replay events into sequences (see the module docstring). Inference sessions must use
    batch size 1 (the engine's); training batches give one sequence per row."""
    out: list[ObservedSequence] = []
    open_: dict[str, _Open] = {}
    pending: dict[str, ForwardEvent] = {}  # training forward awaiting its backward
    for ev in events:
        if isinstance(ev, ForwardEvent) and ev.training:
            if ev.session in pending:  # a forward without backward: inference-only use
                out.extend(_training_rows(pending.pop(ev.session), None))
            pending[ev.session] = ev
        elif isinstance(ev, ForwardEvent):
            if ev.hidden.shape[0] != 1:
                raise ValidationError("inference sessions are replayed with batch size 1 only")
            state = open_.setdefault(ev.session, _Open())
            truth = None if ev.truth is None else np.asarray(ev.truth[0], dtype=np.int64)
            out_row = None if ev.output is None else ev.output[0]
            state.rows.append((ev.hidden[0], ev.positions[0], out_row, truth))
            state.real.append(_real_mask(ev, 0))
        elif isinstance(ev, BackwardEvent):
            fwd = pending.pop(ev.session, None)
            if fwd is None:
                raise ValidationError("a backward event without a training forward before it")
            out.extend(_training_rows(fwd, ev.grad_out))
        elif isinstance(ev, TruncateEvent):
            state = open_.get(ev.session)
            if state is not None and ev.length < state.length:
                seq = _emit(ev.session, state)
                if seq is not None:
                    out.append(seq)
                _keep(state, ev.length)
        elif isinstance(ev, CloseEvent):
            state = open_.pop(ev.session, None)
            if state is not None and (seq := _emit(ev.session, state)) is not None:
                out.append(seq)
            if ev.session in pending:
                out.extend(_training_rows(pending.pop(ev.session), None))
    for sid, state in open_.items():  # sessions still open at the end of the recording
        if (seq := _emit(sid, state)) is not None:
            out.append(seq)
    for fwd in pending.values():
        out.extend(_training_rows(fwd, None))
    return out


def _training_rows(ev: ForwardEvent, grad: torch.Tensor | None) -> list[ObservedSequence]:
    rows = []
    for b in range(ev.hidden.shape[0]):
        t = ev.hidden.shape[1]
        rows.append(ObservedSequence(
            hidden=ev.hidden[b], positions=ev.positions[b], fresh=np.ones(t, dtype=bool), real=_real_mask(ev, b),
            output=None if ev.output is None else ev.output[b], grad=None if grad is None else grad[b],
            truth=None if ev.truth is None else np.asarray(ev.truth[b], dtype=np.int64), session=ev.session,
            training=True,
        ))
    return rows
