"""The extension in a real VS Code: code-server (pinned, scripts/editors_env.sh) with the .vsix the
suite builds, driven in Debian's headless Chromium through puppeteer-core (code_server_driver.mjs)
the way a user types. For a Python, a Go and a Java file of a temporary workspace: put the cursor
at the end of a line, press Enter (the editor's own auto-indent), type a few characters, pause;
the extension asks the real language server (this virtualenv's `python -m lsp`, the embedded
default model, the cloud it starts on 127.0.0.1) and VS Code shows ghost text; Tab accepts it.
The saved file must be exactly the text before the cursor + the ghost text shown + the text after
it (nothing doubled or mis-indented), and the status item must show the mode in force. The model's
completions are what they are: this asserts the insertion, not their quality.

Also, in the same editor: the toggle, a killed server, the access-key commands run from the Command
Palette against the real OS keyring (a private D-Bus + GNOME Keyring, tests/keyring_fixture.py),
and the edges a real editor produces (an empty last line after a trailing newline, a selection
when completion is asked for, multiple cursors, one undo after accepting).

One code-server and one browser serve every scenario (a module fixture); a screenshot of each
scenario is kept under the test's tmp dir, or $UMBRA_TEST_ARTIFACTS when set; every process the
test started (each carries a marker in its environment) is ended by the fixture, which fails if
one survives. Without the tools the test fails, naming the install command. The module is the
suite's listed real-editor test (issue 62): marked slow, several minutes."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .code_server_editor import SETTINGS, WAIT_MS, Editor, Scenario, ghost_text, running_editor, wait_for
from .code_server_helpers import ToolsMissing, marked_pids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SCENARIOS = {
    "python": Scenario("lines.py", "import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n"
                                   "        text = f.read()\n\n\nprint(read_lines(os.devnull))\n", 6, "return", " " * 8),
    "go": Scenario("main.go", "package main\n\nimport \"fmt\"\n\nfunc add(a int, b int) int {\n\treturn a + b\n}\n\n"
                              "func main() {\n\ttotal := add(1, 2)\n}\n", 10, "fmt.", "\t"),
    "java": Scenario("Main.java", "public class Main {\n    static int add(int a, int b) {\n        int total = a + b;\n"
                                  "    }\n\n    public static void main(String[] args) {\n"
                                  "        System.out.println(add(1, 2));\n    }\n}\n", 3, "ret", " " * 8),
}

# the Python scenario again, in files of their own: after a restart, and for each edge
AFTER_RESTART = Scenario("again.py", SCENARIOS["python"].source, 6, "return", " " * 8)
UNDO = Scenario("undo.py", SCENARIOS["python"].source, 6, "return", " " * 8)
SELECTION = Scenario("selection.py", SCENARIOS["python"].source, 6, "return", " " * 8)
TAIL = ("tail.py", "import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n        return f.read()\n\n\n")
MULTI = ("multi.py", "def first(path):\n    with open(path) as f:\n        text = f.read()\n\n\n"
                     "def second(path):\n    with open(path) as f:\n        text = f.read()\n")
FILES = {s.file: s.source for s in [*SCENARIOS.values(), AFTER_RESTART, UNDO, SELECTION]} | dict([TAIL, MULTI])


@pytest.fixture(scope="module")
def access_bundle(module_keystore, tmp_path_factory) -> Path:
    """A client bundle of the default model with a revealing adapter sealed under key "team-key"
    in the test's keyring service (the small gate of the SecureGate tests)."""
    from adapter_helpers import perturb
    from securegate.helpers import SMALL_GATE
    from umbra.engine import ClientModel
    from umbra.model.adapters import LoraConfig, build_adapter
    from umbra.paths import default_model_dir
    from umbra.privacy.bundle import BundleConfig, init_bundle
    from umbra.securegate.bundle_access import add_revealing_adapter
    from umbra.securegate.gate import GateConfig

    out = tmp_path_factory.mktemp("access") / "bundle"
    init_bundle(default_model_dir(), BundleConfig(epsilon=float("inf")), out, store=module_keystore)
    model = ClientModel.from_bundle(out, default_model_dir(), store=module_keystore)
    adapter = perturb(build_adapter("team", LoraConfig(rank=2), model.spec, model.plan.shape(model.spec.num_layers)), seed=2)
    add_revealing_adapter(out, adapter, "team-key", module_keystore, gate_config=GateConfig(**SMALL_GATE))
    return out


