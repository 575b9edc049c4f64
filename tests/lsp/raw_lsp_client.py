"""A raw LSP client of the lsp tests: the real language server over stdio, spoken to in
Content-Length frames, for the messages pytest-lsp's client never sends."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

from lsp_helpers import LSP_COMMAND, STATUS


class RawLspClient:
    """The real language server (`python -m lsp`) over stdio, spoken to in raw Content-Length
    frames: for what pytest-lsp's client never sends (broken JSON, bad params, a second
    `initialize`). Server-to-client requests are answered null; notifications are kept."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.notifications: list[dict] = []
        self._responses: dict[object, asyncio.Future] = {}
        self._next_id = 0
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, env: dict[str, str] | None = None) -> RawLspClient:
        """The server started with `env` (None: this process's)."""
        proc = await asyncio.create_subprocess_exec(*LSP_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                    env=env)
        return cls(proc)

    def send_frame(self, body: bytes) -> None:
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def send(self, message: dict) -> None:
        self.send_frame(json.dumps(message).encode())  # ensure_ascii: a lone surrogate goes as "\ud800"

    def notify(self, method: str, params) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def response(self, msg_id) -> asyncio.Future:
        """The response with `msg_id` (None: an error answered with id null), once it arrives."""
        return self._responses.setdefault(msg_id, asyncio.get_running_loop().create_future())

    async def request(self, method: str, params=None, timeout: float = 120.0) -> dict:
        """The whole response message ({"result": ...} or {"error": ...})."""
        msg_id = self.request_id()
        answer = self.response(msg_id)
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return await asyncio.wait_for(answer, timeout)

    async def initialize(self, options: dict) -> dict:
        """initialize + initialized; the initialize response."""
        response = await self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {},
                                                     "initializationOptions": options})
        self.notify("initialized", {})
        return response

    async def wait_for_status(self, state: str, timeout: float = 240.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for note in self.notifications:
                if note.get("method") == STATUS and note["params"]["state"] == state:
                    return note["params"]
            await asyncio.sleep(0.05)
        raise AssertionError(f"no {state!r} status within {timeout}s")

    async def _read(self) -> None:
        try:
            await self._read_messages()
        finally:  # the server's output ended: whatever is still awaited never comes
            for future in self._responses.values():
                if not future.done():
                    future.set_exception(AssertionError("the server closed its output"))

    async def _read_messages(self) -> None:
        out = self.proc.stdout
        while True:
            length = None
            while True:
                line = await out.readline()
                if not line:
                    return
                if not line.strip():
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            message = json.loads(await out.readexactly(length))
            if "method" in message and "id" in message:  # a request from the server
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
            elif "method" in message:
                self.notifications.append(message)
            else:
                future = self.response(message.get("id"))
                if not future.done():
                    future.set_result(message)

    async def close(self) -> int:
        """End of input; the server's exit code."""
        if self.proc.stdin.can_write_eof():
            self.proc.stdin.write_eof()
        code = await asyncio.wait_for(self.proc.wait(), 60)
        await self._reader
        return code
