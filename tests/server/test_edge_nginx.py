"""The edge behind the shipped nginx front (deploy/nginx/render.py with its defaults but a small
per-address cap), a real nginx in front of the real service (`python -m server`, started with
`trusted_proxies` = nginx's address), all on loopback, clients from their own loopback addresses:

- slow-body attackers from one address (with a token: they pass nginx and hold a replica slot
  until the replica's whole-request deadline) do not shut out a valid client from another
  address, because the replica counts slots by the client nginx forwards, not by nginx;
- past nginx's own per-address cap the attacker's newcomers are refused by nginx (429);
- every attacker connection, refused by nginx or by the replica, is closed within 15 s of its
  refusal, however often it trickles bytes (nginx does not linger on the unread body).

Every test fails if the replica answered or logged a 5xx."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from cloud_helpers import auth, open_session, step
from nginx_balancer import nginx_balancer
from slow_clients import slow_body
from server.launch import local_cloud_sync

REPLICA_CAP, NGINX_CAP, ATTACKERS = 4, 8, 10
SETTINGS = dict(torch_threads=1, max_sessions_per_client=64, trusted_proxies=json.dumps(["127.0.0.1"]),
                max_connections_per_address=REPLICA_CAP, max_unauthenticated_per_address=2,
                header_timeout_seconds=10.0, body_timeout_seconds=8.0, unauthenticated_timeout_seconds=5.0)


@pytest.fixture(scope="module")
def front(model_dir, tmp_path_factory):
    with local_cloud_sync(model_dir, settings=SETTINGS) as cloud:
        replica = cloud.base_url.split("//")[1]
        with nginx_balancer([replica], tmp_path_factory.mktemp("nginx"),
                            extra=("--max-connections-per-address", str(NGINX_CAP))) as lb:
            yield cloud, lb


@pytest.fixture(autouse=True)
def no_5xx(front):
    cloud, _ = front
    start = cloud.log_path.stat().st_size if cloud.log_path.exists() else 0
    yield
    r = httpx.get(cloud.base_url + "/metrics", headers=auth(cloud.token), timeout=10)
    assert not re.findall(r'umbra_cloud_errors_total\{status="5', r.text), r.text
    log = cloud.log_path.read_text(errors="replace")[start:] if cloud.log_path.exists() else ""
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]


def _valid_client(lb_url: str, token: str, source: str, rounds: int = 5) -> list[int]:
    """Statuses of a session's open, `rounds` steps and close through nginx from `source`."""
    statuses = []
    with httpx.Client(base_url=lb_url, timeout=20, transport=httpx.HTTPTransport(local_address=source)) as http:
        sid = open_session(http, token)
        for t in (4,) + (1,) * (rounds - 1):
            statuses.append(http.post(f"/v1/sessions/{sid}/forward", content=step(t=t), headers=auth(token)).status_code)
        statuses.append(http.delete(f"/v1/sessions/{sid}", headers=auth(token)).status_code)
    return statuses


def test_slow_bodies_behind_nginx_are_refused_closed_and_leave_other_clients_served(front):
    cloud, lb = front
    with ThreadPoolExecutor(ATTACKERS) as pool:
        attackers = [pool.submit(slow_body, lb.base_url, cloud.token, "127.0.0.2") for _ in range(ATTACKERS)]
        time.sleep(1.5)  # they hold their connections (and, past the replica's cap, its slots) first
        statuses = _valid_client(lb.base_url, cloud.token, "127.0.0.3")
        results = [a.result() for a in attackers]
    assert statuses[:-1] == [200] * (len(statuses) - 1) and statuses[-1] == 204, statuses  # not 429: its own slots
    lines = sorted({line for line, _, _ in results})
    assert sum(line.startswith(b"HTTP/1.1 429") for line, _, _ in results) >= ATTACKERS - NGINX_CAP, lines
    assert all(line.startswith((b"HTTP/1.1 429", b"HTTP/1.1 408")) for line, _, _ in results), lines
    closed = [after for _, after, _ in results]
    assert all(after is not None and after < 15 for after in closed), [r for r in results if r[1] is None or r[1] >= 15]  # no lingering on the unread body


def test_a_refused_unauthenticated_body_behind_nginx_is_closed(front):
    cloud, lb = front
    line, closed_after, _ = slow_body(lb.base_url, None, "127.0.0.4", seconds=30)
    assert line.startswith(b"HTTP/1.1 401"), line
    assert closed_after is not None and closed_after < 15, closed_after
