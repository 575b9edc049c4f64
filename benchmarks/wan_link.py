"""A WAN link you can dial: a delaying TCP proxy on 127.0.0.1, for benchmarks/wan.py and the tests.

    with WanProxy(("127.0.0.1", cloud_port), LinkConfig(one_way_ms=40)) as link:
        RemoteMiddle(link.url(cloud.base_url), token)   # every byte now crosses an 80 ms RTT link

Real sockets, bytes in order: each direction of each connection reads what arrives, stamps every
chunk with a release time and writes it then. The release time is the arrival plus the one-way
delay plus a jitter drawn uniformly in [-jitter, +jitter], never earlier than the previous
chunk's release (jitter never reorders bytes, as TCP does not), and with a bandwidth cap never
earlier than the previous chunk's release plus the time the link needs to carry this chunk
(its serialisation delay). Connection set-up crosses the link too: the client's connect is
accepted at once, but its first bytes reach the server one delay later, like a SYN would.

The proxy runs its own event loop in a daemon thread, so that the client's loop and the proxy
never wait on each other. tc netem in a network namespace would be the kernel's version of the
same; this machine's kernel has no netem qdisc ("Specified qdisc kind is unknown"), so the
benchmark uses this proxy."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

_READ = 64 * 1024  # bytes per read


@dataclass(frozen=True)
class LinkConfig:
    one_way_ms: float = 0.0  # delay of each direction (the round trip is twice this)
    jitter_ms: float = 0.0  # each chunk's delay varies uniformly by up to this much (bytes stay in order)
    bandwidth_mbps: float | None = None  # each direction's capacity in megabits per second; None = unlimited
    seed: int = 0  # of the jitter draws

    def validate(self) -> "LinkConfig":
        if self.one_way_ms < 0 or self.jitter_ms < 0 or self.jitter_ms > self.one_way_ms:
            raise ValueError("need 0 <= jitter_ms <= one_way_ms")
        if self.bandwidth_mbps is not None and self.bandwidth_mbps <= 0:
            raise ValueError("bandwidth_mbps must be positive")
        return self

    @property
    def rtt_ms(self) -> float:
        return 2 * self.one_way_ms


class WanProxy:
    """Listens on 127.0.0.1 (a free port) and relays every connection to `target` over the link."""

    def __init__(self, target: tuple[str, int], link: LinkConfig = LinkConfig()):
        self.target, self.link = target, link.validate()
        self.port: int | None = None
        self.bytes_relayed = 0
        self._rng = random.Random(link.seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="wan-proxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    def url(self, base_url: str) -> str:
        """`base_url` (http://127.0.0.1:PORT...) with the proxy's port in place of the target's."""
        parts = urlsplit(base_url)
        return urlunsplit(parts._replace(netloc=f"127.0.0.1:{self.port}"))

    def __enter__(self) -> "WanProxy":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, "127.0.0.1", 0), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        async def stop() -> None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # -- on the proxy's loop ---------------------------------------------------------------------
    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await asyncio.sleep(self.link.one_way_ms / 1000)  # the connection's set-up crosses the link
            server_r, server_w = await asyncio.open_connection(*self.target)
            await asyncio.gather(self._direction(client_r, server_w), self._direction(server_r, client_w),
                                 return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            client_w.close()
            self._tasks.discard(task)

    async def _direction(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Relay one direction: read, stamp, release in order at each chunk's time."""
        queue: asyncio.Queue = asyncio.Queue()
        writing = asyncio.ensure_future(self._release(queue, writer))
        last = free = 0.0  # the previous chunk's release; when the link has carried what it was given
        try:
            while True:
                data = await reader.read(_READ)
                now = time.monotonic()
                if not data:
                    queue.put_nowait((max(last, now + self.link.one_way_ms / 1000), b""))
                    break
                last, free = self._due(now, last, free, len(data))
                queue.put_nowait((last, data))
            await writing
        finally:
            writing.cancel()

    def _due(self, now: float, last: float, free: float, size: int) -> tuple[float, float]:
        """(release time, when the link is free again) of a chunk of `size` bytes read at `now`."""
        link = self.link
        delay = link.one_way_ms + (self._rng.uniform(-link.jitter_ms, link.jitter_ms) if link.jitter_ms else 0.0)
        sent = now
        if link.bandwidth_mbps is not None:  # the link carries one chunk after another
            sent = max(now, free) + size * 8 / (link.bandwidth_mbps * 1e6)
        return max(last, sent + delay / 1000), sent

    async def _release(self, queue: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:  # the other side closed its half: close ours after the delay too
                try:
                    writer.write_eof()
                except (OSError, RuntimeError):
                    pass
                return
            writer.write(data)
            self.bytes_relayed += len(data)
            await writer.drain()
