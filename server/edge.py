"""The cloud service's edge: umbra/edge.py (limits before auth, shared with `umbra serve`) with
the service's frame routes, whose bodies the route streams and counts itself, and its errors."""

from __future__ import annotations

from server.errors import RequestTimeout
from umbra.edge import BodyGuard as _BodyGuard
from umbra.edge import EdgeLimits, edge_protocol
from umbra.wire import FrameTooLarge

__all__ = ["BodyGuard", "EdgeLimits", "edge_protocol"]


class BodyGuard(_BodyGuard):
    frame_routes = ("/forward", "/backward")
    timeout_error = RequestTimeout
    too_large_name = FrameTooLarge.__name__
