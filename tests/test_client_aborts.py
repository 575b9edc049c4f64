"""umbra/client_aborts.py: every abort is counted by route and reason (and passed on), and the
log says at most one line per interval, summing the aborts it did not write into the next one."""

from __future__ import annotations

import logging

from umbra.client_aborts import ClientAborts


def test_counts_every_abort_and_logs_one_line_per_interval(caplog):
    seen = []
    aborts = ClientAborts(logging.getLogger("umbra.test-aborts"), lambda route, reason: seen.append((route, reason)),
                          interval=3600.0)
    with caplog.at_level(logging.WARNING, logger="umbra.test-aborts"):
        for _ in range(5):
            aborts.count("POST /v1/infill", "disconnect mid-body")
        aborts.count("WS /v1/sessions/{sid}/stream", "disconnect")
    assert aborts.to_json() == {"POST /v1/infill": {"disconnect mid-body": 5},
                                "WS /v1/sessions/{sid}/stream": {"disconnect": 1}}
    assert len(seen) == 6
    assert [r.getMessage() for r in caplog.records] == ["client abort: POST /v1/infill (disconnect mid-body)"]
    aborts.interval = 0.0  # the next line sums the five aborts the log left out
    with caplog.at_level(logging.WARNING, logger="umbra.test-aborts"):
        aborts.count("POST /v1/infill", "disconnect")
    assert caplog.records[-1].getMessage() == "client abort: POST /v1/infill (disconnect); 5 more since the last line"
    assert not any(r.exc_info for r in caplog.records)
