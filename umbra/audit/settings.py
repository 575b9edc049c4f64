"""Whether the client records its own traffic for `umbra audit`, and where the recordings live.

Off by default. Turned on explicitly, by `umbra audit on` (a setting kept in
$XDG_CONFIG_HOME/umbra/audit.json) or for one process by UMBRA_AUDIT=1 (UMBRA_AUDIT=0 forces it
off). Recordings go to $XDG_DATA_HOME/umbra/audit/ (UMBRA_AUDIT_DIR overrides), encrypted under a
key in the OS keyring's "umbra" service (UMBRA_AUDIT_SERVICE overrides the service name)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from umbra.errors import ConfigError

ENV_SWITCH = "UMBRA_AUDIT"
ENV_DIR = "UMBRA_AUDIT_DIR"
ENV_SERVICE = "UMBRA_AUDIT_SERVICE"  # keyring service of the recordings' key (default "umbra")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _xdg(var: str, fallback: str) -> Path:
    return Path(os.environ.get(var) or Path.home() / fallback)


def settings_file() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config") / "umbra" / "audit.json"


def audit_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else _xdg("XDG_DATA_HOME", ".local/share") / "umbra" / "audit"


def keyring_service() -> str:
    from keys import DEFAULT_SERVICE

    return os.environ.get(ENV_SERVICE) or DEFAULT_SERVICE


def audit_enabled() -> bool:
    """The environment switch if set, else the saved setting, else False."""
    env = os.environ.get(ENV_SWITCH)
    if env is not None:
        value = env.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise ConfigError(f"{ENV_SWITCH} must be 1 or 0, got {env!r}")
    path = settings_file()
    if not path.is_file():
        return False
    try:
        return bool(json.loads(path.read_text()).get("enabled", False))
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"cannot read the audit setting {path}: {exc}") from exc


def set_enabled(enabled: bool) -> Path:
    """Save the setting (the environment switch still overrides it)."""
    path = settings_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"enabled": bool(enabled)}) + "\n")
    return path
