"""Neovim's built-in LSP client against the real language server: a real headless Neovim (Debian's
`neovim`, 0.7+) loads the documented configuration (editors/neovim/lua/umbra.lua, quoted by
docs/editors/neovim.md) the way a user does, opens a Python file, and its FileType autocommand
starts `umbra lsp` (this virtualenv's, found on PATH as the configuration's default command) over
stdio; the server starts the real cloud service on 127.0.0.1 itself. Neovim asks
textDocument/completion (vim.lsp.buf_request_sync) and applies the item's edit, then completes the
same spot the way a user does, <C-x><C-o> through 'omnifunc'. Both must continue the document with
exactly what the same tiny model completes in this process for the same prefix, suffix and
options; a file in another directory attaches to the same server; :UmbraStatus and
:UmbraRestart work, and every self-started cloud is gone at the end.
A second test keeps the docs honest: they quote the module's defaults verbatim, their option table
names exactly the options of lsp/options.py, and their Lua compiles. Without `nvim` the tests
fail, naming the package to install."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lsp.conversion import section
from lsp.options import CompletionOptions, InitializationOptions
from umbra.paths import repo_root

sys.path.append(str(Path(__file__).parents[1] / "lsp"))  # the lsp tests' helpers, shared
from lsp_helpers import EXACT_INLINE, Monolithic, offset_of, refuses_connections, wait_until  # noqa: E402

PACKAGE = "neovim"  # Debian's package of `nvim`
PLUGIN = repo_root() / "editors" / "neovim"
MODULE = PLUGIN / "lua" / "umbra.lua"
DOCS = repo_root() / "docs" / "editors" / "neovim.md"
DRIVER = Path(__file__).with_name("neovim_driver.lua")
# One line (omnifunc inserts a single line), short: the tiny model is random.
COMPLETION = CompletionOptions(max_tokens=16)
INIT_OPTIONS = {"completion": {"maxTokens": COMPLETION.max_tokens, "multiline": COMPLETION.multiline},
                "inline": EXACT_INLINE, "threads": 1}
SOURCE = "def add(a, b):\n    total = a + b\n    return tot\n\n\nprint(add(1, 2))\n"
CURSOR = (2, 14)  # after "    return tot": the item's edit replaces "tot" by "tot" + the completion
WORD = "tot"
WAIT_S = 300  # for the server to be ready, and for each request (a slow, busy machine)


def _nvim() -> str:
    nvim = shutil.which("nvim")
    if nvim is None:
        pytest.fail(f"`nvim` is not on PATH: the Neovim test needs Debian's `{PACKAGE}` "
                    f"(apt-get install -y {PACKAGE}; scripts/bootstrap.sh installs it)", pytrace=False)
    return nvim


def _umbra_bin() -> Path:
    """The directory of this virtualenv's `umbra`, put first on Neovim's PATH."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "umbra").exists():
        pytest.fail(f"no `umbra` script beside {sys.executable}: install the project (pip install -e .)",
                    pytrace=False)
    return bin_dir


@pytest.fixture(scope="module")
def model_dir(fim_llama_dir) -> Path:
    return fim_llama_dir


@pytest.fixture(scope="module")
def expected(model_dir) -> str:
    at = offset_of(SOURCE, *CURSOR)
    text = asyncio.run(Monolithic(model_dir).complete(SOURCE[:at], SOURCE[at:], COMPLETION))
    assert text.strip(), "the tiny model completes nothing here; pick another cursor"
    return text


def _logs(tmp: Path, proc: subprocess.CompletedProcess | None) -> str:
    parts = []
    if proc is not None:
        parts.append(f"nvim exit status {proc.returncode}\n--- nvim output ---\n{proc.stdout}")
    for name in ("out.json", "cache/nvim/lsp.log"):  # lsp.log holds the server's stderr too
        path = tmp / name
        parts.append(f"--- {name} ---\n" + (path.read_text(errors="replace")[-12000:] if path.exists() else "(none)"))
    return "\n".join(parts)


