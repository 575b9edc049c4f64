"""Client aborts of the cloud service (umbra/client_aborts.py): a request or stream the client
abandoned (a disconnect mid-body, mid-stream, mid-verify or while its token was being checked,
or a request the edge cut at its deadline). Each is counted in
`umbra_cloud_client_aborts_total{route, reason}` and logged as one warning line with the route
template and the reason — never a 5xx, a traceback, a payload or a token. At most one line a
second: a flood of aborts is summed into the next line."""

from __future__ import annotations

import logging

from server.metrics import Metrics
from umbra import client_aborts

log = logging.getLogger("umbra.cloud")


class ClientAborts(client_aborts.ClientAborts):
    def __init__(self, metrics: Metrics, interval: float = 1.0):
        self.metrics = metrics

        def inc(route: str, reason: str) -> None:
            metrics.inc("umbra_cloud_client_aborts_total", route=route, reason=reason)

        super().__init__(log, inc, interval)
