"""benchmarks/startup.py's parts that need no model: the CPU of a process tree read from /proc
(a child's CPU counts towards its parent's tree), the table, and the checkout's label."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from startup import ROOT, Timing, label, table, tree_cpu


CHILD = """import sys, time
t = time.process_time()
while time.process_time() - t < 0.6:
    pass
print("burnt", flush=True)
time.sleep(60)
"""
PARENT = f"""import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print("ready", flush=True)
time.sleep(60)
"""


def test_a_process_trees_cpu_includes_its_busy_child():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert parent.stdout.readline().strip() == "ready"  # the child has burnt 0.6 CPU-seconds
        assert tree_cpu(parent.pid) >= 0.6
        assert tree_cpu(os.getpid()) >= tree_cpu(parent.pid)  # the tree of this process holds it too
        assert tree_cpu(2 ** 22 + 1) == 0.0  # no such process
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_the_table_gives_median_and_range_per_checkout_and_command():
    t = Timing(wall=[3.0, 1.0, 2.0], cpu=[1.5, 0.5, 1.0])
    text = table({("abc1234", "`umbra serve` to ready"): t})
    assert "| abc1234 | `umbra serve` to ready | 3 | 2.00 (1.00–3.00) | 1.00 (0.50–1.50) |" in text


def test_the_label_is_the_commit():
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    assert label(ROOT).startswith(sha)
