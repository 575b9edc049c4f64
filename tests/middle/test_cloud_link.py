"""CloudLink (umbra/middle/cloud_link.py) against the real cloud service (uvicorn on a loopback
socket): a session's requests count its round trips and every payload's bytes, the first frame
opens a session in one request, the stream serves the id it returned, and a session the cloud
no longer holds fails the stream step as UnknownSession with the stream dropped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

_REPO = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _REPO:  # the real `server` package, not tests/server
    sys.path.insert(0, _REPO)

from server.launch import local_cloud_thread  # noqa: E402
from umbra import wire  # noqa: E402
from umbra.middle.cloud_link import CloudLink  # noqa: E402
from umbra.middle.remote_errors import UnknownSession  # noqa: E402
from umbra.middle.remote_session import RemoteSession  # noqa: E402


async def test_open_with_the_first_frame_then_stream_and_a_dropped_session(tiny_model_dirs):
    h, pos = torch.randn(1, 6, 64, generator=torch.Generator().manual_seed(1)), torch.arange(6)[None]
    with local_cloud_thread(tiny_model_dirs["llama"], settings={"torch_threads": 1}) as cloud:
        link = CloudLink(cloud.base_url, cloud.token, verify=None, timeout=30, connect_timeout=5, tap=None)
        seen = []
        link.tap = lambda direction, payload: seen.append((direction, len(payload)))
        try:
            info = await link.fetch_info()
            assert info["open_in_frame"] is True and info["hidden_size"] == 64
            s = RemoteSession(False, route="r" * 24)
            out = await link.open_with(s, link.frame_bytes(wire.forward_frame(h[:, :5], pos[:, :5], start=0)))
            assert out.shape == (1, 5, 64) and s.remote and s.trips == 1  # open + forward: one trip
            step = await link.ws_step(s, link.frame_bytes(wire.forward_frame(h[:, 5:], pos[:, 5:], start=5)))
            assert step.shape == (1, 1, 64) and s.trips == 3 and s.ws is not None  # upgrade + step
            assert link.stats.http_requests == 2 and link.stats.ws_messages == 1
            assert link.stats.bytes_sent == sum(n for d, n in seen if d == "sent") > 0
            assert link.stats.bytes_received == sum(n for d, n in seen if d == "received") > 0
            await link.request("DELETE", f"/v1/sessions/{s.remote}")  # no session: no trip of s
            assert s.trips == 3
            with pytest.raises(UnknownSession):
                await link.ws_step(s, link.frame_bytes(wire.forward_frame(h[:, 5:], pos[:, 5:], start=6)))
            assert s.ws is None and s.trips == 4
        finally:
            await link.aclose()

