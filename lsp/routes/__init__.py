"""Routers of the local HTTP server, one per resource: completions, sessions, health."""
