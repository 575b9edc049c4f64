"""Is a service listening? For tests that stop or restart a cloud and check it is gone."""

from __future__ import annotations

import httpx


def refuses_connections(url: str) -> bool:
    """True if nothing answers GET `url`/healthz (connection refused, reset or timed out)."""
    try:
        httpx.get(url + "/healthz", timeout=2.0)
    except httpx.TransportError:
        return True
    return False
