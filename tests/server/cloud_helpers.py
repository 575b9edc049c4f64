"""Helpers for talking to the service by hand (raw frames, headers) in the cloud tests."""

from __future__ import annotations

import struct

import httpx
import torch

from umbra import wire

C = 64  # hidden size of the tiny models


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def raw_tensor(code: int, shape: tuple[int, ...], data: bytes) -> bytes:
    return struct.pack("<BB", code, len(shape)) + b"".join(struct.pack("<I", d) for d in shape) + data


def raw_frame(kind: int, tensors: list[bytes], *, magic: bytes = b"UMBW", version: int = wire.VERSION,
              start: int = wire.NO_START, tail: int = 0, status: int = 0, text: bytes = b"") -> bytes:
    """A frame assembled by hand from the documented layout (bypasses every encoder check)."""
    head = struct.pack("<4sHBBIII", magic, version, kind, len(tensors), start, tail, status)
    return head + b"".join(tensors) + struct.pack("<I", len(text)) + text


def step(t: int = 1, start_pos: int = 0, c: int = C, b: int = 1, **kw) -> bytes:
    hidden = torch.randn(b, t, c)
    positions = torch.arange(start_pos, start_pos + t).expand(b, t).contiguous()
    return wire.encode(wire.forward_frame(hidden, positions, **kw))


def open_session(client: httpx.Client, token: str, training: bool = False) -> str:
    r = client.post("/v1/sessions", json={"training": training}, headers=auth(token))
    assert r.status_code == 201, r.text
    return r.json()["session"]


def metric(text: str, name: str, **labels: str) -> float:
    """Value of one sample in Prometheus text (0 if absent)."""
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
