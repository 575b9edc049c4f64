"""The memory half of the cloud's hostile suite, shared by its test (tests/server/test_cloud_hostile.py)
and the benchmark's memory row (benchmarks/cloud_load.py): frames that would allocate without bound
if the service trusted them, then two clients filling their KV quotas and pushing past them. Each
frame's answer is checked; what is measured is the service's memory high-water mark against its
KV budget."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from cloud_helpers import auth, open_session, raw_frame, raw_tensor, step

MiB = 1024 * 1024
ROWS, SLOTS = 32, 256  # one flooding session: a full frame of rows, each to the sequence limit


def vm_hwm(pid: int) -> int:
    """The process's resident memory high-water mark (bytes)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def settings(budget: int, max_frame_bytes: int) -> dict:
    """Service settings for the suite: the KV budget, each client a half of it, small limits and
    short timeouts."""
    return dict(kv_budget_bytes=budget, kv_client_quota_bytes=budget // 2, max_frame_bytes=max_frame_bytes,
                max_batch_rows=ROWS, max_seq_len=SLOTS, max_sessions_per_client=16, torch_threads=1,
                header_timeout_seconds=1.0, body_timeout_seconds=1.0, ws_idle_seconds=2.0,
                max_connections_per_address=24, sweep_interval_seconds=0.5)


def _expect(r: httpx.Response, status: int, what: str) -> httpx.Response:
    if r.status_code != status:
        raise AssertionError(f"{what}: HTTP {r.status_code} (expected {status}): {r.text[:200]}")
    return r


@dataclass
class Flood:
    """Against a service started with `settings(budget, …)`: `hidden` is the model's width, `slot_bytes`
    one row's K and V for one position over the middle blocks."""

    http: httpx.Client
    token: str
    other_token: str  # a second client
    budget: int
    hidden: int
    slot_bytes: int

    def run(self) -> int:
        """Every frame, then both clients past their quotas; returns the sessions each client kept
        opening (two more than fit, so its own oldest go)."""
        sid = open_session(self.http, self.token)
        post = self._post
        # a batch of 6,553 rows x 1 position: refused by its row count before any allocation
        _expect(post(step(b=6553 // 8, c=self.hidden), sid), 413, "a frame of too many rows")
        # a zero-size shape with huge other dimensions: 400, never a 500
        zero = raw_frame(1, [raw_tensor(1, (0, 0xFFFFFFFF, 0xFFFFFFFF), b""), raw_tensor(4, (0, 0xFFFFFFFF), b"")])
        if "dimension" not in _expect(post(zero, sid), 400, "a zero-size frame").json()["detail"]:
            raise AssertionError("a zero-size frame was refused for another reason")
        # past the sequence limit: 422 before any allocation
        _expect(post(step(b=8, t=SLOTS + 44, c=self.hidden), sid), 422, "a frame past the sequence limit")
        per_session = ROWS * SLOTS * self.slot_bytes
        fits = (self.budget // 2) // per_session
        if fits < 1:
            raise ValueError(f"a budget of {self.budget} bytes holds no session of {per_session} bytes per client")
        for token in (self.token, self.other_token):
            for _ in range(fits + 2):  # two more than fit: the client's own oldest sessions go
                s = open_session(self.http, token)
                _expect(post(step(b=ROWS, t=100, c=self.hidden), s, token), 200, "a prefill within the quota")
                _expect(post(step(b=ROWS, t=1, start_pos=100, c=self.hidden), s, token), 200, "a decode step")
        return fits + 2

    def _post(self, body: bytes, sid: str, token: str | None = None) -> httpx.Response:
        return self.http.post(f"/v1/sessions/{sid}/forward", content=body, headers=auth(token or self.token))
