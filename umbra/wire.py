"""The wire protocol between the client and the cloud service, shared by both sides.

A frame is one binary message (an HTTP body or one WebSocket message), all integers and tensor
bytes little-endian:

    header   "<4sHBBIII"  magic b"UMBW", version, kind, tensor count, start, tail, status
    tensors  per tensor: "<BB" dtype code, ndim; ndim x "<I" dims; raw element bytes
    text     "<I" byte length + UTF-8 (error frames only; empty otherwise)

Kinds and their tensors:
    FORWARD   client->cloud  hidden [B,T,C] f32|f16|bf16, positions [B,T] int64,
                             optional key_padding [B,S] bool (S = cached + T, True = real token)
    FORWARD_TRIM             a FORWARD frame whose `start` may be below the session's length: the
                             cloud first truncates the session to `start` (truncate and forward in
                             one trip: speculative decoding drops rejected drafts this way)
    HIDDEN    cloud->client  hidden [B,T',C] (T' = tail or T)
    BACKWARD  client->cloud  grad at the middle's output [B,T,C]
    GRAD      cloud->client  grad at the middle's input [B,T,C]
    ERROR     cloud->client  no tensors; `status` (an HTTP status) and a UTF-8 message

`start` (FORWARD) is the cache length the client expects the session to have before this step
(NO_START = unchecked), so a desynchronized session is detected instead of silently corrupting
positions. `tail` (FORWARD) asks for only the last `tail` positions of the output (0 = all).

`decode` checks everything structural (magic, version, kind, dtype codes, shapes, exact byte
length, size limit) and raises WireError — never anything else — on a malformed frame.
Contract checks that need the model (hidden size, NaN/Inf, sequence limits) belong to
umbra.middle.runtime.MiddleRuntime."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import torch

from umbra.errors import WireError

MAGIC = b"UMBW"
VERSION = 1
NO_START = 0xFFFFFFFF
MEDIA_TYPE = "application/x-umbra-frame"
MAX_TEXT_BYTES = 4096

_HEADER = struct.Struct("<4sHBBIII")
_TENSOR_HEAD = struct.Struct("<BB")
_U32 = struct.Struct("<I")
_MAX_NDIM = 3

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
WIRE_DTYPE_NAMES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

# dtype code -> (torch dtype, little-endian numpy dtype of the raw bytes)
_CODES: dict[int, tuple[torch.dtype, str]] = {
    1: (torch.float32, "<f4"),
    2: (torch.float16, "<f2"),
    3: (torch.bfloat16, "<u2"),  # raw bits; reinterpreted as bfloat16 after the endian fix
    4: (torch.int64, "<i8"),
    5: (torch.bool, "u1"),
}
_DTYPE_CODES = {dt: code for code, (dt, _) in _CODES.items()}


class Kind(IntEnum):
    FORWARD = 1
    HIDDEN = 2
    BACKWARD = 3
    GRAD = 4
    ERROR = 5
    FORWARD_TRIM = 6


class FrameTooLarge(WireError):
    """The frame exceeds the receiver's byte limit (HTTP 413)."""


class VersionMismatch(WireError):
    """The frame speaks another protocol version."""


@dataclass(frozen=True)
class Frame:
    kind: Kind
    tensors: tuple[torch.Tensor, ...] = ()
    start: int | None = None  # FORWARD: expected cache length before the step
    tail: int = 0  # FORWARD: return only the last `tail` positions (0 = all)
    status: int = 0  # ERROR: HTTP status
    message: str = ""  # ERROR: human-readable reason

    @property
    def hidden(self) -> torch.Tensor:  # FORWARD / HIDDEN
        return self.tensors[0]

    @property
    def positions(self) -> torch.Tensor:  # FORWARD
        return self.tensors[1]

    @property
    def key_padding(self) -> torch.Tensor | None:  # FORWARD
        return self.tensors[2] if len(self.tensors) > 2 else None

    @property
    def grad(self) -> torch.Tensor:  # BACKWARD / GRAD
        return self.tensors[0]


# -- constructors ------------------------------------------------------------------------------
def forward_frame(hidden, positions, key_padding=None, *, start: int | None = None, tail: int = 0,
                  trim: bool = False) -> Frame:
    """`trim`: a FORWARD_TRIM frame (the cloud truncates the session to `start` first)."""
    tensors = (hidden, positions) if key_padding is None else (hidden, positions, key_padding)
    return Frame(Kind.FORWARD_TRIM if trim else Kind.FORWARD, tensors, start=start, tail=tail)


