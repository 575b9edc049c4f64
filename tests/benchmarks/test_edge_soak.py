"""benchmarks/edge_soak.py, the short version that runs in the suite: the real service (python -m
server on a free loopback port) through an idle phase and each attacker phase (slow bodies with
and without a token, the mix: slow headers, mid-body disconnects, oversized and malformed frames,
churn, WebSocket streams dropped mid-message), a few seconds each. The legitimate clients (plain
HTTP steps and RemoteMiddle over the stream) keep succeeding, the service answers no 5xx and logs
no traceback, counts the aborts, and ends with no more open file descriptors than it started with
(every attacker connection closed). The 10-minute run and its p95 / RSS figures are the
benchmark's (docs/benchmarks.md, "The edge under hostile clients")."""

from __future__ import annotations

import asyncio

import pytest

from edge_soak import PHASES, soak, table


@pytest.mark.slow
def test_a_short_soak_keeps_legitimate_clients_served_without_5xx_tracebacks_or_leaked_fds():
    result = asyncio.run(soak(seconds=4, body_timeout=3))
    text = table(result)
    assert [r["mode"] for r in result.rows] == ["idle (no attackers)", *PHASES.values()], text
    assert all(r["requests"] > 0 and r["ok"] >= 0.99 for r in result.rows), text
    assert all(r["refused"] > 0 for r in result.rows[1:]), text  # every kind of attacker was answered
    assert result.fives == 0 and result.tracebacks == 0, text + "\n" + result.log[-3000:]
    assert result.aborts > 0 and result.ws_aborts > 0, text  # mid-body and mid-stream drops were counted
    assert result.end_fds <= result.samples[0][1], text  # every attacker connection closed
