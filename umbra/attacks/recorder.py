"""RecordingMiddle: a Middle that forwards every call to another Middle (LocalMiddle,
RemoteMiddle, ...) and records what the cloud receives and computes — the honest-but-curious
cloud's view, for the attack suite and the client-side audit.

It records tensors exactly as the cloud gets them: when the inner Middle has a `wire_dtype`
(RemoteMiddle), hidden states and gradients are rounded to it first. Recording is in memory;
nothing is logged or written here."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from umbra.attacks.transcript import (
    BackwardEvent,
    CloseEvent,
    Event,
    ForwardEvent,
    TruncateEvent,
    assemble,
    ObservedSequence,
)
from umbra.middle.protocol import Middle


class RecordingMiddle:
    """Transparent Middle wrapper; `events` is the cloud's view, in call order."""

    def __init__(self, inner: Middle, *, keep_outputs: bool = True):
        self.inner = inner
        self.hidden_size = inner.hidden_size
        self.keep_outputs = keep_outputs  # also keep the middle outputs (the cloud computed them)
        self.events: list[Event] = []
        self._training: dict[str, bool] = {}
        self._closed: set[str] = set()  # sessions closed since the last take_closed
        self._wire_dtype = getattr(inner, "wire_dtype", None)
        self._truth: np.ndarray | None = None

    def __getattr__(self, name: str):  # connect(), stats, info, ... of the inner Middle
        if name in ("inner", "_truth"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _as_received(self, t: torch.Tensor) -> torch.Tensor:
        t = t.detach().to("cpu")
        if self._wire_dtype is not None:
            t = t.to(self._wire_dtype)
        return t.float().clone()

    async def open_session(self, *, training: bool = False) -> str:
        sid = await self.inner.open_session(training=training)
        self._training[sid] = training
        return sid

    def attach_truth(self, public_ids: np.ndarray) -> None:
        """Client-side recorders only: the public ids [B,T] behind the next forward's hidden
        states (kept with the event for scoring; never passed to the inner Middle)."""
        self._truth = np.asarray(public_ids, dtype=np.int64)

    async def forward(self, hidden, positions, session, key_padding=None):
        truth, self._truth = self._truth, None
        if truth is not None and tuple(truth.shape) != tuple(hidden.shape[:2]):
            truth = None  # not the ids of these states (e.g. a soft prompt was prepended)
        out = await self.inner.forward(hidden, positions, session, key_padding)
        self.events.append(ForwardEvent(
            session=session, hidden=self._as_received(hidden), positions=positions.detach().to("cpu", torch.int64).clone(),
            key_padding=None if key_padding is None else key_padding.detach().to("cpu", torch.bool).clone(),
            output=self._as_received(out) if self.keep_outputs else None,
            training=self._training.get(session, False), truth=truth,
        ))
        return out

    async def backward(self, grad_out, session):
        grad_in = await self.inner.backward(grad_out, session)
        self.events.append(BackwardEvent(session=session, grad_out=self._as_received(grad_out)))
        return grad_in

    async def truncate(self, session: str, length: int) -> None:
        await self.inner.truncate(session, length)
        self.events.append(TruncateEvent(session, length))

    async def close(self, session: str) -> None:
        try:
            await self.inner.close(session)
        finally:
            self.events.append(CloseEvent(session))
            self._training.pop(session, None)
            self._closed.add(session)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def sequences(self) -> list[ObservedSequence]:
        return assemble(self.events)

    def take_closed(self) -> list[ObservedSequence]:
        """The sequences of every closed session, removed from the record (a long-running
        client saves them as sessions end; open sessions keep their history for prefix reuse)."""
        if not self._closed:  # the common case after a completion: nothing to scan
            return []
        closed, self._closed = self._closed, set()
        done = [e for e in self.events if e.session in closed]
        self.events = [e for e in self.events if e.session not in closed]
        return assemble(done)

    def clear(self) -> None:
        self.events.clear()
        self._closed.clear()


@contextlib.contextmanager
def truth_from_encoder(encoder: torch.nn.Module, recorder: RecordingMiddle, permutation=None):
    """Client side: while active, every call `encoder(ids, positions, ...)` hands the public ids
    (π⁻¹ of the ids when the client has a permutation) to `recorder.attach_truth`, so the next
    forward's event carries the truth. Works for any caller that runs the encoder right before
    `middle.forward` (the completion runner, the tuning loop)."""

    def hook(_module, args, kwargs):
        ids = args[0] if args else kwargs.get("ids")
        if isinstance(ids, torch.Tensor):
            ids = ids.detach().to("cpu", torch.int64).numpy()
            recorder.attach_truth(ids if permutation is None else permutation.to_public(ids))

    handle = encoder.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield recorder
    finally:
        handle.remove()