def untrim(data: bytes | bytearray) -> tuple[int | None, bytes | bytearray]:
    """(start, the same frame as FORWARD) for a FORWARD_TRIM frame; (None, data) for any other
    bytes, which `decode` judges. Reads the header only."""
    if len(data) < _HEADER.size:
        return None, data
    magic, version, kind, ntensors, start, tail, status = _HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION or kind != Kind.FORWARD_TRIM:
        return None, data
    if start == NO_START:
        raise WireError("a FORWARD_TRIM frame needs a start")
    header = _HEADER.pack(MAGIC, VERSION, int(Kind.FORWARD), ntensors, start, tail, status)
    return start, header + bytes(memoryview(data)[_HEADER.size :])


def hidden_frame(hidden: torch.Tensor) -> Frame:
    return Frame(Kind.HIDDEN, (hidden,))


def backward_frame(grad: torch.Tensor) -> Frame:
    return Frame(Kind.BACKWARD, (grad,))


def grad_frame(grad: torch.Tensor) -> Frame:
    return Frame(Kind.GRAD, (grad,))


def error_frame(status: int, message: str) -> Frame:
    return Frame(Kind.ERROR, (), status=status, message=message)


# -- structure checks (both directions) --------------------------------------------------------
def _check_float3(t: torch.Tensor, what: str) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise WireError(f"{what} must be float32, float16 or bfloat16, got {t.dtype}")
    if t.dim() != 3:
        raise WireError(f"{what} must be [B,T,C], got {list(t.shape)}")


def check_structure(frame: Frame) -> None:
    """Per-kind tensor count, dtypes and shape consistency; raises WireError."""
    n = len(frame.tensors)
    for t in frame.tensors:
        if t.numel() == 0:
            raise WireError(f"tensors must not be empty, got shape {list(t.shape)}")
    if frame.kind == Kind.FORWARD_TRIM and frame.start is None:
        raise WireError("a FORWARD_TRIM frame needs a start")
    if frame.kind in (Kind.FORWARD, Kind.FORWARD_TRIM):
        if n not in (2, 3):
            raise WireError(f"a FORWARD frame holds 2 or 3 tensors, got {n}")
        _check_float3(frame.hidden, "hidden states")
        pos = frame.positions
        if pos.dtype != torch.int64 or tuple(pos.shape) != tuple(frame.hidden.shape[:2]):
            raise WireError(f"positions must be int64 {list(frame.hidden.shape[:2])}, "
                            f"got {pos.dtype} {list(pos.shape)}")
        kp = frame.key_padding
        if kp is not None and (kp.dtype != torch.bool or kp.dim() != 2 or kp.shape[0] != pos.shape[0]
                               or kp.shape[1] < pos.shape[1]):
            raise WireError(f"key_padding must be bool [B, cached+T] with B={pos.shape[0]}, "
                            f"got {kp.dtype} {list(kp.shape)}")
        if frame.start is not None and not 0 <= frame.start < NO_START:
            raise WireError(f"start must lie in [0, {NO_START}), got {frame.start}")
        if not 0 <= frame.tail <= pos.shape[1]:
            raise WireError(f"tail must lie in [0, T={pos.shape[1]}], got {frame.tail}")
    elif frame.kind in (Kind.HIDDEN, Kind.BACKWARD, Kind.GRAD):
        if n != 1:
            raise WireError(f"a {frame.kind.name} frame holds exactly 1 tensor, got {n}")
        _check_float3(frame.tensors[0], "gradient" if frame.kind != Kind.HIDDEN else "hidden states")
    elif frame.kind == Kind.ERROR:
        if n:
            raise WireError("an ERROR frame holds no tensors")
        if not 400 <= frame.status <= 599:
            raise WireError(f"an ERROR frame needs an HTTP error status, got {frame.status}")
    if frame.kind != Kind.ERROR and (frame.message or frame.status):
        raise WireError("only ERROR frames carry text or a status")


# -- encode ------------------------------------------------------------------------------------
def _tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    np_dtype = _CODES[_DTYPE_CODES[t.dtype]][1]
    if t.dtype == torch.bfloat16:
        arr = t.view(torch.int16).numpy().view(np.uint16)
    else:
        arr = t.numpy()
    return arr.astype(np_dtype, copy=False).tobytes()


