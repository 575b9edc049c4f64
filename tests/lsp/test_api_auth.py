"""lsp/api_auth.py: Host parsing for the rebinding check, the token file only its user reads, and
no FastAPI for the language server (the HTTP server alone needs it)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from lsp.api_auth import default_token_file, host_name, new_token, remove_token_file, write_token_file


@pytest.mark.parametrize("header, name", [
    ("127.0.0.1:8765", "127.0.0.1"), ("localhost", "localhost"), ("LOCALHOST:1", "localhost"),
    ("[::1]:8765", "::1"), ("[::1]", "::1"), ("evil.example:80", "evil.example"), ("", ""),
    ("127.0.0.1.nip.io:8765", "127.0.0.1.nip.io"),
    # not one host: a rebinding page's name that only starts like a loopback one is no loopback name
    ("[::1].evil.example", ""), ("[::1].evil.example:80", ""), ("[::1]evil", ""), ("[::1]:80x", ""),
    ("localhost:80:81", ""), ("::1", ""), ("user@localhost", ""), ("localhost/x", ""), ("[::1", ""),
])
def test_host_name(header, name):
    assert host_name(header) == name


def test_token_file_is_private_whatever_the_umask_and_is_replaced_atomically(tmp_path):
    old = os.umask(0)
    try:
        path = write_token_file(tmp_path / "a" / "b" / "serve-1.token", "first")
        write_token_file(path, "second")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.read_text() == "second\n" and os.listdir(path.parent) == ["serve-1.token"]
    remove_token_file(path)
    remove_token_file(path)  # already gone: fine
    assert not path.exists()


def test_default_token_file_prefers_the_runtime_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_token_file(8765) == tmp_path / "umbra" / "serve-8765.token"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert default_token_file(1).parent.parent.name == ".cache"


def test_tokens_are_fresh_and_long():
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50 and min(map(len, tokens)) >= 40


def test_the_language_server_never_loads_fastapi():
    """Only the HTTP server needs FastAPI (about 0.3 s of import per language-server start)."""
    code = "import sys, lsp.stdio, lsp.server; print('fastapi' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
