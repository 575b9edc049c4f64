"""How the cloud's refusals become the client's errors (RemoteMiddle, remote.py): the statuses a
re-prefill recovers from (409 out of sync, 404 unknown session, a lost connection) are their own
classes so the recovery can tell them apart; the rest are the package's CloudRejected /
CloudUnavailable / SessionEvicted."""

from __future__ import annotations

from umbra.errors import CloudRejected, CloudUnavailable, SessionEvicted


class OutOfSync(CloudRejected):
    """409: the cloud's cache length differs from ours; recovered by a re-prefill."""


class UnknownSession(CloudRejected):
    """404: the cloud (this replica) does not hold the session; recovered by a re-prefill."""


class ConnectionLost(CloudUnavailable):
    """The connection failed mid-call (refused, reset, dropped stream, a gateway's 502/504): the
    replica may be gone; recovered once per call by a re-prefill on a fresh cloud session."""


def rejection(status: int, detail: str) -> Exception:
    """The client's error for the cloud's HTTP status (or a stream close code - 4000)."""
    if status == 410:
        return SessionEvicted(detail)
    if status == 409:
        return OutOfSync(detail, status)
    if status == 404:
        return UnknownSession(f"the cloud does not know this session (HTTP 404): {detail}", status)
    if status in (502, 504):  # only a gateway answers these: its replica failed
        return ConnectionLost(f"cloud unreachable behind its gateway (HTTP {status})")
    if status >= 500:
        return CloudUnavailable(f"cloud failed (HTTP {status}): {detail}")
    return CloudRejected(f"cloud rejected the request (HTTP {status}): {detail}", status)