@pytest.fixture(scope="module")
def editor(tmp_path_factory, secret_service) -> Iterator[Editor]:
    # secret_service first: code-server, its terminals and the language server inherit its D-Bus
    tmp = tmp_path_factory.mktemp("code-server")
    artifacts = Path(os.environ.get("UMBRA_TEST_ARTIFACTS", tmp / "artifacts")) / "code-server"
    try:
        with running_editor(tmp, FILES, SETTINGS, artifacts) as started:
            yield started
    except ToolsMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.mark.parametrize("language", list(SCENARIOS))
def test_ghost_text_accepted_with_tab_is_saved_exactly(editor, language):
    _type_and_accept(editor, SCENARIOS[language], language)


def _accept(editor: Editor, name: str, shown: dict) -> str:
    """Tab, then the file as saved."""
    editor.driver("press", key="Tab")
    gone = editor.driver("wait", what="no_ghost", timeout_ms=30_000)
    after = editor.saved(name)
    assert not gone.get("timed_out"), gone
    return after


def _type_and_accept(editor: Editor, scenario: Scenario, name: str) -> tuple[str, str]:
    """Types the scenario, accepts the ghost text; (the file before, the file after)."""
    drive = editor.driver
    before = editor.type_line(scenario)
    shown = ghost_text(drive)
    drive("screenshot", path=str(editor.artifacts / f"{name}-ghost.png"))
    assert not shown.get("timed_out"), f"no ghost text in {WAIT_MS / 1000} s: {shown}"
    lines = scenario.source.split("\n")
    at = sum(len(s) + 1 for s in lines[:scenario.line]) + len(scenario.indent + scenario.typed)
    after = _accept(editor, scenario.file, shown)
    drive("screenshot", path=str(editor.artifacts / f"{name}-accepted.png"))
    assert after == before[:at] + shown["ghost"] + before[at:], (shown, after)
    status = drive("wait", what="status", contains="ready", timeout_ms=30_000)
    assert status["status"] is not None and "Umbra: ready" in status["status"]["label"], status
    assert "privacy none" in status["status"]["label"], status  # split inference, no defense: the default
    return before, after


def test_toggled_off_no_server_runs_and_on_again_it_does(editor):
    """"Umbra: Toggle Completions" off stops the language server (nothing can be asked: no process),
    the status item says off; on again starts a new one, ready."""
    editor.open(SCENARIOS["python"].file)
    editor.wait_ready()
    before = editor.servers()
    assert len(before) == 1, before
    editor.command("Umbra: Toggle Completions")
    off = editor.driver("wait", what="status", contains="circle-slash", timeout_ms=60_000)
    editor.driver("screenshot", path=str(editor.artifacts / "toggled-off.png"))
    assert not off.get("timed_out"), off
    wait_for(lambda: not editor.servers(), 60, "the language server stopped")
    editor.command("Umbra: Toggle Completions")
    editor.wait_ready()
    after = editor.servers()
    assert len(after) == 1 and after != before, (before, after)


def test_killed_server_is_restarted_and_completes(editor):
    """The language server killed (SIGKILL): the client starts another, which completes exactly."""
    editor.open(SCENARIOS["python"].file)
    editor.wait_ready()
    [killed] = editor.servers()
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: editor.servers() not in ([], [killed]), 120, "a new language server")
    _type_and_accept(editor, AFTER_RESTART, "after-restart")


def test_one_undo_after_accepting_restores_the_text_before(editor):
    before, after = _type_and_accept(editor, UNDO, "undo")
    assert after != before
    editor.driver("press", key="Control+Z")
    restored = editor.saved(UNDO.file)
    editor.driver("screenshot", path=str(editor.artifacts / "undo-undone.png"))
    assert restored == before, (before, restored)


def test_empty_last_line_after_a_trailing_newline_completes_when_asked(editor):
    """The cursor on the empty last line of a file that ends with a newline (the bug report: the
    trigger command showed nothing for ~90 s): asked for with "Trigger Completion Now", ghost text
    shows without typing anything, and Tab inserts exactly it there."""
    name, source = TAIL
    editor.open(name)
    editor.wait_ready()
    editor.driver("press", key="Control+End")
    editor.expect_line(source.count("\n") + 1)
    editor.driver("press", key="Alt+Backslash")
    started = time.monotonic()
    shown = ghost_text(editor.driver)
    (editor.artifacts / "tail.json").write_text(json.dumps({"seconds_to_ghost": time.monotonic() - started,
                                                            "ghost": shown.get("ghost")}))
    editor.driver("screenshot", path=str(editor.artifacts / "tail-ghost.png"))
    assert not shown.get("timed_out"), shown
    assert editor.saved(name) == source  # nothing typed: the trigger alone
    after = _accept(editor, name, shown)
    assert after == source + shown["ghost"], (shown, after)


