"""A real capture of client<->cloud traffic for the privacy tests: a TCP forwarding proxy on
loopback between RemoteMiddle and the real cloud service keeps every byte both ways, and a decoder
turns the bytes back into HTTP/1.1 bodies (chunked or not, gzip/deflate) and WebSocket messages
(unmasked, fragments joined), so that needles can be searched in both."""

from __future__ import annotations

import asyncio
import struct
import zlib


class CaptureProxy:
    """Forwards 127.0.0.1:<port> to the target, keeping every byte of every connection."""

    def __init__(self, host: str, port: int):
        self.target = (host, port)
        self.connections: list[tuple[bytearray, bytearray]] = []  # (client→cloud, cloud→client)
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _handle(self, c_reader, c_writer):
        up, down = bytearray(), bytearray()
        self.connections.append((up, down))
        s_reader, s_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pump(c_reader, s_writer, up), self._pump(s_reader, c_writer, down))

    @staticmethod
    async def _pump(reader, writer, log: bytearray):
        try:
            while data := await reader.read(65536):
                log.extend(data)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def close(self):
        self.server.close()
        await self.server.wait_closed()


def _http_messages(stream: bytes, is_request: bool) -> tuple[list[bytes], bytes | None]:
    """Bodies of the HTTP/1.1 messages in `stream`, and what follows a WebSocket upgrade."""
    bodies, i = [], 0
    while i < len(stream):
        end = stream.index(b"\r\n\r\n", i)
        head = stream[i:end].decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in head[1:])}
        i = end + 4
        upgrade = headers.get("upgrade", "").lower() == "websocket"
        if (is_request and upgrade) or (not is_request and head[0].split()[1] == "101"):
            return bodies, stream[i:]
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                line_end = stream.index(b"\r\n", i)
                size = int(stream[i:line_end].split(b";")[0], 16)
                i = line_end + 2
                body += stream[i : i + size]
                i += size + 2
                if size == 0:
                    break
        else:
            n = int(headers.get("content-length", "0"))
            body, i = stream[i : i + n], i + n
        encoding = headers.get("content-encoding", "")
        if encoding in ("gzip", "deflate"):
            body = zlib.decompress(bytes(body), 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        bodies.append(bytes(body))
    return bodies, None


def _ws_messages(stream: bytes) -> list[bytes]:
    """Payloads of the WebSocket messages in `stream` (unmasked, fragments joined)."""
    out, current, i = [], bytearray(), 0
    while i + 2 <= len(stream):
        b0, b1 = stream[i], stream[i + 1]
        n, i = b1 & 0x7F, i + 2
        if n == 126:
            (n,), i = struct.unpack(">H", stream[i : i + 2]), i + 2
        elif n == 127:
            (n,), i = struct.unpack(">Q", stream[i : i + 8]), i + 8
        mask = None
        if b1 & 0x80:
            mask, i = stream[i : i + 4], i + 4
        payload = bytearray(stream[i : i + n])
        i += n
        if mask:
            payload = bytearray(b ^ mask[j % 4] for j, b in enumerate(payload))
        current += payload
        if b0 & 0x80:  # FIN
            out.append(bytes(current))
            current = bytearray()
    return out


def decode_capture(proxy: CaptureProxy) -> dict[str, list[bytes]]:
    decoded = {"http_up": [], "http_down": [], "ws_up": [], "ws_down": []}
    for up, down in proxy.connections:
        bodies, ws_up = _http_messages(bytes(up), True)
        decoded["http_up"] += bodies
        bodies, ws_down = _http_messages(bytes(down), False)
        decoded["http_down"] += bodies
        decoded["ws_up"] += _ws_messages(ws_up) if ws_up else []
        decoded["ws_down"] += _ws_messages(ws_down) if ws_down else []
    return decoded


def leaks(blobs: list[bytes], needle_map: dict[str, bytes]) -> list[str]:
    return sorted({name for name, n in needle_map.items() for blob in blobs if n in blob})