@pytest.mark.timeout(3 * WAIT_S + 120)
def test_neovim_completes_through_umbra_lsp(tmp_path, model_dir, expected):
    nvim = _nvim()
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    source = project / "add.py"
    source.write_text(SOURCE)
    (elsewhere / "other.py").write_text("import os\n")
    spec = {
        "plugin_dir": str(PLUGIN),
        "setup": {"init_options": {**INIT_OPTIONS, "model": {"dir": str(model_dir)}}},
        "file": str(source), "other_file": str(elsewhere / "other.py"), "line": CURSOR[0], "character": CURSOR[1],
        "out": str(tmp_path / "out.json"), "timeout_ms": WAIT_S * 1000,
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "UMBRA_NVIM_SPEC": str(tmp_path / "spec.json"),
           "PATH": f"{_umbra_bin()}{os.pathsep}{os.environ.get('PATH', '')}"}
    for xdg in ("CONFIG", "DATA", "STATE", "CACHE"):  # nothing of the user's Neovim (or Umbra) set-up
        env[f"XDG_{xdg}_HOME"] = str(tmp_path / xdg.lower())
    proc, failure = None, None
    try:
        proc = subprocess.run([nvim, "--headless", "--clean", "-S", str(DRIVER)], cwd=project, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=3 * WAIT_S + 60)
        out = json.loads((tmp_path / "out.json").read_text())
    except (subprocess.TimeoutExpired, OSError, ValueError) as exc:
        failure = f"Neovim did not finish: {exc}"
    if failure is not None:
        pytest.fail(f"{failure}\n{_logs(tmp_path, proc)}", pytrace=False)

    at = offset_of(SOURCE, *CURSOR)
    completed = SOURCE[:at] + expected + SOURCE[at:]
    try:
        assert proc.returncode == 0 and out["stage"] == "done", out.get("error")
        assert out["filetype"] == "python" and out["clients"] == 1
        assert out["status"]["state"] == "ready" and out["status"]["mode"] == "split"
        [item] = out["completion"]["items"]
        assert item["textEdit"]["newText"] == WORD + expected  # the identifier before the cursor, continued
        assert item["textEdit"]["range"] == {"start": {"line": CURSOR[0], "character": CURSOR[1] - len(WORD)},
                                             "end": {"line": CURSOR[0], "character": CURSOR[1]}}
        assert item["data"]["generatedTokens"] >= 1
        assert out["edited"] == completed  # the edit, applied by Neovim, continues the document
        assert out["omnifunc"] == "v:lua.vim.lsp.omnifunc"
        assert [i["word"] for i in out["omni_items"]] == [WORD + expected]
        assert out["omni_edited"] == completed  # <C-x><C-o>, accepted: the same continuation
        assert out["status_command"].startswith("Umbra ready (split, privacy: none · cloud reads ~99.9 % of tokens): split inference through")
        assert out["one_server"] is True  # one server for every buffer, whatever its directory
        assert out["restarted"] is True
        assert out["reconfigured_tokens"] == 1 and out["reconfigured_same_server"] is True  # setup() again: in place
        assert out["servers_left"] == 0  # stopped when Neovim was done
        for status in (out["status"], out["restart_status"]):  # each server stopped the cloud it started
            cloud = re.search(r"http://127\.0\.0\.1:\d+", status["message"]).group(0)
            wait_until(lambda: refuses_connections(cloud), 60, f"the self-started cloud at {cloud} stopped")
    except (AssertionError, AttributeError, KeyError, TypeError, ValueError) as exc:
        failure = f"{type(exc).__name__}: {exc}"
    if failure is not None:
        pytest.fail(f"{failure}\n{_logs(tmp_path, proc)}", pytrace=False)


# Run in Neovim: each of the docs' Lua blocks compiles, and the module sends empty option sections
# as JSON objects (Neovim encodes an empty Lua table as an array), arrays as arrays.
_CHECKS = """
local blocks = vim.fn.json_decode(table.concat(vim.fn.readfile(vim.env.UMBRA_NVIM_BLOCKS), '\\n'))
local out = { errors = {} }
for i, code in ipairs(blocks) do
  local _, err = loadstring(code, 'docs block ' .. i)
  if err then table.insert(out.errors, err) end
end
vim.opt.runtimepath:append(vim.env.UMBRA_NVIM_PLUGIN)
local umbra = require('umbra')
out.empty = vim.json.encode(umbra.init_options({}))
out.sections = vim.json.encode(umbra.init_options({ cloud = {}, languages = { aliases = {} },
  completion = { languages = {}, maxTokens = 8 } }))
vim.fn.writefile({ vim.json.encode(out) }, vim.env.UMBRA_NVIM_OUT)
vim.cmd('qall!')
"""


def _option_paths(cls=InitializationOptions, prefix: str = "") -> set[str]:
    """The dotted camelCase names of every leaf option of the schema."""
    paths = set()
    for name, info in cls.model_fields.items():
        path = prefix + (info.alias or name)
        sub = section(cls, name)
        paths |= _option_paths(sub, path + ".") if sub is not None else {path}
    return paths


def test_docs_quote_the_module_and_name_every_option(tmp_path):
    nvim = _nvim()
    docs, module = DOCS.read_text(), MODULE.read_text()
    defaults = re.search(r"^M\.defaults = \{$.*?^\}$", module, re.M | re.S).group(0)
    assert defaults in docs, "docs/editors/neovim.md must quote M.defaults of editors/neovim/lua/umbra.lua verbatim"
    options = docs.split("## Options", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `([\w.]+)` \|", options, re.M)) == _option_paths()

    blocks = re.findall(r"^```lua\n(.*?)^```$", docs, re.M | re.S)
    assert len(blocks) >= 3
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "checks.lua").write_text(_CHECKS)
    env = {**os.environ, "UMBRA_NVIM_BLOCKS": str(tmp_path / "blocks.json"), "UMBRA_NVIM_PLUGIN": str(PLUGIN),
           "UMBRA_NVIM_OUT": str(tmp_path / "out.json"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run([nvim, "--headless", "--clean", "-S", str(tmp_path / "checks.lua")], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert proc.returncode == 0 and (tmp_path / "out.json").exists(), proc.stdout
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["errors"] == []
    assert json.loads(out["empty"]) == {} and out["empty"] == "{}"
    assert json.loads(out["sections"]) == {"cloud": {}, "languages": {"aliases": {}},
                                           "completion": {"languages": [], "maxTokens": 8}}
