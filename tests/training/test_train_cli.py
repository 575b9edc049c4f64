"""`umbra train pretrain` / `--resume` / `export` through the CLI dispatcher.

Steps are one 512-token block each (--batch-size 1): what is checked is where a run stops,
resumes, records and exports, not what it learns."""

from __future__ import annotations

import json

import pytest

from umbra.cli.main import main


def _args(corpus, tok, out, *extra):
    return ["train", "pretrain", "--corpus-dir", str(corpus), "--tokenizer", str(tok),
            "--out-dir", str(out), "--export-dir", str(out / "export"), "--hidden", "32",
            "--layers", "6", "--heads", "4", "--kv-heads", "2", "--intermediate", "64",
            "--batch-size", "1", "--total-tokens", str(512 * 4), "--fp32", "--eval-every", "2",
            *extra]


@pytest.fixture(scope="module")
def interim(tiny_corpus, tmp_path_factory):
    """A new run without --fp32/--bf16 stopped at step 2 of 4 (its out_dir, read only: a resume
    continues in the checkpoint's own out_dir)."""
    corpus, tok = tiny_corpus
    out = tmp_path_factory.mktemp("interim") / "run"
    assert main([a for a in _args(corpus, tok, out, "--stop-at-step", "2") if a != "--fp32"]) == 0
    return out


def test_cli_pretrain_stop_resume_export(tiny_corpus, tmp_path, capsys):
    corpus, tok = tiny_corpus
    out = tmp_path / "run"
    assert main(_args(corpus, tok, out, "--stop-at-step", "2")) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first == {"step": 2, "tokens_seen": 1024, "finished": False, "interrupted": False}
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
    prov = json.loads((tmp_path / "again" / "training.json").read_text())
    assert prov["state"]["step"] == 4 and prov["total_steps"] == 4 and prov["finished"]
    assert "out_dir" not in prov["config"] and prov["hardware"]["logical_cpus"] >= 1
    assert (tmp_path / "again" / "training_curves.png").stat().st_size > 1000


def test_cli_export_eval_and_card_of_an_interim_checkpoint(tiny_corpus, interim, tmp_path, capsys):
    """A checkpoint mid-schedule exports as interim; the card renders from the committed files only."""
    corpus, tok = tiny_corpus
    model = tmp_path / "model"
    assert main(["train", "export", "--checkpoint", str(interim / "last.pt"), "--out", str(model),
                 "--tokenizer", str(tok)]) == 0
    assert main(["train", "card", "--model", str(model)]) == 2  # no eval.json yet: a clear error
    assert "eval.json" in capsys.readouterr().err
    assert main(["eval", "lm", "--model", str(model), "--corpus", str(corpus), "--split", "train",
                 "--langs", "python", "--max-tokens", "512", "--fim-lines", "2", "--threads", "1",
                 "--json", str(model / "eval.json")]) == 0
    ev = json.loads((model / "eval.json").read_text())
    assert ev["settings"]["fim_lines"] == 2 and ev["languages"][0]["lang"] == "python"
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"sources": {"cpython-3.11": {"lang": "python", "license": "PSF-2.0",
                                                                "files": 3, "bytes": 1000}},
                                   "tokens": {"python": {"train": 2e6, "valid": 1e4, "test": 1e4, "reserved": 5e5}}}))
    assert main(["train", "card", "--model", str(model), "--summary", str(summary)]) == 0
    card = (model / "README.md").read_text()
    assert "**Interim**: pretraining step 2 of 4" in card
    assert "| cpython-3.11 | Python | PSF-2.0 | 3 |" in card
    assert "| Python | 2.00 M | 0.01 M | 0.01 M | 0.50 M |" in card
    top1 = ev["languages"][0]["top1"]
    assert f"| Python | {ev['languages'][0]['tokens']:,} | {top1:.1%} |" in card


