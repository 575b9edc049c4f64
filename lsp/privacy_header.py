"""The privacy mode in force on every completion response of the local HTTP API (`umbra serve`):
an `X-Umbra-Privacy` header on POST /v1/infill and POST /v1/completions — answers, errors and
event streams alike — with `PrivacyMode.header`, the status line's summary in ASCII (header values
are Latin-1: ε → eps, σ → sigma, λ → lambda). The figures behind it are in GET /healthz's
`privacyDetails` (with the API token). A pure ASGI middleware, so streams and the disconnect
watch (lsp/disconnect.py) pass through untouched."""

from __future__ import annotations

HEADER = "X-Umbra-Privacy"
COMPLETION_PATHS = ("/v1/infill", "/v1/completions")


class PrivacyHeader:
    def __init__(self, app, backend_of):
        self.app = app
        self.backend_of = backend_of  # () -> the Backend (or None before the lifespan built it)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") not in COMPLETION_PATHS:
            return await self.app(scope, receive, send)

        async def with_header(message):
            if message["type"] == "http.response.start":
                backend = self.backend_of()
                mode = None if backend is None else backend.privacy
                value = "unknown (the model is not loaded)" if mode is None else mode.header
                message = {**message, "headers": [*message.get("headers", []),
                                                   (HEADER.lower().encode(), value.encode("latin-1"))]}
            await send(message)

        await self.app(scope, receive, with_header)
