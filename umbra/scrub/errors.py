"""The scrubber's errors, one hierarchy under the library's: `ScrubError` for anything the scrubber
refuses; `ScrubConfigError` (also a `ConfigError`) for a configuration it cannot use;
`ScrubInputError` for inputs it cannot scrub (missing or unreadable paths, an output that would
land inside an input). Messages name paths and settings, never the text being scrubbed."""

from __future__ import annotations

from umbra.errors import ConfigError, UmbraError


class ScrubError(UmbraError):
    """Base of every error the scrubber raises on purpose."""


class ScrubConfigError(ScrubError, ConfigError):
    """A `ScrubConfig` field is malformed (unknown kind, bad domain, bad network, bad limit)."""


class ScrubInputError(ScrubError):
    """An input path is missing or unreadable, or an output would overwrite or sit inside an input."""
