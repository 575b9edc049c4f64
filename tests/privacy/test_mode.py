"""umbra/privacy/mode.py: the privacy mode's key is canonical and stable, the package's measured
figures load and agree with the doc tables they come from, and the one-line summaries say what the
figures say — never "private" for a mode that completes below the client-blocks-alone control."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from umbra.errors import ValidationError
from umbra.privacy.measured import CONTROL_MARGIN, Measured, measured_table, parse_measured
from umbra.privacy.mode import (
    CLIENT_WEIGHTS_DP_KEY,
    STUNING_KEY,
    PrivacyMode,
    config_key,
    config_label,
    stuning_record,
)
from umbra.tuning.config import TuneConfig
from umbra.tuning.gradient_noise import GradientNoise
from umbra.tuning.inversion_penalty import InversionPenalty

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TUNED = "eps=1024;stuning:steps=300;sigma=0.1;lambda=0;train_embedding=false;cloud_lora=false"


def tuned(sigma=0.1, weight=0.0, steps=300, **extra) -> dict:
    config = TuneConfig(steps=steps, gradient_noise=GradientNoise(sigma), inversion_penalty=InversionPenalty(weight))
    return {**stuning_record(config, cloud_lora=False), **extra}


def test_keys_are_canonical_and_stable():
    """Pinned strings: the benchmark that writes measured.json and every bundle's manifest meet here."""
    assert config_key(None, None) == "none"
    assert config_key(1024, None) == config_key(1024.0, None) == "eps=1024"
    assert config_key(float("inf"), None) == "eps=inf"
    assert config_key(0.5, None) == "eps=0.5"
    assert config_key(1024.0, tuned()) == DEFAULT_TUNED
    # what the key leaves out (the run, not the kind of configuration) does not change it
    other_run = {**tuned(), "lr": 1e-3, "seed": 7, "batch_size": 8, "context_length": 128}
    assert config_key(1024.0, other_run) == DEFAULT_TUNED
    # what it keeps does
    assert config_key(1024.0, tuned(sigma=0.0)) != DEFAULT_TUNED
    assert config_key(1024.0, tuned(weight=10.0)).endswith("lambda=10;train_embedding=false;cloud_lora=false")
    assert config_key(1024.0, {**tuned(), "cloud_lora": True}).endswith("cloud_lora=true")
    assert config_key(1024.0, {**tuned(), "train_embedding": True}) != DEFAULT_TUNED
    assert config_key(1024.0, tuned(steps=1000)) != DEFAULT_TUNED


def test_subrecords_enter_the_key_verbatim_when_enabled():
    on = {"enabled": True, "rank": 16, "noise": 0.5}
    key = config_key(1024.0, tuned(private_path=on))
    assert key == DEFAULT_TUNED + ';private_path={"enabled":true,"noise":0.5,"rank":16}'
    assert config_key(1024.0, tuned(private_path={**on, "enabled": False})) == DEFAULT_TUNED
    # no "enabled" entry: counted, so an unknown setting never borrows another configuration's figures
    assert "adversary=" in config_key(1024.0, tuned(adversary={"weight": 1.0}))
    # order of the entries does not matter
    assert key == config_key(1024.0, tuned(private_path=dict(reversed(list(on.items())))))


def test_forward_only_tuning_has_its_own_key_and_label():
    from umbra.model.private_path_config import PrivatePathConfig

    path = PrivatePathConfig(enabled=True, noise=1.0, residual="clean")
    both = [TuneConfig(gradient_noise=GradientNoise(0.0), private_path=path, cloud_backward=flag).validate()
            for flag in (True, False)]
    keys = [config_key(1024.0, stuning_record(c, cloud_lora=False)) for c in both]
    assert "cloud_backward" not in keys[0]  # the default leaves every earlier key as it was
    assert keys[1] == keys[0] + ";cloud_backward=false"
    assert config_label(1024.0, stuning_record(both[1], cloud_lora=False)).endswith("forward only (no gradient sent)")


