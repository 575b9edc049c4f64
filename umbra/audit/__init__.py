"""`umbra audit`: the client's own security report (NOIR §5.1's "security report").

    settings.py   on/off (off by default: `umbra audit on`, or UMBRA_AUDIT=1) and the audit directory
    store.py      recordings encrypted at rest (AES-256-GCM, key in the OS keyring)
    recorder.py   audit_recording(model, middle): the completion path's 2-line hook; AuditTap for
                  long-running servers (saves each session once it closes)
    config.py     AuditConfig (torch-free: the CLI's defaults)
    analysis.py   run the attack suite (umbra.attacks) on the recordings
    report.py     self-contained HTML report with embedded plots

See docs/privacy/audit.md."""

from __future__ import annotations

from typing import TYPE_CHECKING

from umbra.lazy import exports

_HOME = {"AuditTap": "recorder", "audit_recording": "recorder", "audit_enabled": "settings"}
__all__ = sorted(_HOME)

if TYPE_CHECKING:
    from umbra.audit.recorder import AuditTap, audit_recording
    from umbra.audit.settings import audit_enabled

__getattr__ = exports(__name__, _HOME)  # `umbra audit --help` needs config.py, not torch
