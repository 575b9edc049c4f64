"""The exception hierarchy of the shared library.

Boundaries translate these: the cloud service into HTTP status codes / WebSocket close codes,
the language server into LSP errors, the CLI into an exit status and one line on stderr."""


class UmbraError(Exception):
    """Base of every error the library raises on purpose."""


class ConfigError(UmbraError):
    """A configuration, model directory or bundle is missing, malformed or unsupported."""


class ModelLoadError(ConfigError):
    """A model directory cannot be loaded (unsupported family, missing weights, bad shapes)."""


class WireError(UmbraError):
    """A frame is malformed: bad magic/version, unknown dtype, wrong sizes, truncated bytes."""


class ValidationError(UmbraError):
    """Well-formed input that breaks a contract (wrong hidden size, NaN/Inf, too long...)."""


class SessionError(UmbraError):
    """Unknown, closed or foreign session."""


class SessionEvicted(SessionError):
    """The cloud dropped this session's KV cache (memory budget); the client must re-prefill."""


class CloudUnavailable(UmbraError):
    """The cloud cannot be reached or dropped the connection. Never fall back to anything."""


class CloudRejected(UmbraError):
    """The cloud refused a request (auth, limits, validation). Carries the HTTP status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class Cancelled(UmbraError):
    """A completion was cancelled between decode steps."""


class StreamDiverged(UmbraError):
    """Text already streamed to a client no longer matches the completion being made."""