def test_stuning_record_writes_the_enabled_flag_of_subconfigs():
    sub = SimpleNamespace(enabled=False)
    config = SimpleNamespace(trajectory=lambda: {"steps": 5, "adversary": {"weight": 0.0}}, adversary=sub)
    assert stuning_record(config, cloud_lora=True) == {"steps": 5, "adversary": {"weight": 0.0, "enabled": False},
                                                       "cloud_lora": True}


def test_a_stuning_record_needs_a_bundle_and_must_be_well_formed():
    with pytest.raises(ValidationError):
        config_key(None, tuned())
    with pytest.raises(ValidationError):
        config_key(13.0, {"gradient_noise": {}})  # no steps


def test_the_package_figures_are_the_doc_tables():
    """measured.json is exactly what experiments/measured_modes.py derives from the doc tables."""
    from experiments import measured_modes
    built = measured_modes.build(ROOT)
    shipped = json.loads((ROOT / "umbra/privacy/measured.json").read_text(encoding="utf-8"))
    assert built == shipped
    table = measured_table()
    assert set(table) == set(shipped["configurations"])


def test_lookup_of_the_measured_configurations():
    """Wording and details against a fixed table (the shipped figures change with every grid run)."""
    table = {
        "none": Measured("none", {"(a) nearest neighbour": 99.9, "(b) probe": 95.4}, 9.2, top1=53.6),
        DEFAULT_TUNED: Measured("d", {"(a) nearest neighbour": 0.6, "(b) probe": 8.0, "(e) gradient labels": 0.2}, 9.2,
                                top1=41.9, client_alone_top1=31.7, fclean_top1=53.1, seeds=3, adaptive=True,
                                source="docs/privacy/frontier.md"),
        config_key(1024.0, tuned(sigma=0.0)): Measured("e", {"(a) nearest neighbour": 62.5}, 9.2),
    }
    none = PrivacyMode.of(None, None, table)
    assert none.label == "none" and not none.defended
    assert none.summary == "none · cloud reads ~99.9 % of tokens"
    default = PrivacyMode.of(1024.0, tuned(), table)
    assert default.key == DEFAULT_TUNED and default.defended
    assert default.label == "NOIR ε=1024 · STuned 300 steps, gradient σ=0.1"
    assert default.summary == "NOIR ε=1024 · STuned 300 steps, gradient σ=0.1 · strongest attack 8.0 % (baseline 9.2 %)"
    d = default.details
    assert {"name": "(b) probe", "percent": 8.0} in d["attacks"] and d["baseline"] == 9.2 and d["top1"] == 41.9
    assert len(d["attacks"]) == 3 and d["belowControl"] is False and d["offered"] is True and default.offered
    assert d["fcleanTop1"] == 53.1 and d["clientAloneTop1"] == 31.7 and d["adaptive"] is True and d["seeds"] == 3
    assert d["strongestAttack"] == {"name": "(b) probe", "percent": 8.0}
    assert d["source"] == "docs/privacy/frontier.md"
    exact = PrivacyMode.of(1024.0, tuned(sigma=0.0), table)
    assert not exact.defended and exact.summary.endswith("cloud reads ~62.5 % of tokens")
    assert PrivacyMode.of(500.0, None, table).summary == "NOIR ε=500 · not measured"
    assert not PrivacyMode.of(500.0, None, table).defended


def test_the_shipped_table_has_the_product_defaults():
    """The package's figures cover no bundle, the untuned default ε and the tuned default."""
    shipped = measured_table()
    assert {"none", "eps=1024", DEFAULT_TUNED} <= set(shipped)
    assert not shipped["none"].holds  # plain states give the code away
    mode = PrivacyMode.of(1024.0, tuned())
    assert mode.measured == shipped[DEFAULT_TUNED] and mode.summary.startswith("NOIR ε=1024 · STuned 300 steps")


