"""umbra/processes.py: a child that ends on SIGTERM is reaped with its code; one that ignores
SIGTERM is killed after the grace period; one already gone is only reaped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from umbra.processes import end_process

_IGNORES_TERM = ("import signal, sys, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                 "print('ready', flush=True)\ntime.sleep(60)\n")


def test_a_child_that_ends_on_sigterm_is_reaped_with_its_code():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert end_process(proc, grace=30) == -signal.SIGTERM
    assert proc.returncode == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace_period():
    proc = subprocess.Popen([sys.executable, "-c", _IGNORES_TERM], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"  # its handler is in place
    t0 = time.monotonic()
    assert end_process(proc, grace=0.5) == -signal.SIGKILL
    assert time.monotonic() - t0 >= 0.5  # it was given the grace period first
    proc.stdout.close()


def test_a_child_already_gone_is_only_reaped():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    while proc.poll() is None:
        time.sleep(0.01)
    assert end_process(proc, grace=5) == 3
