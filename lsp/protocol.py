"""The language server's JSON-RPC edge: every request gets an answer, a result or an LSP error.

pygls (2.1) drops what it cannot handle without a word: a frame that is not JSON, a request
whose params do not structure (a negative or fractional position), anything after `shutdown`;
and it runs a second `initialize` as the first. Here, in a protocol subclass and our own read
loop (in place of pygls's `run_async`, the same framing):

  body not JSON (or not UTF-8)          ParseError (-32700), id null
  not a JSON-RPC 2.0 object             InvalidRequest (-32600), its id if it has one
  params that do not fit the method     InvalidParams (-32602); integers must be JSON integers
                                        (cattrs would truncate 1.5 to 1)
  a request after `shutdown`            InvalidRequest; notifications but `exit` are dropped
  a second `initialize`                 InvalidRequest; the server keeps its first session
A malformed notification has nobody to answer: it is logged (its type, not its content) and
dropped. The server keeps reading in every case.

Input is read in chunks of whatever has arrived (`read_frames`), and every message of a chunk is
handled before any request's handler runs: under rapid typing the handlers see the edits and
requests already waiting behind theirs (lsp/arrivals.py). Each request is announced to the
server (`request_arrived(message)`) as it is read, before pygls schedules its handler."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import BinaryIO

import cattrs
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError
from pygls.protocol import LanguageServerProtocol, default_converter

log = logging.getLogger("umbra.lsp")

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
_CONTENT_LENGTH = re.compile(rb"content-length:\s*(\d+)\s*", re.IGNORECASE)


class HandledErrors(logging.Filter):
    """pygls logs every JsonRpcException a handler raises with its traceback and the request's
    params (document text). An error the server answers on purpose (lsp_error: a client's fault,
    a stale request) becomes one line: the exception's type and code, never params or frames.
    Internal errors (a bug) keep their traceback. pygls's own "Unable to deserialize message" (params
    that do not fit the method, answered InvalidParams) carries its traceback as text: one line too."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, JsonRpcException) and not isinstance(exc, JsonRpcInternalError):
            record.msg, record.args = "request answered with %s (%s)", (type(exc).__name__, exc.code)
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        elif (str(record.msg).startswith("Unable to deserialize message")
              and isinstance(sys.exc_info()[1], cattrs.ClassValidationError)):  # logged inside its except block
            record.msg, record.args = "request answered with JsonRpcInvalidParams (%s): %s", \
                (INVALID_PARAMS, "its params do not fit the method")
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        return True


logging.getLogger("pygls.protocol.json_rpc").addFilter(HandledErrors())


def _strict_int(value, _type) -> int:
    if type(value) is not int:  # not bool, not float: JSON integers only
        raise ValueError(f"expected an integer, got {type(value).__name__}")
    return value


def _strict_bool(value, _type) -> bool:
    if type(value) is not bool:
        raise ValueError(f"expected a boolean, got {type(value).__name__}")
    return value


def strict_converter() -> cattrs.Converter:
    """pygls's converter, with integers and booleans that must be JSON integers and booleans."""
    converter = default_converter()
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(bool, _strict_bool)  # bool is an int: it needs its own hook
    return converter


class UmbraProtocol(LanguageServerProtocol):
    def receive(self, body: bytes) -> None:
        """Handle one frame's body: answer it, or an error response naming what is wrong with it."""
        try:
            data = json.loads(body)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            return self.reply_error(None, PARSE_ERROR, "the message is not valid JSON")
        if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
            return self.reply_error(_id(data), INVALID_REQUEST, "not a JSON-RPC 2.0 message")
        method = data.get("method")
        request = "id" in data and method is not None
        if (method is not None and not isinstance(method, str)) or \
                (method is None and "id" in data and not {"result", "error"} & data.keys()):
            return self.reply_error(_id(data), INVALID_REQUEST, "neither a request, a notification nor a response")
        try:
            message = self.structure_message(data)
        except (JsonRpcException, ValueError, TypeError) as exc:
            if not request:
                log.warning("dropped a malformed message (%s)", type(exc).__name__)
                return None
            return self.reply_error(_id(data), INVALID_PARAMS, f"invalid params for {method}")
        self.handle_message(message)
        return None

    def handle_message(self, message) -> None:
        method = getattr(message, "method", None)
        is_request = method is not None and getattr(message, "id", None) is not None
        if self._shutdown and method != types.EXIT:
            if is_request:
                self.reply_error(message.id, INVALID_REQUEST, "the server is shutting down (shutdown was requested)")
            return
        if is_request and method == types.INITIALIZE and self._server.initialized:
            self.reply_error(message.id, INVALID_REQUEST, "the server is already initialized")
            return
        if is_request:
            self._server.request_arrived(message)
        super().handle_message(message)

    def reply_error(self, msg_id, code: int, message: str) -> None:
        # A plain dict: pygls's message classes leave out a null id, which JSON-RPC requires here.
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})


def _id(data) -> int | str | None:
    """The request id to answer with: a JSON-RPC id (integer or string), else null."""
    msg_id = data.get("id") if isinstance(data, dict) else None
    return msg_id if isinstance(msg_id, str) or type(msg_id) is int else None


async def read_frames(read: Callable[[], Awaitable[bytes]], protocol: UmbraProtocol) -> None:
    """Read `Content-Length` frames into `protocol` until end of input or `exit`. `read()` returns
    the bytes that have arrived (at least one; b"" at the end of input); every complete frame among
    them is handled before the next read. Headers other than Content-Length are ignored."""
    buffer = bytearray()
    length: int | None = None  # the header block's Content-Length so far
    body: int | None = None  # the length of the body being read, once its headers have ended
    while True:
        while True:  # every complete frame in the buffer
            if body is None:
                end = buffer.find(b"\n")
                if end == -1:
                    break
                line = bytes(buffer[: end + 1])
                del buffer[: end + 1]
                if line.strip():
                    match = _CONTENT_LENGTH.fullmatch(line)
                    if match:
                        length = int(match.group(1))
                elif length is None:
                    log.warning("dropped a frame without Content-Length")
                else:
                    body, length = length, None
                continue
            if len(buffer) < body:
                break
            frame = bytes(buffer[:body])
            del buffer[:body]
            body = None
            _receive(protocol, frame)
        chunk = await read()
        if not chunk:
            return
        buffer += chunk


def _receive(protocol: UmbraProtocol, frame: bytes) -> None:
    try:
        protocol.receive(frame)
    except SystemExit:
        raise
    except Exception as exc:  # noqa: BLE001 — a bug in a handler must not stop the server
        log.error("handling a message failed: %s", type(exc).__name__)


def chunk_reader(stdin: BinaryIO, executor: Executor | None = None, size: int = 1 << 20
                 ) -> Callable[[], Awaitable[bytes]]:
    """`read()` for `read_frames`: what has arrived on `stdin` (a buffered binary stream), up to
    `size` bytes, read in `executor`'s threads so that the event loop keeps running."""
    loop = asyncio.get_running_loop()
    return functools.partial(loop.run_in_executor, executor, stdin.read1, size)
