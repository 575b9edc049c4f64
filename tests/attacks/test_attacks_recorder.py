"""RecordingMiddle and transcript assembly: the wrapper is transparent (same outputs and
gradients as the Middle it wraps, truth never forwarded), records exactly what the cloud
receives, and replaying its events scores every received position exactly once, through
prefix-reuse truncations and training steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from umbra.attacks.recorder import RecordingMiddle
from umbra.attacks.transcript import BackwardEvent, ForwardEvent, TruncateEvent, assemble
from umbra.errors import ValidationError
from umbra.middle.local import LocalMiddle
from umbra.model.loader import load_client, load_middle


class SpyMiddle(LocalMiddle):
    """A real LocalMiddle that also keeps the arguments of every forward (to prove the truth
    attached to the recorder never reaches the Middle)."""

    def __init__(self, blocks):
        super().__init__(blocks)
        self.calls = []

    async def forward(self, hidden, positions, session, key_padding=None, **extra):
        self.calls.append(extra)
        return await super().forward(hidden, positions, session, key_padding)


@pytest.fixture(scope="module")
def parts(tiny_model_dirs):
    d = tiny_model_dirs["qwen2-tied"]
    enc, dec = load_client(d)
    return enc, load_middle(d), dec


def _pos(t, start=0):
    return torch.arange(start, start + t)[None]


async def test_wrapper_is_transparent_and_records_the_cloud_view(parts):
    enc, mid, _ = parts
    plain, spy = LocalMiddle(mid), SpyMiddle(mid)
    rec = RecordingMiddle(spy)
    ids = torch.randint(0, 500, (1, 12))
    h = enc(ids, _pos(12))
    s1, s2 = await plain.open_session(), await rec.open_session()
    rec.attach_truth(ids.numpy())
    out_rec = await rec.forward(h, _pos(12), s2)
    assert torch.equal(out_rec, await plain.forward(h, _pos(12), s1))
    assert spy.calls == [{}]  # nothing but hidden, positions, session went to the Middle
    (ev,) = rec.events
    assert isinstance(ev, ForwardEvent) and not ev.training
    assert torch.equal(ev.hidden, h) and torch.equal(ev.output, out_rec) and torch.equal(ev.positions, _pos(12))
    assert np.array_equal(ev.truth, ids.numpy())
    await rec.close(s2)
    assert rec.hidden_size == mid.spec.hidden_size


async def test_training_gradients_are_recorded_and_unchanged(parts):
    enc, mid, dec = parts
    plain, rec = LocalMiddle(mid), RecordingMiddle(LocalMiddle(mid))
    h = enc(torch.randint(0, 500, (2, 8)), _pos(8).expand(2, -1))
    g = torch.randn(2, 8, h.shape[-1])
    grads = []
    for m in (plain, rec):
        s = await m.open_session(training=True)
        await m.forward(h, _pos(8).expand(2, -1), s)
        grads.append(await m.backward(g, s))
    assert torch.equal(grads[0], grads[1])
    seqs = rec.sequences()
    assert len(seqs) == 2 and all(s.training for s in seqs)
    assert torch.equal(seqs[1].grad, g[1]) and torch.equal(seqs[0].hidden, h[0])


def _fwd(sid, t, start, truth_start):
    return ForwardEvent(sid, torch.randn(1, t, 4), _pos(t, start), None, torch.randn(1, t, 4), False,
                        np.arange(truth_start, truth_start + t)[None])


def test_prefix_reuse_scores_every_received_position_once():
    # prompt of 6, two decode steps, then a new request reusing 4 positions and adding 3
    events = [_fwd("s", 6, 0, 0), _fwd("s", 1, 6, 6), _fwd("s", 1, 7, 7), TruncateEvent("s", 4),
              _fwd("s", 3, 4, 100)]
    seqs = assemble(events)
    assert [s.length for s in seqs] == [8, 7]
    assert seqs[0].fresh.all() and seqs[1].fresh.tolist() == [False] * 4 + [True] * 3
    assert seqs[1].truth.tolist() == [0, 1, 2, 3, 100, 101, 102]  # context kept, new positions fresh
    assert sum(int(s.scored.sum()) for s in seqs) == 8 + 3
    assert torch.equal(seqs[1].hidden[:4], seqs[0].hidden[:4])


def test_padding_is_never_scored_and_backward_needs_a_forward():
    kp = torch.tensor([[True, True, False], [True, True, True]])
    ev = ForwardEvent("t", torch.randn(2, 3, 4), _pos(3).expand(2, -1), kp, None, True, None)
    seqs = assemble([ev, BackwardEvent("t", torch.randn(2, 3, 4))])
    assert seqs[0].scored.tolist() == [True, True, False] and seqs[1].scored.all()
    with pytest.raises(ValidationError):
        assemble([BackwardEvent("u", torch.randn(1, 3, 4))])
