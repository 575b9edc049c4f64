"""The real-editor test's editor (tests/editors/test_code_server.py, benchmarks/editor_ghost.py):
code-server's settings for the test, what a scenario is, code-server and the browser started
over a workspace (`running_editor`: every process it started ended on the way out, an error if
one survives) and the Editor the tests drive — opening files, Go to Line, the Command Palette,
the language servers running, ghost text waited for as a user waits."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .code_server_helpers import MARKER, Driver, build_vsix, chromium, code_server, editors_home, end_marked, \
    marked_pids, node_bin

WAIT_MS = 300_000  # for the workbench, the server's first completion, each ghost text (a busy machine)
TRIGGER_AFTER_MS = 10_000  # a pause this long without ghost text: ask again


@dataclass(frozen=True)
class Scenario:
    file: str
    source: str
    line: int  # 1-based: the cursor goes to its end, then Enter
    typed: str  # typed after the auto-indent
    indent: str  # what the editor's auto-indent must put on the new line (the line above's indentation)


SETTINGS = {
    "umbra.server.python": sys.executable,  # `python -m lsp` of this checkout
    # The default 250 ms (+ its grace) ends a loaded 2-core machine's decode at the first whole word:
    # the test asserts whole insertions, so it gives the decode time (the speed goal is the benchmarks').
    "umbra.inline.deadlineMs": 5000,
    "security.workspace.trust.enabled": False,
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "chat.disableAIFeatures": True,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoUpdate": False,
    "extensions.autoCheckUpdates": False,
    "extensions.ignoreRecommendations": True,
    "git.enabled": False,
    # only Umbra's inline suggestion: no suggest widget that Enter or Tab could accept instead
    "editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"},
    "editor.suggestOnTriggerCharacters": False,
    "editor.wordBasedSuggestions": "off",
    "editor.parameterHints.enabled": False,
    "editor.inlineSuggest.enabled": True,
    "files.insertFinalNewline": False,
    "files.trimTrailingWhitespace": False,
    "editor.formatOnSave": False,
    # the integrated terminal (the access-key commands type into it) drawn as DOM rows the test reads
    "terminal.integrated.gpuAcceleration": "off",
    "terminal.integrated.defaultProfile.linux": "bash",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"code-server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"code-server did not answer {url}:\n{log.read_text()[-4000:]}")


@dataclass
class Editor:
    driver: Driver
    workspace: Path
    artifacts: Path
    run_id: str
    data: Path  # code-server's user-data folder (its settings)
    base_settings: dict  # the settings it was started with

    def open(self, name: str) -> None:
        """A double click on the file in the Explorer, as a user opens a file to edit it."""
        self.driver("press", key="Escape")
        self.driver("open", name=name)
        opened = self.driver("wait", what="title", contains=name, timeout_ms=60_000)
        assert not opened.get("timed_out"), f"{name} did not open: {opened}"
        time.sleep(1.0)  # the editor takes focus

    def go_to_line_end(self, line: int) -> None:
        """Go to Line (Ctrl+G), then End."""
        self.driver("press", key="Control+G")
        self.driver("type", text=str(line), delay=40)
        self.driver("press", key="Enter")
        self.expect_line(line)
        self.driver("press", key="End")

    def command(self, title: str) -> None:
        """Runs a command from the Command Palette (F1), by its title."""
        self.driver("press", key="Escape")
        self.driver("press", key="F1")
        time.sleep(0.5)
        self.driver("type", text=title, delay=30)
        time.sleep(1.0)  # the palette filters its list
        self.driver("press", key="Enter")

    def servers(self) -> list[int]:
        """The language servers (`python -m lsp`) running for this test."""
        return [pid for pid in marked_pids(self.run_id) if b" -m lsp" in cmdline(pid)]

    def wait_ready(self) -> None:
        ready = self.driver("wait", what="status", contains="Umbra: ready", timeout_ms=WAIT_MS)
        assert not ready.get("timed_out"), f"the language server is not ready: {ready}"

    def settings(self, **changes) -> None:
        """Rewrites the user's (and machine's) settings: those it was started with, with `changes` (None drops a key);
        code-server applies them as a user's edit of settings.json."""
        merged = {k: v for k, v in {**self.base_settings, **changes}.items() if v is not None}
        for scope in ("User", "Machine"):
            (self.data / scope / "settings.json").write_text(json.dumps(merged, indent=2))

    def terminal_text(self) -> str:
        return "\n".join(self.driver("terminal")["rows"])

    def type_line(self, scenario: Scenario) -> str:
        """Opens the scenario's file, goes to the end of its line, Enter, types, saves; returns the
        file as saved (the auto-indent checked)."""
        self.open(scenario.file)
        self.wait_ready()
        self.go_to_line_end(scenario.line)
        self.driver("press", key="Enter")
        self.expect_line(scenario.line + 1)
        self.driver("type", text=scenario.typed, delay=90)
        self.driver("press", key="Control+S")
        time.sleep(1.0)
        before = (self.workspace / scenario.file).read_text()
        lines = scenario.source.split("\n")
        assert before == "\n".join(lines[:scenario.line] + [scenario.indent + scenario.typed] + lines[scenario.line:])
        return before

    def saved(self, name: str) -> str:
        self.driver("press", key="Control+S")
        time.sleep(1.0)
        return (self.workspace / name).read_text()

    def expect_line(self, line: int) -> None:
        at = self.driver("wait", what="cursor", contains=f"Ln {line},", timeout_ms=30_000)
        assert not at.get("timed_out"), f"the cursor is not on line {line}: {at}"


