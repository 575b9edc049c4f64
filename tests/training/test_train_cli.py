"""`umbra train pretrain` / `--resume` / `export` through the CLI dispatcher."""

from __future__ import annotations

import json

from umbra.cli.main import main


def _args(corpus, tok, out, *extra):
    return ["train", "pretrain", "--corpus-dir", str(corpus), "--tokenizer", str(tok),
            "--out-dir", str(out), "--export-dir", str(out / "export"), "--hidden", "32",
            "--layers", "6", "--heads", "4", "--kv-heads", "2", "--intermediate", "64",
            "--batch-size", "2", "--total-tokens", str(2 * 512 * 4), "--fp32", "--eval-every", "2",
            *extra]


def test_cli_pretrain_stop_resume_export(tiny_corpus, tmp_path, capsys):
    corpus, tok = tiny_corpus
    out = tmp_path / "run"
    assert main(_args(corpus, tok, out, "--stop-at-step", "2")) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first == {"step": 2, "tokens_seen": 2048, "finished": False, "interrupted": False}
    assert main(_args(corpus, tok, out)) == 2  # refuses to overwrite a run without --resume
    capsys.readouterr()
    assert main(_args(corpus, tok, out, "--resume")) == 0
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert second["step"] == 4 and second["finished"]
    assert (out / "export" / "model.safetensors").exists()
    assert main(["train", "export", "--checkpoint", str(out / "last.pt"), "--out",
                 str(tmp_path / "again"), "--tokenizer", str(tok)]) == 0
    assert (tmp_path / "again" / "config.json").exists()
    assert (tmp_path / "again" / "tokenizer.json").exists()


def test_cli_rejects_a_model_below_the_layer_floor(tiny_corpus, tmp_path, capsys):
    corpus, tok = tiny_corpus
    args = _args(corpus, tok, tmp_path / "run")
    args[args.index("--layers") + 1] = "2"
    assert main(args) == 2
    assert "layers" in capsys.readouterr().err
