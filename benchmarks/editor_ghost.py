"""Ghost text latency in a real VS Code: how long after the user's pause the ghost text shows.

    python benchmarks/editor_ghost.py [--trials 20] [--deadline-ms 250] [--wait-s 10]

The real-editor test's editor (tests/editors/code_server_editor.py: code-server with the .vsix
the suite builds, Debian's headless Chromium through puppeteer-core, the real language server of
this checkout with the default model and the cloud it starts on loopback), the extension's
default settings but for `umbra.inline.deadlineMs` (`--deadline-ms`, the extension's default
250). In the Python file of the test (`read_lines`), each trial goes to the end of the `with`
block's line, presses Enter (the editor's auto-indent), types `return` at 90 ms a key, and waits;
the latency is the time from the last keystroke to the first frame that shows ghost text (the
driver polls the page every 100 ms: up to 100 ms late), so it includes the extension's adaptive
debounce, the request, the server's prompt and decode and VS Code's rendering — what the user
waits for. Nothing is re-asked: a trial that shows nothing within `--wait-s` counts as none.
Then Escape and Delete Line (Ctrl+Shift+K) put the document back for the next trial. One trial
first warms the server (model load, the cloud's start); it is not counted.

Prints a row of docs/benchmarks.md's "Ghost text in a real editor" table: the median, the 90th
percentile and the largest latency, the trials without ghost text, the machine's load; then the
ghost texts shown (how often each) and why the server answered nothing when it did (the reasons
of the extension's log: `empty completion: ...`, counts only).

The language server is `python -m lsp` of whatever `PYTHONPATH` puts first (this checkout by
default): `PYTHONPATH=/path/to/other/worktree` measures another commit in the same editor."""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.editors.code_server_editor import SETTINGS, Editor, ghost_text, running_editor  # noqa: E402

SOURCE = ("import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n        text = f.read()\n\n\n"
          "print(read_lines(os.devnull))\n")
LINE, TYPED = 6, "return"


def trial(editor: Editor, wait_s: float) -> tuple[float | None, str | None]:
    """Milliseconds from the last keystroke to the ghost text and the text; None: none within wait_s."""
    editor.go_to_line_end(LINE)
    editor.driver("press", key="Enter")
    editor.driver("type", text=TYPED, delay=90)
    shown = editor.driver("wait", what="ghost", timeout_ms=int(wait_s * 1000))
    editor.driver("press", key="Escape")
    editor.driver("press", key="Control+Shift+K")  # the typed line deleted: the document as it was
    time.sleep(0.5)
    return (None, None) if shown.get("timed_out") else (float(shown["seen_ms"]), shown.get("ghost"))


def empty_reasons(user_data: Path) -> collections.Counter:
    """Why the server answered nothing: the `empty completion: <reason>` lines of the extension's log."""
    reasons = collections.Counter()
    for log in user_data.glob("logs/*/exthost*/*umbra*/*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if (match := re.search(r"empty completion: (.*)$", line)) is not None:
                reasons[match.group(1)] += 1
    return reasons


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--deadline-ms", type=int, default=250, help="umbra.inline.deadlineMs (extension default 250)")
    p.add_argument("--wait-s", type=float, default=10.0, help="a trial without ghost text after this counts as none")
    args = p.parse_args()
    settings = {**SETTINGS, "umbra.inline.deadlineMs": args.deadline_ms}
    tmp = Path(tempfile.mkdtemp(prefix="umbra-editor-ghost-"))
    with running_editor(tmp, {"lines.py": SOURCE}, settings, tmp / "artifacts") as editor:
        editor.open("lines.py")
        editor.wait_ready()
        editor.go_to_line_end(LINE)  # warm-up: the first completion loads what the next ones reuse
        editor.driver("press", key="Enter")
        editor.driver("type", text=TYPED, delay=90)
        ghost_text(editor.driver)
        editor.driver("press", key="Escape")
        editor.driver("press", key="Control+Shift+K")
        trials = [trial(editor, args.wait_s) for _ in range(args.trials)]
        editor.driver("screenshot", path=str(tmp / "artifacts" / "last.png"))
    times = [ms for ms, _ in trials]
    shown = sorted(t for t in times if t is not None)
    load = os.getloadavg()[0]
    if shown:
        p90 = shown[min(len(shown) - 1, int(round(0.9 * (len(shown) - 1))))]
        line = (f"| {args.deadline_ms} | {args.trials} | {len(shown)} | {statistics.median(shown):.0f} | {p90:.0f} | "
                f"{max(shown):.0f} | {load:.1f} |")
    else:
        line = f"| {args.deadline_ms} | {args.trials} | 0 | - | - | - | {load:.1f} |"
    print("| deadline ms | trials | with ghost text | p50 ms | p90 ms | max ms | load (1 min) |")
    print("|---|---|---|---|---|---|---|")
    print(line)
    print(f"per trial (ms, None: no ghost text in {args.wait_s:.0f} s): {times}")
    print(f"ghost texts shown: {dict(collections.Counter(text for _, text in trials if text is not None))}")
    print(f"empty answers (warm-up included): {dict(empty_reasons(tmp / 'user-data'))}")
    print(f"artifacts: {tmp / 'artifacts'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