def cmdline(pid: int) -> bytes:
    try:
        return b" " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return b""


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.5)


def ghost_text(drive: Driver, trigger_after_ms: int = TRIGGER_AFTER_MS) -> dict:
    """Waits for ghost text as a user does: a pause, then, while nothing shows (the server answers
    nothing when its inline deadline cuts the decode before a whole word; its caches are warm for
    the next ask), "Umbra: Trigger Completion Now" (Alt+\\)."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while True:
        shown = drive("wait", what="ghost", timeout_ms=trigger_after_ms)
        if not shown.get("timed_out") or time.monotonic() > deadline:
            return shown
        drive("press", key="Alt+Backslash")




@contextmanager
def running_editor(tmp: Path, files: dict[str, str], settings: dict, artifacts: Path) -> Iterator[Editor]:
    """code-server with the suite's .vsix over a workspace of `files`, `settings` as the user's
    and machine's, and one headless Chromium on its workbench (ToolsMissing without the tools)."""
    browser, home = chromium(), editors_home()
    artifacts.mkdir(parents=True, exist_ok=True)
    workspace, data, extensions = tmp / "workspace", tmp / "user-data", tmp / "extensions"
    workspace.mkdir()
    for scope in ("User", "Machine"):  # code-server reads machine-scoped settings (umbra.server.python) from Machine
        (data / scope).mkdir(parents=True)
        (data / scope / "settings.json").write_text(json.dumps(settings, indent=2))
    for name, source in files.items():
        (workspace / name).write_text(source)

    run_id = uuid.uuid4().hex
    node = node_bin(home)
    env = {**os.environ, MARKER: run_id, "PATH": f"{node}{os.pathsep}{os.environ.get('PATH', '')}",
           "NO_UPDATE_NOTIFIER": "1", "XDG_CONFIG_HOME": str(tmp / "config"), "SHELL": "/bin/bash"}
    env.pop("VSCODE_IPC_HOOK_CLI", None)
    common = [str(code_server(home)), "--user-data-dir", str(data), "--extensions-dir", str(extensions)]
    vsix = build_vsix(tmp / "umbra.vsix")
    installed = subprocess.run([*common, "--install-extension", str(vsix)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=600)
    if installed.returncode != 0 or "umbra" not in installed.stdout.lower():
        raise RuntimeError(f"code-server --install-extension failed:\n{installed.stdout[-4000:]}")

    port = free_port()
    log = artifacts / "code-server.log"
    driver = None
    with log.open("w") as out:
        server = subprocess.Popen([*common, "--auth", "none", "--bind-addr", f"127.0.0.1:{port}",
                                   "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
                                   "--disable-getting-started-override", "--reconnection-grace-time", "10", str(workspace)],
                                  env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", server, log)
        driver = Driver(node, env, artifacts / "driver.log")
        driver("launch", chromium=browser, puppeteer=str(home / "tools"), profile=str(tmp / "chromium"))
        driver("goto", url=f"http://127.0.0.1:{port}/?folder={workspace}", timeout_ms=WAIT_MS)
        yield Editor(driver, workspace, artifacts, run_id, data, settings)
    finally:
        if driver is not None:
            try:
                driver.close()
            except RuntimeError:
                pass
        server.terminate()
        left = end_marked(run_id)
        if left:
            raise RuntimeError(f"processes of the test still alive: {left}")
