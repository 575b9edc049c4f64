"""umbra.wire: round trips for every dtype and shape; corrupt or truncated frames raise WireError
and nothing else; the byte layout matches the documented format."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from umbra import wire
from umbra.errors import WireError

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def forward_frames(draw, trim: bool = False):
    b, t, c = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 8))
    dtype = draw(st.sampled_from(FLOATS))
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(b, t, c, generator=gen) * 100).to(dtype)
    positions = torch.randint(0, 2**40, (b, t), generator=gen)
    kp = None
    if draw(st.booleans()):
        kp = torch.rand(b, t + draw(st.integers(0, 4)), generator=gen) > 0.3
    start = draw(st.integers(0, wire.NO_START - 1) if trim else st.one_of(st.none(), st.integers(0, wire.NO_START - 1)))
    return wire.forward_frame(hidden, positions, kp, start=start, tail=draw(st.integers(0, t)), trim=trim)


@st.composite
def any_frames(draw):
    kind = draw(st.sampled_from(list(wire.Kind)))
    if kind in (wire.Kind.FORWARD, wire.Kind.FORWARD_TRIM):
        return draw(forward_frames(trim=kind == wire.Kind.FORWARD_TRIM))
    if kind == wire.Kind.ERROR:
        return wire.error_frame(draw(st.integers(400, 599)), draw(st.text(max_size=40)))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=3, max_size=3)))
    t = torch.randn(shape).to(draw(st.sampled_from(FLOATS)))
    return wire.Frame(kind, (t,))


def assert_same(a: wire.Frame, b: wire.Frame) -> None:
    assert (a.kind, a.start, a.tail, a.status, a.message) == (b.kind, b.start, b.tail, b.status, b.message)
    assert len(a.tensors) == len(b.tensors)
    for x, y in zip(a.tensors, b.tensors):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x.view(torch.uint8) if x.dtype != torch.bool else x,
                           y.view(torch.uint8) if y.dtype != torch.bool else y)  # bitwise, NaN-safe


@FAST
@given(any_frames())
def test_round_trip_every_kind_dtype_and_shape(frame):
    data = wire.encode(frame)
    assert_same(wire.decode(data), frame)
    assert wire.encode(wire.decode(data)) == data


@FAST
@given(any_frames())
def test_untrim_turns_only_a_trim_frame_into_its_forward_frame(frame):
    data = wire.encode(frame)
    start, plain = wire.untrim(data)
    if frame.kind != wire.Kind.FORWARD_TRIM:
        assert (start, plain) == (None, data)
    else:
        same = wire.decode(plain)
        assert start == frame.start and same.kind == wire.Kind.FORWARD
        assert_same(same, wire.Frame(wire.Kind.FORWARD, frame.tensors, start=frame.start, tail=frame.tail))


def test_a_trim_frame_needs_a_start():
    with pytest.raises(WireError, match="needs a start"):
        wire.encode(wire.forward_frame(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.int64), trim=True))
    raw = bytearray(wire.encode(wire.forward_frame(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.int64),
                                                   start=3, trim=True)))
    struct.pack_into("<I", raw, 8, wire.NO_START)  # the header's start field
    with pytest.raises(WireError, match="needs a start"):
        wire.untrim(bytes(raw))
    with pytest.raises(WireError, match="needs a start"):
        wire.decode(bytes(raw))


@FAST
@given(any_frames(), st.data())
def test_truncation_raises_wire_error(frame, data):
    raw = wire.encode(frame)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(WireError):
        wire.decode(raw[:cut])


@settings(max_examples=150, deadline=None)
@given(any_frames(), st.data())
def test_random_corruption_raises_only_wire_error(frame, data):
    raw = bytearray(wire.encode(frame))
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw += data.draw(st.binary(min_size=1, max_size=8))
    try:
        out = wire.decode(bytes(raw))
    except WireError:
        return
    wire.check_structure(out)  # whatever decodes is a structurally valid frame
    assert wire.decode(wire.encode(out)).kind == out.kind


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_wire_error(raw):
    try:
        wire.decode(raw)
    except WireError:
        pass


def test_layout_is_the_documented_little_endian_format():
    hidden = torch.tensor([[[1.5, -2.0]]])
    pos = torch.tensor([[7]])
    raw = wire.encode(wire.forward_frame(hidden, pos, start=3, tail=1))
    head = struct.unpack_from("<4sHBBIII", raw)
    assert head == (b"UMBW", 1, 1, 2, 3, 1, 0)
    off = struct.calcsize("<4sHBBIII")
    assert struct.unpack_from("<BB3I", raw, off) == (1, 3, 1, 1, 2)
    off += struct.calcsize("<BB3I")
    assert np.frombuffer(raw, "<f4", 2, off).tolist() == [1.5, -2.0]
    off += 8
    assert struct.unpack_from("<BB2Iq", raw, off) == (4, 2, 1, 1, 7)
    assert raw.endswith(struct.pack("<I", 0))
    bf = wire.encode(wire.hidden_frame(torch.tensor([[[1.0]]], dtype=torch.bfloat16)))
    assert bf[-6:-4] == b"\x80\x3f"  # bfloat16 1.0 = 0x3F80, little-endian


def test_clear_messages_for_version_size_and_kind():
    raw = bytearray(wire.encode(wire.hidden_frame(torch.zeros(1, 1, 4))))
    struct.pack_into("<H", raw, 4, 2)
    with pytest.raises(wire.VersionMismatch, match="version 2"):
        wire.decode(bytes(raw))
    with pytest.raises(wire.FrameTooLarge, match="exceeds the limit of 10 bytes"):
        wire.decode(wire.encode(wire.hidden_frame(torch.zeros(1, 1, 4))), max_bytes=10)
    with pytest.raises(WireError, match="bad magic"):
        wire.decode(b"XXXX" + bytes(raw[4:]))
    with pytest.raises(WireError, match="unexpected HIDDEN"):
        wire.decode(wire.encode(wire.hidden_frame(torch.zeros(1, 1, 4))), expect=wire.Kind.FORWARD)
    with pytest.raises(WireError, match="trailing"):
        wire.decode(wire.encode(wire.hidden_frame(torch.zeros(1, 1, 4))) + b"\0")


def test_encode_refuses_malformed_frames():
    h = torch.zeros(1, 2, 4)
    with pytest.raises(WireError, match="positions must be int64"):
        wire.encode(wire.forward_frame(h, torch.zeros(1, 2)))
    with pytest.raises(WireError, match="float32, float16 or bfloat16"):
        wire.encode(wire.hidden_frame(torch.zeros(1, 2, 4, dtype=torch.int64)))
    with pytest.raises(WireError, match="key_padding"):
        wire.encode(wire.forward_frame(h, torch.zeros(1, 2, dtype=torch.int64), torch.ones(1, 1, dtype=torch.bool)))
    with pytest.raises(WireError, match="cannot be sent"):
        wire.encode(wire.hidden_frame(torch.zeros(1, 2, 4, dtype=torch.float64)))