def test_a_selection_when_completion_is_asked_leaves_the_text_and_then_completes(editor):
    """A selection (Shift+Home over the word typed) when completion is asked for: nothing is
    changed under it; with the selection collapsed (End) the ghost text is accepted exactly."""
    before = editor.type_line(SELECTION)
    editor.driver("press", key="Shift+Home")
    editor.driver("press", key="Alt+Backslash")
    during = editor.driver("wait", what="ghost", timeout_ms=20_000)
    editor.driver("screenshot", path=str(editor.artifacts / "selection-asked.png"))
    assert editor.saved(SELECTION.file) == before
    editor.driver("press", key="End")
    shown = ghost_text(editor.driver)
    assert not shown.get("timed_out"), shown
    at = before.index("return\n") + len("return")
    after = _accept(editor, SELECTION.file, shown)
    editor.driver("screenshot", path=str(editor.artifacts / "selection-accepted.png"))
    (editor.artifacts / "selection.json").write_text(json.dumps({"ghost_while_selected": during.get("ghost")}))
    assert after == before[:at] + shown["ghost"] + before[at:], (shown, after)


def test_multiple_cursors_show_and_accept_the_ghost_text_at_each(editor):
    """Two cursors (Ctrl+D on the same word of both functions, End), Enter and `return` typed at
    both: VS Code shows the ghost text at each cursor (the page holds it twice) and Tab inserts it at
    both, exactly once each."""
    name, source = MULTI
    editor.open(name)
    editor.wait_ready()
    editor.go_to_line_end(3)
    editor.driver("press", key="Home")
    editor.driver("press", key="Control+D", count=2)  # `text` here and in the second function
    editor.driver("press", key="End")
    editor.driver("press", key="Enter")
    editor.driver("type", text="return", delay=90)
    before = editor.saved(name)
    assert before == source.replace("f.read()\n", "f.read()\n        return\n"), before
    shown = ghost_text(editor.driver)
    editor.driver("screenshot", path=str(editor.artifacts / "multi-ghost.png"))
    assert not shown.get("timed_out"), shown
    after = _accept(editor, name, shown)
    editor.driver("screenshot", path=str(editor.artifacts / "multi-accepted.png"))
    half = len(shown["ghost"]) // 2
    ghost = shown["ghost"][:half]
    assert ghost and shown["ghost"] == ghost * 2, shown  # one ghost text at each of the two cursors
    first, second = before.index("return\n") + 6, before.rindex("return\n") + 6
    assert after == before[:first] + ghost + before[first:second] + ghost + before[second:], (shown, after)


def test_access_key_commands_from_the_palette_use_the_real_keyring(editor, access_bundle, module_keystore):
    """"Umbra: Show Access Status" and "Umbra: Rotate Access Key" from the Command Palette, with
    umbra.model.bundle set: the CLI they type into a terminal reads and rotates the key in the real
    OS keyring; the new key is printed in the terminal only, once."""
    from keys.access_keys import load_key
    from umbra.privacy.manifest import Manifest
    from umbra.securegate.access_entries import key_entries

    def team_key() -> tuple[str, str]:
        manifest = Manifest.read(access_bundle)
        return manifest.bundle_id, key_entries(manifest)["team-key"].key_id

    bundle_id, old_id = team_key()
    editor.settings(**{"umbra.model.bundle": str(access_bundle), "umbra.model.keyringService": module_keystore.service})
    try:
        time.sleep(3.0)  # the settings file is read again
        editor.command("Umbra: Show Access Status")
        wait_for(lambda: "(key team-key)" in editor.terminal_text(), 180, "the access status in the terminal")
        editor.driver("screenshot", path=str(editor.artifacts / "access-status.png"))
        editor.command("Umbra: Rotate Access Key")
        time.sleep(1.0)
        editor.driver("type", text="team-key", delay=30)
        editor.driver("press", key="Enter")
        editor.driver("click", text="Rotate")
        wait_for(lambda: team_key()[1] != old_id, 600, "the key rotated in the bundle")
        new_id = team_key()[1]
        flat = lambda: editor.terminal_text().replace("\n", "").replace(" ", "")  # noqa: E731 (a wrapped row)
        wait_for(lambda: f":{bundle_id}:{new_id}:" in flat(), 120, "the new key printed in the terminal")
        editor.driver("screenshot", path=str(editor.artifacts / "access-rotated.png"))
        key = load_key(module_keystore, bundle_id, new_id)  # the real keyring holds the new key
        assert key.text() in flat()
    finally:
        editor.settings()
        editor.driver("press", key="Escape")


def test_every_started_process_is_ours_to_end(editor):
    """The language server and the cloud it started run under code-server, marked as ours."""
    pids = marked_pids(editor.run_id)
    commands = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                for pid in pids]
    assert any(" -m lsp" in c for c in commands), commands
