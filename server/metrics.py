"""Counters, gauges and latency histograms of the cloud service, rendered in the Prometheus text
exposition format (version 0.0.4). Only counts and sizes: never payloads, tokens or names."""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Callable

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_COUNTERS = {
    "umbra_cloud_sessions_opened_total": "Sessions opened.",
    "umbra_cloud_sessions_evicted_total": "Sessions evicted to stay within the KV memory budget.",
    "umbra_cloud_sessions_expired_total": "Sessions expired after being idle.",
    "umbra_cloud_tokens_processed_total": "Positions (batch x steps) run through the middle blocks.",
    "umbra_cloud_bytes_in_total": "Frame bytes received.",
    "umbra_cloud_bytes_out_total": "Frame bytes sent.",
    "umbra_cloud_errors_total": "Requests or stream steps answered with an error.",
    "umbra_cloud_client_aborts_total": "Requests the client abandoned mid-body, or the edge cut at its deadline.",
    "umbra_cloud_budget_refusals_total": "Steps refused because other clients hold the whole KV budget.",
    "umbra_cloud_decode_slabs_total": "Batched decode slabs run through the middle blocks.",
    "umbra_cloud_decode_batched_steps_total": "Decode steps run inside batched slabs.",
    "umbra_cloud_prefill_chunks_total": "Prefill chunks run (decode steps run between them).",
}
_GAUGES = {
    "umbra_cloud_sessions_active": "Open sessions.",
    "umbra_cloud_kv_bytes": "Bytes held by session KV caches and saved activations.",
    "umbra_cloud_kv_budget_bytes": "KV memory budget.",
    "umbra_cloud_decode_pending": "Decode steps waiting for the next batch.",
    "umbra_cloud_device_free_bytes": "Free memory of the middle's device once its blocks were loaded (at start).",
    "umbra_cloud_kv_positions_budget": "Cached positions (sessions x positions) the KV budget holds.",
    "umbra_cloud_kv_sessions_full_context": "Sessions of the maximum sequence length the KV budget holds.",
    "umbra_cloud_decode_width": "Most rows of one batched decode slab.",
    "umbra_cloud_decode_solo": "1 when a lone decode step runs unpadded (width 1), 0 when it is padded.",
}
_HIST = ("umbra_cloud_request_seconds", "Request and stream-step latency.")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                    for k, v in sorted(labels.items()))
    return "{" + body + "}"


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
        self._hist: dict[tuple, list] = {}  # labels -> [bucket counts..., sum, count]
        self.gauges: dict[str, Callable[[], float]] = {}  # name -> reader, set by the app

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        if name not in _COUNTERS:
            raise KeyError(name)
        with self._lock:
            self._counters[name][tuple(sorted(labels.items()))] += value

    def observe(self, seconds: float, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        with self._lock:
            h = self._hist.setdefault(key, [0] * (len(LATENCY_BUCKETS) + 2))
            for i, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    h[i] += 1
            h[-2] += seconds
            h[-1] += 1

    def value(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._counters[name].get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            for name, help_ in _COUNTERS.items():
                lines += [f"# HELP {name} {help_}", f"# TYPE {name} counter"]
                series = self._counters.get(name) or {(): 0.0}
                lines += [f"{name}{_labels(dict(k))} {v:g}" for k, v in sorted(series.items())]
            name, help_ = _HIST
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
            for key, h in sorted(self._hist.items()):
                labels = dict(key)
                for bound, count in zip(LATENCY_BUCKETS, h):
                    lines.append(f"{name}_bucket{_labels({**labels, 'le': f'{bound:g}'})} {count}")
                lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {h[-1]}")
                lines.append(f"{name}_sum{_labels(labels)} {h[-2]:.6f}")
                lines.append(f"{name}_count{_labels(labels)} {h[-1]}")
        for name, help_ in _GAUGES.items():
            if name in self.gauges:
                lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name} {self.gauges[name]():g}"]
        return "\n".join(lines) + "\n"
