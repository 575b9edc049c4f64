"""Umbra's shared library: model partition, the Middle seam, the wire format, the completion
engine, the privacy layer, data and training. `server/`, `lsp/` and `keys/` build on it."""

__version__ = "0.1.0"
