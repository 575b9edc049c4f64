"""Client aborts: a request or stream its client abandoned (a disconnect mid-body, mid-stream,
mid-verify, while its answer was computed or its token checked, or a request the edge cut at its
deadline). Each is counted per (route template, reason) and logged as one warning line naming
them — never a 5xx, a traceback, a payload or a token; at most one line a second, a flood of
aborts summed into the next line. Shared by the cloud service (server/aborts.py: also a
Prometheus counter) and `umbra serve` (lsp/api_aborts.py: GET /healthz's `clientAborts`)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable


class ClientAborts:
    def __init__(self, log: logging.Logger, on_count: Callable[[str, str], None] | None = None,
                 interval: float = 1.0):
        self.log = log  # where the lines go (the service's own logger)
        self.on_count = on_count  # also told of each abort (route, reason): e.g. a metrics counter
        self.interval = interval  # seconds between two log lines
        self.counts: Counter[tuple[str, str]] = Counter()  # (route, reason) -> aborts so far
        self._lock = threading.Lock()
        self._logged, self._quiet = float("-inf"), 0  # the last line's time; aborts not logged since

    def count(self, route: str, reason: str) -> None:
        """One abort of `route` (a template, e.g. "WS /v1/sessions/{sid}/stream") for `reason`."""
        if self.on_count is not None:
            self.on_count(route, reason)
        now = time.monotonic()
        with self._lock:
            self.counts[route, reason] += 1
            if now - self._logged < self.interval:
                self._quiet += 1
                return
            more = f"; {self._quiet} more since the last line" if self._quiet else ""
            self._logged, self._quiet = now, 0
        self.log.warning("client abort: %s (%s)%s", route, reason, more)

    def to_json(self) -> dict[str, dict[str, int]]:
        """{route: {reason: count}} (counts only)."""
        with self._lock:
            out: dict[str, dict[str, int]] = {}
            for (route, reason), n in sorted(self.counts.items()):
                out.setdefault(route, {})[reason] = n
            return out
