"""`umbra federation serve|join` in the main environment, which has no Flower (it is the
`federation` extra, in .venv-federation): without it both refuse with the way to get it; a bad SuperLink
address and missing data are refused before anything starts. The real runs are in
tests/federation/test_deploy.py (under .venv-federation)."""

from __future__ import annotations

import sys

from umbra.cli.main import build_parser, main


def test_the_parser_has_serve_and_join_with_flowers_tls_and_auth_flags():
    args = build_parser().parse_args(["federation", "serve", "--model", "m", "--ssl-certfile", "c.pem",
                                      "--ssl-keyfile", "k.pem", "--ssl-ca-certfile", "ca.pem",
                                      "--enable-supernode-auth"])
    assert (args.rounds, args.min_nodes, args.momentum, args.server_lr) == (3, 3, 0.5, 0.5)
    assert args.enable_supernode_auth and not args.insecure
    args = build_parser().parse_args(["federation", "join", "link:9092", "--data", "a", "b", "--model", "m",
                                      "--root-certificates", "ca.pem", "--auth-private-key", "n.key",
                                      "--auth-public-key", "n.pub"])
    assert [str(p) for p in args.data] == ["a", "b"] and str(args.root_certificates) == "ca.pem"


def test_without_the_extra_both_commands_say_how_to_get_flower(tmp_path, capsys, monkeypatch):
    """An environment without Flower's executables (none beside this Python, none on PATH)."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "code").mkdir()
    assert main(["federation", "join", "127.0.0.1:9092", "--data", str(tmp_path / "code"), "--model",
                 str(tmp_path), "--insecure"]) == 2
    assert "scripts/federation_env.sh" in capsys.readouterr().err
    assert main(["federation", "serve", "--model", str(tmp_path), "--insecure"]) == 2
    assert "federation` extra" in capsys.readouterr().err


def test_bad_inputs_are_refused_before_anything_starts(tmp_path, capsys):
    assert main(["federation", "join", "127.0.0.1:9092", "--data", str(tmp_path / "nope"), "--model",
                 str(tmp_path), "--insecure"]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "code").mkdir()
    assert main(["federation", "join", "no-port", "--data", str(tmp_path / "code"), "--model", str(tmp_path),
                 "--insecure"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    assert main(["federation", "serve", "--model", str(tmp_path / "nope"), "--insecure"]) == 2
    assert "not a model directory" in capsys.readouterr().err
