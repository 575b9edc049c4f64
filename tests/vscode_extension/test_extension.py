"""The VS Code extension's own test suite, run from pytest so `./scripts/test` covers it.

`npm test` in vscode-extension/ compiles the TypeScript and runs the unit tests and the
integration test, which starts the real language server (`python -m lsp`, this interpreter)
with a tiny random model and drives it over stdio the way the extension does. Node.js 20+ and
npm are required; their absence is a failure, not a skip."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from shared_build import checkout_lock
from tiny_models import build_tiny_model_dir

EXTENSION = Path(__file__).resolve().parents[2] / "vscode-extension"


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("`npm` is not on PATH: the VS Code extension tests need Node.js 20+ and npm")
    return npm


def _run(cmd: list[str], env: dict[str, str], timeout: float) -> None:
    proc = subprocess.run(cmd, cwd=EXTENSION, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"`npm {' '.join(cmd[1:])}` failed with exit status {proc.returncode}:\n"
                    f"{proc.stdout}", pytrace=False)


def _needs_install() -> bool:
    installed = EXTENSION / "node_modules" / ".package-lock.json"
    lock = EXTENSION / "package-lock.json"
    return not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_vscode_extension(tmp_path):
    npm = _npm()
    model = tmp_path / "tiny-llama"
    build_tiny_model_dir(model, family="llama-plain")
    env = {
        **os.environ,
        "UMBRA_TEST_MODEL_DIR": str(model),
        # JSON array: survives spaces in the interpreter's path
        "UMBRA_LSP_COMMAND": json.dumps([sys.executable, "-m", "lsp"]),
        "NO_UPDATE_NOTIFIER": "1",
    }
    with checkout_lock(EXTENSION):  # npm writes node_modules/ and out/: one at a time (tests/editors builds too)
        if _needs_install():
            _run([npm, "ci", "--no-audit", "--no-fund"], env, timeout=600)
        _run([npm, "test"], env, timeout=1500)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_vsix_holds_one_bundled_script_and_no_node_modules(tmp_path):
    """`npm run package` (@vscode/vsce, pinned) bundles the extension with esbuild
    (vscode-languageclient and minimatch inlined, only `vscode` left external) and ships that one
    bundle, the manifest, README and LICENSE — no sources, no node_modules, no test code."""
    npm = _npm()
    env = {**os.environ, "NO_UPDATE_NOTIFIER": "1"}
    vsix = tmp_path / "umbra.vsix"
    with checkout_lock(EXTENSION):
        if _needs_install():
            _run([npm, "ci", "--no-audit", "--no-fund"], env, timeout=600)
        _run([npm, "run", "package", "--", "--out", str(vsix)], env, timeout=600)
    archive = zipfile.ZipFile(vsix)
    names = archive.namelist()
    assert [n for n in names if n.endswith((".js", ".cjs", ".mjs"))] == ["extension/dist/extension.js"], names
    assert not [n for n in names if "node_modules/" in n or n.endswith((".ts", ".map")) or "/out/" in n
                or "/src/" in n], names
    assert set(names) == {"extension.vsixmanifest", "[Content_Types].xml", "extension/package.json",
                          "extension/readme.md", "extension/LICENSE.txt", "extension/dist/extension.js"}, names
    assert archive.read("extension/LICENSE.txt") == (EXTENSION / "LICENSE").read_bytes()

    manifest = json.loads(archive.read("extension/package.json"))
    source = json.loads((EXTENSION / "package.json").read_text())
    assert manifest["main"] == "./dist/extension.js"
    assert (manifest["name"], manifest["publisher"], manifest["license"]) == ("umbra", "umbra-dev", "Apache-2.0")
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"]) and manifest["version"] == source["version"]
    assert re.fullmatch(r"\^1\.\d+\.\d+", manifest["engines"]["vscode"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", source["devDependencies"]["@vscode/vsce"]), "vsce is pinned"
    commands = {c["command"] for c in manifest["contributes"]["commands"]}
    assert {"umbra.toggle", "umbra.triggerCompletion", "umbra.restartServer", "umbra.openSecurityReport",
            "umbra.rotateAccessKey"} <= commands
    assert {k["command"] for k in manifest["contributes"]["keybindings"]} <= commands
    assert "umbra.exclude" in manifest["contributes"]["configuration"]["properties"]
    identity = re.search(r'<Identity [^>]*Version="([^"]+)"[^>]*Publisher="([^"]+)"',
                         archive.read("extension.vsixmanifest").decode())
    assert identity and identity.groups() == (manifest["version"], "umbra-dev")

    bundle = archive.read("extension/dist/extension.js").decode()
    required = set(re.findall(r'require\("([^"]+)"\)', bundle))
    assert "vscode" in required  # the one external: VS Code provides it
    assert all(m == "vscode" or m.removeprefix("node:") in NODE_BUILTINS for m in required), required
    assert "umbra.triggerCompletion" in bundle and "$/cancelRequest" in bundle  # ours and the client, inlined


NODE_BUILTINS = {"child_process", "crypto", "fs", "net", "os", "path", "util", "events", "stream", "url", "tty",
                 "assert", "buffer", "string_decoder", "readline", "worker_threads", "timers"}