def test_cli_rejects_a_model_below_the_layer_floor(tiny_corpus, tmp_path, capsys):
    corpus, tok = tiny_corpus
    args = _args(corpus, tok, tmp_path / "run")
    args[args.index("--layers") + 1] = "2"
    assert main(args) == 2
    assert "layers" in capsys.readouterr().err


def test_cli_resume_of_a_bf16_run_in_fp32_is_recorded(tiny_corpus, tmp_path, capsys):
    """`--resume --fp32` continues a bf16-autocast run in fp32 and records where it switched."""
    from umbra.training.card import _precision
    from umbra.training.checkpoint import load_checkpoint

    corpus, tok = tiny_corpus
    out = tmp_path / "run"
    bf16 = [a if a != "--fp32" else "--bf16" for a in _args(corpus, tok, out, "--stop-at-step", "1")]
    assert main(bf16) == 0
    assert load_checkpoint(out / "last.pt")["config"]["bf16"] is True
    assert bf16[-2:] == ["--stop-at-step", "1"]
    assert main([a for a in bf16[:-2] if a != "--bf16"] + ["--resume", "--fp32", "--stop-at-step", "2"]) == 0
    payload = load_checkpoint(out / "last.pt")
    cfg = payload["config"]
    assert payload["state"]["step"] == 2  # one step in fp32 after the switch
    assert cfg["bf16"] is False and cfg["bf16_until_step"] == 1
    assert _precision(cfg) == "bfloat16 autocast up to step 1, fp32 after it (a CPU without native bf16 matmul)"
    assert _precision({"bf16": True}) == "bfloat16 autocast" and _precision({"bf16": False}) == "fp32"


def test_bf16_autocast_defaults_to_what_the_cpu_has(interim):
    """Without --fp32/--bf16 a new run (the module's interim run) uses bf16 autocast exactly where
    the CPU multiplies bf16 natively (a scalar fallback elsewhere is ~50x slower than fp32)."""
    from pathlib import Path

    from umbra.training.checkpoint import load_checkpoint
    from umbra.training.hardware import native_bf16

    flags = Path("/proc/cpuinfo").read_text().split()
    assert native_bf16() == ("avx512_bf16" in flags or "amx_bf16" in flags)
    assert load_checkpoint(interim / "last.pt")["config"]["bf16"] is native_bf16()


def test_cli_resume_with_a_new_budget_records_the_schedule_change(tiny_corpus, tmp_path, capsys):
    """`--resume --total-tokens N` moves the cosine's end; the change reaches training.json and the card."""
    from umbra.training.card import _schedule
    from umbra.training.schedule import lr_at

    corpus, tok = tiny_corpus
    out = tmp_path / "run"
    assert main(_args(corpus, tok, out, "--stop-at-step", "2")) == 0
    longer = _args(corpus, tok, out, "--resume")
    longer[longer.index("--total-tokens") + 1] = str(512 * 5)
    assert main(longer) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["step"] == 5 and last["finished"]
    prov = json.loads((out / "export" / "training.json").read_text())
    change = {"step": 2, "old_total_tokens": 2048, "new_total_tokens": 2560}
    assert prov["total_steps"] == 5 and prov["schedule_changes"] == [change]
    lr = {int(r.split(",")[0]): float(r.split(",")[2]) for r in (out / "train_log.csv").read_text().splitlines()[1:]}
    cfg = prov["config"]
    for step in (3, 5):  # the row of step s logs the lr of optimizer step s - 1, on the new schedule
        assert lr[step] == pytest.approx(lr_at(step - 1, cfg["lr"], cfg["warmup_steps"], 5, cfg["min_lr_ratio"]),
                                         rel=1e-4)
    assert "changed from 2,048 to 2,560 tokens when resuming at step 2" in _schedule(cfg, prov)
    assert main(["train", "export", "--checkpoint", str(out / "last.pt"), "--out",
                 str(tmp_path / "again"), "--tokenizer", str(tok)]) == 0
    assert json.loads((tmp_path / "again" / "training.json").read_text())["schedule_changes"] == [change]
