"""umbra/privacy/measured.py's figures per model, as umbra/privacy/mode.py shows them: a mode shows what was measured on the model in use —
the deep default's own rows (experiments/share_sweep.py → measured.json's `other_models`) for a
bundle of it at the measured split, and for it without a bundle — never another model's or
another split's figures, and a malformed table is an error, not silence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from umbra.attack_grid.frontier import VARIANTS, Cell, FrontierParams, tune_config
from umbra.errors import ValidationError
from umbra.privacy import measured
from umbra.privacy.manifest import sha256_file
from umbra.privacy.measured import model_tables, table_for
from umbra.privacy.mode import STUNING_KEY, mode_of, mode_of_manifest, stuning_record

ROOT = Path(__file__).resolve().parents[2]
DEEP = ROOT / "models" / "umbra-code-deep"
SHIPPED = json.loads((ROOT / "umbra/privacy/measured.json").read_text(encoding="utf-8"))


def _deep_entry(split: list[int]) -> dict:
    return next(e for e in SHIPPED["other_models"] if e["name"] == "umbra-code-deep" and e["split"] == split)


def _defended_record() -> dict:
    """The STuning record `umbra tune` writes for the share sweep's defended configuration."""
    cell = Cell(VARIANTS["noir+clean+noise1"], 1024.0, 0)
    return stuning_record(tune_config(cell, FrontierParams()), cloud_lora=False)


def _manifest(weights: dict, split: tuple[int, int]) -> SimpleNamespace:
    return SimpleNamespace(epsilon=1024.0, privacy={STUNING_KEY: _defended_record()}, base={"weights": weights},
                           split={"encoder_blocks": split[0], "decoder_blocks": split[1]})


def test_the_deep_defaults_figures_are_its_own_rows_at_its_split():
    entry = _deep_entry([1, 1])
    assert entry["weights"] == {"model.safetensors": sha256_file(DEEP / "model.safetensors")}
    m = mode_of_manifest(_manifest(entry["weights"], (1, 1)))
    record = entry["configurations"][m.key]
    assert m.measured is not None and m.measured.top1 == record["top1"]
    assert (m.measured.top1, m.measured.client_alone_top1, m.measured.seeds) == (21.9, 27.1, 3)
    assert m.measured.holds and not m.defended  # no adaptive attack measured on it yet
    assert m.summary.endswith("per-position attacks held; adaptive attacks not measured")
    other = mode_of_manifest(_manifest(_deep_entry([1, 2])["weights"], (1, 2)))
    assert other.measured.top1 == 26.2  # the 3/16 share's own figures


def test_another_split_or_model_has_no_figures():
    weights = _deep_entry([1, 1])["weights"]
    for manifest in (_manifest(weights, (2, 3)), _manifest({"model.safetensors": "0" * 64}, (1, 1))):
        m = mode_of_manifest(manifest)
        assert m.measured is None and not m.defended
        assert "base model other than the measured umbra-code-tiny, umbra-code-deep" in m.label
    assert table_for(weights, (1, 1)).name == "umbra-code-deep" and table_for(weights, (2, 3)) is None


def test_without_a_bundle_the_model_in_use_is_looked_up_by_its_weights(tmp_path):
    deep = mode_of(SimpleNamespace(bundle=None, model_dir=DEEP))
    hashed = measured._digest.cache_info()
    assert mode_of(SimpleNamespace(bundle=None, model_dir=DEEP)) == deep  # the same weights are not hashed again
    assert measured._digest.cache_info().hits > hashed.hits and measured._digest.cache_info().misses == hashed.misses
    assert deep.key == "none" and deep.measured.top1 == _deep_entry([1, 1])["configurations"]["none"]["top1"]
    assert deep.summary.startswith("none · cloud reads ~")
    # the same name and size, other bytes: not the measured model, so the first table's warning
    fake = tmp_path / "fake"
    fake.mkdir()
    with open(fake / "model.safetensors", "wb") as f:
        f.truncate((DEEP / "model.safetensors").stat().st_size)
    first = mode_of(SimpleNamespace(bundle=None, model_dir=fake))
    assert first.measured == model_tables()[0].table["none"] != deep.measured
    shutil.copy(DEEP / "config.json", fake / "config.json")  # a directory without the weights is never hashed
    (fake / "model.safetensors").unlink()
    assert mode_of(SimpleNamespace(bundle=None, model_dir=fake)).measured == model_tables()[0].table["none"]


@pytest.mark.parametrize("break_it", [lambda e: e.pop("split"), lambda e: e.update(split=[1]),
                                      lambda e: e.update(sizes="x"), lambda e: e.update(weights=None)])
def test_a_malformed_other_model_is_an_error(monkeypatch, break_it):
    data = json.loads(json.dumps(SHIPPED))
    break_it(data["other_models"][0])
    monkeypatch.setattr(measured, "_measured_json", lambda: data)
    model_tables.cache_clear()
    try:
        with pytest.raises(ValidationError, match=r"other_models\[0\]"):
            model_tables()
    finally:
        model_tables.cache_clear()
