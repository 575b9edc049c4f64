"""SecureGate's errors: all ConfigErrors (UmbraErrors), so the CLI prints one line and exits ≠ 0.
At completion time none of them reaches the user: a key that opens nothing is served by the
secure adapter, on the same path as no key (DESIGN invariant 4)."""

from umbra.errors import ConfigError


class SecureGateError(ConfigError):
    """Base of every SecureGate failure."""


class AccessError(SecureGateError):
    """An access-key operation that cannot be done as asked (unknown key or adapter, a key this
    keyring does not hold, a key of another bundle, a corrupted sealed file)."""


class GateError(SecureGateError):
    """The gate could not be trained to route every check right, or a gate file is unusable."""
