"""`umbra complete FILE:LINE:COL`: split through the real cloud service (started by the command
itself, or given by --cloud/--token or the environment) prints the same completion as --local."""

from __future__ import annotations

import io
import json
import os
import socket
from pathlib import Path

import pytest
from cli_helpers import COMPLETE_GEN as GEN
from cli_helpers import COMPLETE_SOURCE as SOURCE
from cli_helpers import umbra_complete as _umbra

from umbra.cli.complete_cmd import parse_position, split_at
from umbra.cli.main import main
from umbra.errors import ConfigError
from umbra.paths import default_model_dir, repo_root


def test_split_through_a_self_started_cloud_prints_the_same_as_local(model_dir, source):
    """The console program in a subprocess (the cloud it starts is its child, on loopback)."""
    pos = f"{source}:2:13"  # after "    return a"
    split = _umbra(pos, "--model", model_dir, *GEN, "--json", in_process=False)
    local = _umbra(pos, "--model", model_dir, *GEN, "--local", "--json")
    assert split.returncode == 0, split.stderr
    assert local.returncode == 0, local.stderr
    a, b = json.loads(split.stdout), json.loads(local.stdout)
    assert a["completion"] == b["completion"]
    assert a["generated_tokens"] == b["generated_tokens"] > 0
    assert a["recomputed_tokens"] == a["prompt_tokens"] > 5 and a["template"] == "starcoder"
    # the privacy mode in force, once, on stderr: a plain model through its own loopback cloud
    assert split.stderr.count("umbra: privacy: none · cloud reads ~99.9 % of tokens\n") == 1, split.stderr
    assert "umbra: privacy: nothing is sent (--local)" in local.stderr


def test_configured_cloud_via_flags_and_environment(model_dir, source, cloud, capsys, monkeypatch):
    pos = f"{source}:1:15"  # end of the `def` line
    flags = _umbra(pos, "--model", model_dir, *GEN, "--cloud", cloud.base_url, "--token", cloud.token)
    assert main(["complete", pos, "--model", str(model_dir), *GEN, "--local"]) == 0
    local = capsys.readouterr().out
    monkeypatch.setenv("UMBRA_CLOUD_URL", cloud.base_url)
    monkeypatch.setenv("UMBRA_CLOUD_TOKEN", cloud.token)
    assert main(["complete", pos, "--model", str(model_dir), *GEN]) == 0
    env = capsys.readouterr().out
    wrong = main(["complete", pos, "--model", str(model_dir), *GEN, "--token", "not-a-token"])
    wrong_out = capsys.readouterr()
    assert flags.returncode == 0, flags.stderr
    assert flags.stdout == env == local
    assert wrong == 2 and "HTTP 401" in wrong_out.err and wrong_out.out == ""


def test_a_cloud_not_on_this_machine_needs_a_defended_mode_or_the_opt_in(model_dir, source, capsys, monkeypatch):
    """No bundle and a cloud URL on another machine: refused with the mode and the opt-in named,
    before the token is looked up or anything is sent (tests/privacy/test_cloud_policy.py checks
    the cloud received nothing)."""
    monkeypatch.delenv("UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD", raising=False)
    monkeypatch.delenv("UMBRA_CLOUD_TOKEN", raising=False)
    rc = main(["complete", f"{source}:2:13", "--model", str(model_dir), *GEN, "--cloud", "http://192.0.2.1:9",
               "--token", "t"])
    err = capsys.readouterr()
    assert rc == 2 and err.out == ""
    assert "not on this machine" in err.err and "'none'" in err.err and "--allow-undefended-remote-cloud" in err.err


def test_configured_cloud_with_its_token_in_the_os_keyring(model_dir, source, cloud, capsys, monkeypatch, keystore):
    """`umbra keys cloud-token set URL` (token on stdin) then `umbra complete --cloud URL`: no token on argv."""
    pos = f"{source}:1:15"
    monkeypatch.delenv("UMBRA_CLOUD_TOKEN", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(cloud.token + "\n"))
    assert main(["keys", "cloud-token", "set", cloud.base_url, "--service", keystore.service]) == 0
    capsys.readouterr()
    assert main(["complete", pos, "--model", str(model_dir), *GEN, "--cloud", cloud.base_url,
                 "--service", keystore.service]) == 0
    split = capsys.readouterr().out
    assert main(["complete", pos, "--model", str(model_dir), *GEN, "--local"]) == 0
    assert split == capsys.readouterr().out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_cloud_is_an_error_never_a_fallback(model_dir, source, capsys):
    url = f"http://127.0.0.1:{_closed_port()}"
    rc = main(["complete", f"{source}:2:13", "--model", str(model_dir), *GEN, "--cloud", url, "--token", "t"])
    err = capsys.readouterr()
    assert rc == 2 and "unreachable" in err.err and err.out == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["{src}:9:1"], "line 9 is outside"),
        (["{src}:2:14"], "column 14 is outside line 2"),
        (["{src}:two:1"], "must be integers"),
        (["{src}"], "FILE:LINE:COL"),
        (["{src}:1:1", "--local", "--cloud", "http://x"], "--local runs without a cloud"),
        (["{src}:1:1", "--cloud", "http://127.0.0.1:1"], "no token for the cloud at http://127.0.0.1:1"),
        (["{src}:1:1", "-E", "1"], "both --encoder-blocks"),
        (["{src}:1:1", "-E", "3", "-D", "3"], "no middle block"),
        (["{src}.missing:1:1"], "cannot read"),
    ],
)
def test_usage_errors_are_one_clear_line(model_dir, source, capsys, monkeypatch, args, message):
    monkeypatch.delenv("UMBRA_CLOUD_URL", raising=False)
    monkeypatch.delenv("UMBRA_CLOUD_TOKEN", raising=False)
    argv = [a.format(src=source) for a in args]
    rc = main(["complete", *argv, "--model", str(model_dir), "--local"] if "--cloud" not in args and "--local"
              not in args else ["complete", *argv, "--model", str(model_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1


def test_default_model_dir_absent_or_still_training(source, tmp_path, capsys, monkeypatch):
    assert default_model_dir() == repo_root() / "models" / "umbra-code-deep" or os.environ.get("UMBRA_MODEL_DIR")
    monkeypatch.setenv("UMBRA_MODEL_DIR", str(tmp_path / "absent"))
    assert main(["complete", f"{source}:1:1", "--local"]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    monkeypatch.setenv("UMBRA_MODEL_DIR", str(tmp_path))
    assert main(["complete", f"{source}:1:1", "--local"]) == 2
    assert "still training" in capsys.readouterr().err


def test_positions_are_one_based_and_paths_may_hold_colons():
    assert parse_position("C:/src/a:b.py:12:5") == (Path("C:/src/a:b.py"), 12, 5)
    text = "ab\r\ncd\nef"
    assert split_at(text, 1, 1) == ("", text)
    assert split_at(text, 1, 3) == ("ab", "\r\ncd\nef")  # one past the end of a CRLF line
    assert split_at(text, 3, 3) == (text, "")
    with pytest.raises(ConfigError):
        split_at(text, 0, 1)
