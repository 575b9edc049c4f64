"""Ending a child process the way every Umbra command and launcher does: SIGTERM, a grace period
for its own shutdown (a cloud drains its sessions, Flower closes its sockets), then SIGKILL, and
always reaped, so that no zombie or orphan outlives its starter."""

from __future__ import annotations

import subprocess


def end_process(proc: subprocess.Popen, grace: float) -> int:
    """Terminate `proc` if it still runs, kill it after `grace` seconds, and reap it; its return code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()
