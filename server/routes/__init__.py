"""One router per resource: health (and service info), sessions (HTTP), stream (WebSocket), metrics."""
