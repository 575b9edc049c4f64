"""`umbra federation serve|join|simulate` in the main environment, which has no Flower (it is the
`federation` extra, in .venv-federation): without it they refuse with the way to get it; a bad SuperLink
address, missing data and a bad organizations file are refused before anything starts. The real runs
are in tests/federation/test_deploy.py and test_simulation.py (under .venv-federation)."""

from __future__ import annotations

import json
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


def test_simulate_refuses_what_it_cannot_run_before_ray_starts(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "acme").mkdir()
    (tmp_path / "x" / "acme").mkdir(parents=True)
    cases = [
        ([], "name the organizations"),
        ([str(tmp_path / "nope")], "does not exist"),
        ([str(tmp_path / "acme"), str(tmp_path / "x" / "acme")], "two organizations are named 'acme'"),
        (["--orgs", str(tmp_path / "missing.json")], "cannot read the organizations file"),
    ]
    bad_files = {"[]": "non-empty JSON list", '[{"data": "acme"}]': "needs a name",
                 '[{"name": "a", "data": "acme", "colour": 1}]': "unknown fields",
                 '[{"name": "a", "data": "acme"}, {"name": "a", "data": "acme"}]': "two organizations are named",
                 '[{"name": "a", "data": 3}]': "data must be a string",
                 '[{"name": "a", "data": "acme", "dp_epsilon": "8"}]': "dp_epsilon must be a number",
                 '[{"name": "a", "data": "acme", "bundle": "no-bundle"}]': "does not exist"}
    for i, (text, message) in enumerate(bad_files.items()):
        (tmp_path / f"orgs{i}.json").write_text(text)
        cases.append((["--orgs", str(tmp_path / f"orgs{i}.json")], message))
    for argv, message in cases:
        assert main(["federation", "simulate", *argv, "--model", str(model)]) == 2, argv
        assert message in capsys.readouterr().err, argv
    assert main(["federation", "simulate", str(tmp_path / "acme"), "--model", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_simulate_without_ray_says_how_to_get_it(tmp_path, capsys):
    """This environment has no Flower: a well-formed simulation names the extra to install."""
    (tmp_path / "model").mkdir()
    (tmp_path / "acme").mkdir()
    (tmp_path / "orgs.json").write_text(json.dumps([{"name": "globex", "data": "acme", "dp_epsilon": 8}]))
    assert main(["federation", "simulate", str(tmp_path / "acme"), "--orgs", str(tmp_path / "orgs.json"),
                 "--model", str(tmp_path / "model")]) == 2
    assert "scripts/federation_env.sh" in capsys.readouterr().err
