"""Routers of the local HTTP server, one per resource: the OpenAI-compatible completions and
models, Umbra's own infill, sessions and health."""
