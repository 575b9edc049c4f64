"""`umbra audit`: the client's own security report (NOIR §5.1's "security report").

    settings.py   on/off (off by default: `umbra audit on`, or UMBRA_AUDIT=1) and the audit directory
    store.py      recordings encrypted at rest (AES-256-GCM, key in the OS keyring)
    recorder.py   audit_recording(model, middle): the completion path's 2-line hook; AuditTap for
                  long-running servers (saves each session once it closes)
    analysis.py   run the attack suite (umbra.privacy.attacks) on the recordings
    report.py     self-contained HTML report with embedded plots

See docs/privacy/audit.md."""

from umbra.audit.recorder import AuditTap, audit_recording
from umbra.audit.settings import audit_enabled

__all__ = ["AuditTap", "audit_enabled", "audit_recording"]