def encode(frame: Frame) -> bytes:
    for t in frame.tensors:
        if t.dtype not in _DTYPE_CODES:
            raise WireError(f"dtype {t.dtype} cannot be sent (float32, float16, bfloat16, int64, bool)")
    check_structure(frame)
    text = frame.message.encode("utf-8")[:MAX_TEXT_BYTES].decode("utf-8", "ignore").encode("utf-8")
    start = NO_START if frame.start is None else frame.start
    parts = [_HEADER.pack(MAGIC, VERSION, int(frame.kind), len(frame.tensors), start, frame.tail, frame.status)]
    for t in frame.tensors:
        parts.append(_TENSOR_HEAD.pack(_DTYPE_CODES[t.dtype], t.dim()))
        parts.extend(_U32.pack(d) for d in t.shape)
        parts.append(_tensor_bytes(t))
    parts.append(_U32.pack(len(text)))
    parts.append(text)
    return b"".join(parts)


# -- decode ------------------------------------------------------------------------------------
class _Reader:
    def __init__(self, buf: memoryview):
        self.buf, self.pos = buf, 0

    def take(self, n: int, what: str) -> memoryview:
        if n > len(self.buf) - self.pos:
            raise WireError(f"truncated frame: {what} needs {n} bytes, {len(self.buf) - self.pos} left")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        return st.unpack(self.take(st.size, what))


def _read_tensor(r: _Reader, i: int) -> torch.Tensor:
    code, ndim = r.unpack(_TENSOR_HEAD, f"tensor {i} header")
    if code not in _CODES:
        raise WireError(f"tensor {i}: unknown dtype code {code}")
    if not 1 <= ndim <= _MAX_NDIM:
        raise WireError(f"tensor {i}: ndim must lie in [1, {_MAX_NDIM}], got {ndim}")
    dims = [r.unpack(_U32, f"tensor {i} shape")[0] for _ in range(ndim)]
    if 0 in dims:  # no frame carries an empty tensor; [0, 2^32-1, ...] would overflow strides
        raise WireError(f"tensor {i}: every dimension must be >= 1, got {dims}")
    dtype, np_dtype = _CODES[code]
    count = 1
    for d in dims:
        count *= d
    raw = r.take(count * np.dtype(np_dtype).itemsize, f"tensor {i} data {dims}")
    arr = np.frombuffer(raw, dtype=np_dtype).astype(np.dtype(np_dtype).newbyteorder("="))
    if dtype == torch.bfloat16:
        t = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    elif dtype == torch.bool:
        if count and arr.max() > 1:
            raise WireError(f"tensor {i}: bool bytes must be 0 or 1")
        t = torch.from_numpy(arr.astype(np.bool_))
    else:
        t = torch.from_numpy(arr)
    return t.reshape(dims)


def decode(data: bytes | bytearray | memoryview, max_bytes: int | None = None,
           expect: Kind | tuple[Kind, ...] | None = None) -> Frame:
    """Parse and validate one frame; raises WireError (FrameTooLarge, VersionMismatch) only."""
    try:
        buf = memoryview(data).cast("B")
    except TypeError as exc:
        raise WireError(f"a frame must be bytes, got {type(data).__name__}") from exc
    if max_bytes is not None and len(buf) > max_bytes:
        raise FrameTooLarge(f"frame of {len(buf)} bytes exceeds the limit of {max_bytes} bytes")
    r = _Reader(buf)
    magic, version, kind, ntensors, start, tail, status = r.unpack(_HEADER, "header")
    if magic != MAGIC:
        raise WireError("not an Umbra frame (bad magic)")
    if version != VERSION:
        raise VersionMismatch(f"unsupported wire protocol version {version} (this side speaks {VERSION})")
    try:
        kind = Kind(kind)
    except ValueError:
        raise WireError(f"unknown frame kind {kind}") from None
    if expect is not None and kind not in (expect if isinstance(expect, tuple) else (expect,)):
        raise WireError(f"unexpected {kind.name} frame")
    if ntensors > 3:
        raise WireError(f"too many tensors: {ntensors}")
    tensors = tuple(_read_tensor(r, i) for i in range(ntensors))
    (text_len,) = r.unpack(_U32, "text length")
    if text_len > MAX_TEXT_BYTES:
        raise WireError(f"text of {text_len} bytes exceeds {MAX_TEXT_BYTES}")
    try:
        message = bytes(r.take(text_len, "text")).decode("utf-8")
    except UnicodeDecodeError:
        raise WireError("text is not valid UTF-8") from None
    if r.pos != len(buf):
        raise WireError(f"{len(buf) - r.pos} trailing bytes after the frame")
    frame = Frame(kind, tensors, start=None if start == NO_START else start, tail=tail,
                  status=status, message=message)
    check_structure(frame)
    return frame
