"""Client aborts of the cloud service: a request or stream the client abandoned (a disconnect
mid-body, mid-stream, mid-verify or while its token was being checked, or a request the edge
cut at its deadline). Each is counted in `umbra_cloud_client_aborts_total{route, reason}` and
logged as one warning line with the route template and the reason — never a 5xx, a traceback,
a payload or a token. At most one line a second: a flood of aborts is summed into the next line."""

from __future__ import annotations

import logging
import threading
import time

from server.metrics import Metrics

log = logging.getLogger("umbra.cloud")


class ClientAborts:
    def __init__(self, metrics: Metrics, interval: float = 1.0):
        self.metrics = metrics
        self.interval = interval  # seconds between two log lines
        self._lock = threading.Lock()
        self._logged, self._quiet = float("-inf"), 0  # the last line's time; aborts not logged since

    def count(self, route: str, reason: str) -> None:
        """One abort of `route` (a template, e.g. "WS /v1/sessions/{sid}/stream") for `reason`."""
        self.metrics.inc("umbra_cloud_client_aborts_total", route=route, reason=reason)
        now = time.monotonic()
        with self._lock:
            if now - self._logged < self.interval:
                self._quiet += 1
                return
            more = f"; {self._quiet} more since the last line" if self._quiet else ""
            self._logged, self._quiet = now, 0
        log.warning("client abort: %s (%s)%s", route, reason, more)
