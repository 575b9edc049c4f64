"""The control of the split-overhead benchmark: the same middle blocks in a second process behind
a bare pipe, with none of the product's protocol.

`PipeMiddle` implements the Middle protocol over a `multiprocessing` pipe to a spawned child that
holds a `MiddleRuntime` (the very object the cloud service wraps). A step sends the raw fp32 bytes
of hidden [1,T,C] and the int64 positions, and reads back the raw output bytes: no HTTP, no
WebSocket, no frames, no auth, no asyncio on the far side, no thread hand-off. What a decode step
costs through it over the monolithic loop is what this machine charges for running the model's
parts in two processes at all (a second core, its caches, the wake-up of an idle vCPU, one pipe
round trip); what the real cloud costs over it is the product's own overhead.

Benchmark use only: one client, batch 1, fp32, no validation of what the parent sends."""

from __future__ import annotations

import multiprocessing as mp
import struct
from pathlib import Path

import torch

_HEAD = struct.Struct("<BIII")  # op, session number, T (forward) or length (truncate), C
_OPEN, _FORWARD, _TRUNCATE, _CLOSE, _STOP = range(5)


def _serve(conn, model_dir: str, encoder_blocks: int, decoder_blocks: int, threads: int) -> None:
    """Child process: load the middle blocks and answer requests until _STOP."""
    from umbra.middle.runtime import MiddleRuntime
    from umbra.model.loader import load_middle
    from umbra.model.parts import SplitPlan

    torch.set_num_threads(threads)
    runtime = MiddleRuntime(load_middle(model_dir, SplitPlan(encoder_blocks, decoder_blocks)))
    sessions: dict[int, str] = {}
    conn.send_bytes(b"ready")
    while True:
        msg = conn.recv_bytes()
        op, number, n, c = _HEAD.unpack_from(msg)
        if op == _FORWARD:
            body = memoryview(bytearray(msg))[_HEAD.size :]  # one writable copy, shared by both tensors
            hidden = torch.frombuffer(body[: n * c * 4], dtype=torch.float32).reshape(1, n, c)
            positions = torch.frombuffer(body[n * c * 4 :], dtype=torch.int64).reshape(1, n)
            out = runtime.forward(sessions[number], hidden, positions)
            conn.send_bytes(out.contiguous().numpy().tobytes())
        elif op == _OPEN:
            sessions[number] = runtime.create(False)
            conn.send_bytes(b"")
        elif op == _TRUNCATE:
            runtime.truncate(sessions[number], n)
            conn.send_bytes(b"")
        elif op == _CLOSE:
            runtime.close(sessions.pop(number))
            conn.send_bytes(b"")
        else:
            return


class PipeMiddle:
    """Middle protocol over a bare pipe to a child process (see the module docstring)."""

    def __init__(self, model_dir: str | Path, encoder_blocks: int, decoder_blocks: int, hidden_size: int,
                 threads: int = 1):
        self.hidden_size = hidden_size
        ctx = mp.get_context("spawn")  # a clean interpreter: no forked OpenMP or torch state
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child, str(model_dir), encoder_blocks, decoder_blocks, threads),
                                 daemon=True)
        self._proc.start()
        child.close()
        if self._conn.recv_bytes() != b"ready":
            raise RuntimeError("the bare-pipe middle did not start")
        self._numbers: dict[str, int] = {}

    def _call(self, op: int, session: str, n: int = 0, body: bytes = b"") -> bytes:
        self._conn.send_bytes(_HEAD.pack(op, self._numbers[session], n, self.hidden_size) + body)
        return self._conn.recv_bytes()

    async def open_session(self, *, training: bool = False) -> str:
        if training:
            raise ValueError("the bare-pipe control runs inference sessions only")
        handle = f"s{len(self._numbers)}"
        self._numbers[handle] = len(self._numbers)
        self._call(_OPEN, handle)
        return handle

    async def forward(self, hidden, positions, session, key_padding=None) -> torch.Tensor:
        if key_padding is not None or hidden.shape[0] != 1:
            raise ValueError("the bare-pipe control takes batch 1 without key padding")
        x = hidden.detach().to(torch.float32).contiguous()
        n = x.shape[1]
        body = x.numpy().tobytes() + positions.detach().to(torch.int64).contiguous().numpy().tobytes()
        out = self._call(_FORWARD, session, n, body)
        return torch.frombuffer(bytearray(out), dtype=torch.float32).reshape(1, n, self.hidden_size).to(hidden.dtype)

    async def backward(self, grad_out, session):
        raise ValueError("the bare-pipe control runs inference sessions only")

    async def truncate(self, session: str, length: int) -> None:
        self._call(_TRUNCATE, session, length)

    async def close(self, session: str) -> None:
        self._call(_CLOSE, session)

    async def aclose(self) -> None:
        if self._proc.is_alive():
            self._conn.send_bytes(_HEAD.pack(_STOP, 0, 0, 0))
            self._proc.join(10)
        self._conn.close()