def test_below_the_control_is_never_called_private():
    m = Measured(label="x", attacks={"(a)": 0.1, "(b)": 8.0}, baseline=9.2, top1=20.0, client_alone_top1=31.0,
                 adaptive=True)
    mode = PrivacyMode("k", "NOIR ε=1024", m)
    assert mode.defended  # the attacks hold …
    assert mode.summary == ("NOIR ε=1024 · attacks held; completes below the client-blocks-alone control "
                            "(20.0 % vs 31.0 %)")
    assert mode.details["belowControl"] is True
    assert not mode.offered and mode.details["offered"] is False  # … but not worth a remote cloud
    sent = PrivacyMode("k", "NOIR ε=1024", m, opted_in=True)
    assert sent.summary.startswith("NOIR ε=1024 — sent by your setting · attacks held; completes below")
    clears = PrivacyMode("k", "NOIR ε=1024", Measured("x", {"(a)": 0.1}, 9.2, top1=41.0, client_alone_top1=31.0,
                                                       adaptive=True))
    assert clears.summary == "NOIR ε=1024 · strongest attack 0.1 % (baseline 9.2 %)"
    assert clears.offered
    # within the margin of the control: below it; no control measured: not offered either
    near = Measured("x", {"(a)": 0.1}, 9.2, top1=31.0 + CONTROL_MARGIN - 0.1, client_alone_top1=31.0, adaptive=True)
    assert near.below_control and not PrivacyMode("k", "l", near).offered
    assert not PrivacyMode("k", "l", Measured("x", {"(a)": 0.1}, 9.2, top1=41.0, adaptive=True)).offered


def test_per_position_attacks_alone_never_make_a_mode_defended():
    """Every plain NOIR bundle held the per-position attacks and was then read by the decipherment:
    without an adaptive attack measured, a mode that holds is not defended (and says why)."""
    held = Measured("x", {"(a)": 0.1, "(b)": 8.0}, 9.2, top1=41.0, client_alone_top1=31.0)
    mode = PrivacyMode("k", "NOIR ε=1024", held)
    assert held.holds and not mode.defended
    assert mode.summary == "NOIR ε=1024 · per-position attacks held; adaptive attacks not measured"
    adaptive = PrivacyMode("k", "NOIR ε=1024", Measured("x", {"(a)": 0.1, "decipher@10x": 0.8}, 9.2, adaptive=True))
    assert adaptive.defended and not adaptive.offered  # no utility measured against the control


def test_an_opt_in_is_said_and_the_header_is_ascii():
    mode = PrivacyMode.of(None, None)
    sent = PrivacyMode(mode.key, mode.label, mode.measured, opted_in=True)
    assert sent.summary.startswith("none — sent undefended by your setting")
    assert sent.details["optedIn"] is True
    table = {DEFAULT_TUNED: Measured("d", {"(b) probe": 8.0}, 9.2, adaptive=True)}
    header = PrivacyMode.of(1024.0, tuned(), table).header
    assert header == "NOIR eps=1024; STuned 300 steps, gradient sigma=0.1; strongest attack 8.0 % (baseline 9.2 %)"
    header.encode("latin-1")


def test_measured_records_are_checked_on_load():
    good = {"label": "x", "attacks": {"(a)": 50.0}, "baseline": 9.2, "holds": False, "top1": None,
            "client_alone_top1": None, "fclean_top1": None, "seeds": 1, "adaptive": False, "source": "docs/x.md"}
    assert parse_measured({"configurations": {"k": good}})["k"].holds is False
    with pytest.raises(ValidationError, match="holds"):
        parse_measured({"configurations": {"k": {**good, "holds": True}}})  # the file cannot claim what it did not measure
    with pytest.raises(ValidationError):
        parse_measured({"configurations": {"k": {**good, "attacks": {}}}})
    with pytest.raises(ValidationError):
        parse_measured({"nothing": 1})


def test_the_bundle_module_writes_the_key_mode_reads():
    from umbra.privacy.bundle import STUNING

    assert STUNING == STUNING_KEY
    from umbra.privacy.bundle import CLIENT_WEIGHTS_DP

    assert CLIENT_WEIGHTS_DP == CLIENT_WEIGHTS_DP_KEY
