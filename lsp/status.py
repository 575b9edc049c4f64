"""The server's state as the user sees it: `umbra/status` notifications and GET /healthz.

States: "starting" → "ready"; "unreachable" when a cloud call fails, and back; "error" when
set-up fails or the cloud refuses our token (lsp/cloud_supervisor.py says when). The mode is
"split", or "client-only" when the `clientOnly` option has the client's blocks complete alone. `privacy` is the privacy mode in force (umbra/privacy/mode.py) with the attack
tables' figures for it in `privacyDetails`; `expert` and `access` name what served the last
completion (names only, never a key or text)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from umbra.engine import CompletionResult
from umbra.privacy.mode import PrivacyMode

log = logging.getLogger("umbra.lsp")

STATES = ("starting", "ready", "unreachable", "error")


@dataclass(frozen=True)
class Status:
    state: str  # one of STATES
    message: str  # one line for the user (never prompts, completions or tokens)
    mode: str = "split"  # "split": the middle blocks run in the cloud; "client-only": no middle, no cloud
    expert: str | None = None  # the expert adapter that served the last completion (a name only)
    access: str = "secure"  # SecureGate: "secure" or "revealing: NAME" for the last completion (never a key)
    privacy: str | None = None  # PrivacyMode.summary in force; None before the model is loaded
    privacy_details: dict | None = None  # PrivacyMode.details: the measured figures (JSON `privacyDetails`)

    def to_json(self) -> dict:
        return {"state": self.state, "message": self.message, "mode": self.mode, "expert": self.expert,
                "access": self.access, "privacy": self.privacy, "privacyDetails": self.privacy_details}

    def with_privacy(self, mode: PrivacyMode) -> Status:
        return replace(self, privacy=mode.summary, privacy_details=mode.details)


class StatusBoard:
    """The current Status; `on_status(status)` is called on every change the user should see."""

    def __init__(self, on_status: Callable[[Status], None] | None = None):
        self.status = Status("starting", "Umbra is starting")
        self._on_status = on_status or (lambda status: None)

    def report(self, state: str, message: str) -> None:
        """Enter `state` (logged and sent when it changes, and for every "starting" step)."""
        changed = state != self.status.state
        self.status = replace(self.status, state=state, message=message)
        if changed or state == "starting":
            log.log(logging.WARNING if state in ("unreachable", "error") else logging.INFO, "status %s: %s", state, message)
            self._on_status(self.status)

    def silence(self) -> None:
        """Send nothing more (a backend replaced by another: its late reports would be stale)."""
        self._on_status = lambda status: None

    def mode(self, mode: str) -> None:
        """How completions are made ("split" or "client-only"; sent with the next report)."""
        self.status = replace(self.status, mode=mode)

    def privacy(self, mode: PrivacyMode) -> None:
        """The privacy mode in force (sent with the next report)."""
        self.status = self.status.with_privacy(mode)

    def served(self, result: CompletionResult) -> None:
        """Name the expert and access that served `result` (names only)."""
        if (result.expert, result.access) != (self.status.expert, self.status.access):
            self.status = replace(self.status, expert=result.expert, access=result.access)
            self._on_status(self.status)
