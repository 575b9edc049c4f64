"""experiments/share_sweep.py: a point names a model directory and its split; the split is part of
a run's key (so two splits of one model never share rows or tuned clients); the doc's table and
plot come from the results file's rows of each point's own run."""

from __future__ import annotations

import argparse
import json

import pytest

from experiments import measured_modes, private_mode, share_sweep
from tests.tiny_models import build_tiny_model_dir

from umbra.attack_grid.frontier import VARIANTS, Cell
from umbra.errors import ConfigError


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("model")
    build_tiny_model_dir(directory, family="llama")
    return directory


def test_a_point_is_a_model_directory_and_a_split():
    point = share_sweep.Point.parse("runs/deep-snap:1,2")
    assert (str(point.model), point.encoder_blocks, point.decoder_blocks) == ("runs/deep-snap", 1, 2)
    for bad in ("runs/deep-snap", "runs/deep-snap:1", "runs/deep-snap:a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            share_sweep.Point.parse(bad)


def _args(tmp_path, model_dir, split: str, *extra: str) -> argparse.Namespace:
    return share_sweep._args(["--point", f"{model_dir}:{split}", "--work", str(tmp_path / "work"),
                              "--results", str(tmp_path / "rows.jsonl"), "--doc", str(tmp_path / "sweep.md"), *extra])


def test_the_split_is_part_of_the_run_key(tmp_path, model_dir):
    keys = set()
    for split in ("1,1", "1,2", "2,1"):
        args = _args(tmp_path, model_dir, split)
        bench = share_sweep._bench(args, args.point[0])
        keys.add(private_mode.run_key(bench.public, bench.params))
    assert len(keys) == 3
    args = _args(tmp_path, model_dir, "3,3")  # six blocks of six: no middle left
    with pytest.raises(ConfigError, match="leaves no middle"):
        share_sweep._bench(args, args.point[0])


def _utility(bench, variant: str, seed: int, top1: float) -> None:
    cell = Cell(VARIANTS[variant], 1024.0 if VARIANTS[variant].needs_epsilon else None, seed)
    bench.results.add({"cell": cell.key, "variant": variant, "epsilon": cell.epsilon, "seed": seed,
                       "measure": "utility", "value": {"top1": top1, "languages": {"python": {"top1": top1}}},
                       "tune_seconds": 1.0, "seconds": 1.0})


def test_the_doc_shows_each_share_and_the_defended_gain(tmp_path, model_dir):
    for split, alone, defended in (("1,1", 30.0, 35.0), ("2,2", 40.0, 38.0)):
        args = _args(tmp_path, model_dir, split)
        bench = share_sweep._bench(args, args.point[0])
        for seed, jitter in ((0, 0.0), (1, 1.0)):
            _utility(bench, "client_alone", seed, alone + jitter)
            _utility(bench, share_sweep.DEFENDED, seed, defended + jitter)
            _utility(bench, "fclean", seed, 50.0)
    # another run's rows (another model or split) never reach a point's record
    (tmp_path / "rows.jsonl").open("a").write(json.dumps({"run": "elsewhere", "cell": "fclean@-#s0", "variant": "fclean",
                                                          "epsilon": None, "seed": 0, "measure": "utility",
                                                          "value": {"top1": 99.0, "languages": {}}}) + "\n")
    shipped = {p: p.read_bytes() for p in (share_sweep.ROOT / share_sweep.MEASURED, measured_modes.OUT)}
    assert share_sweep.main(["--point", f"{model_dir}:1,1", "--point", f"{model_dir}:2,2", "--seeds", "0", "1",
                             "--results", str(tmp_path / "rows.jsonl"), "--work", str(tmp_path / "work"),
                             "--doc", str(tmp_path / "sweep.md"), "--measured", str(tmp_path / "share.json"),
                             "--product", str(tmp_path / "measured.json"), "--write"]) == 0
    assert {p: p.read_bytes() for p in shipped} == shipped  # the checkout's files are never written by a test
    products = json.loads((tmp_path / "share.json").read_text())
    assert [(r["name"], r["split"]) for r in products] == [(model_dir.name, [1, 1]), (model_dir.name, [2, 2])]
    product = json.loads((tmp_path / "measured.json").read_text())
    assert product["other_models"] == products and product["configurations"]  # the first table kept
    doc = (tmp_path / "sweep.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith(f"| {model_dir.name}")]
    assert len(rows) == 2
    first, second = rows  # sorted by share: 2/6 before 4/6
    assert "| 1,1 | 33.3 % | 2 |" in first and "| 2,2 | 66.7 % | 2 |" in second  # and their seeds
    assert "| 5.0 ± 0.0 |" in first and "| -2.0 ± 0.0 |" in second  # defended − alone, the same at both seeds
    assert "| 30.5 ± 6.4 | 35.5 ± 6.4 |" in first  # client alone, defended: mean ± 95 % t-interval
    assert "99.0" not in doc
    assert "not measured" in first  # no attack rows: never claimed to hold
    svg = (tmp_path / "sweep.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 4

