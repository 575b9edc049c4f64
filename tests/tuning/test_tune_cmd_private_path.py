"""`umbra tune` with --path-noise/--path-rank and --adversary: the private path is stored in the
bundle (and completes through the engine), the settings are in the checkpoint, a bundle's path
cannot be changed by later flags."""

from __future__ import annotations

import asyncio

import pytest

from umbra.cli.main import main
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.middle.local import LocalMiddle
from umbra.model.private_path_config import PrivatePathConfig
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.manifest import Manifest
from umbra.tuning import checkpoint as ckpt


@pytest.fixture
def bundle(base_dir, tmp_path, keystore):
    out = tmp_path / "b"
    init_bundle(base_dir, BundleConfig(epsilon=32.0), out, store=keystore)
    return out


def _flags(corpus_dir, keystore) -> list[str]:
    return ["--steps", "3", "--batch-size", "2", "--context-length", "32", "--warmup-steps", "1", "--seed", "5",
            "--corpus-dir", str(corpus_dir), "--service", keystore.service, "--threads", "1", "--in-process"]


def test_tune_with_a_private_path_and_an_adversary(bundle, corpus_dir, keystore, capsys):
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--path-noise", "0.5",
                 "--path-rank", "16", "--adversary", "2", "--adversary-hidden", "16"]) == 0
    err = capsys.readouterr().err
    assert " probe " in err
    saved = ckpt.load(bundle / "tuning" / ckpt.CHECKPOINT_NAME)["config"]
    assert saved["private_path"] == {"enabled": True, "noise": 0.5, "rank": 16}
    assert saved["adversary"]["weight"] == 2.0 and saved["adversary"]["enabled"] is True
    entry = Manifest.read(bundle).privacy["private_path"]
    assert entry["config"] == saved["private_path"] and (bundle / entry["file"]).is_file()
    model = ClientModel.from_bundle(bundle, store=keystore)
    assert model.private_path.config == PrivatePathConfig(True, 0.5, 16)
    assert model.private_path.local.weight.abs().sum() > 0
    engine = CompletionEngine.split(model, LocalMiddle(model.load_middle()),
                                    EngineConfig(stop=StopConfig(max_tokens=4, multiline=True)))
    result = asyncio.run(engine.complete("def add(a, b):\n    return ", "\n"))
    assert result.generated_tokens >= 1
    # a second run keeps the bundle's path; other path settings are refused
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--out", str(bundle / "t2")]) == 0
    assert Manifest.read(bundle).privacy["private_path"]["config"] == saved["private_path"]
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--out", str(bundle / "t3"),
                 "--path-noise", "1.0"]) == 2
    assert "cannot be changed in place" in capsys.readouterr().err


def test_tune_with_the_clean_residual(bundle, corpus_dir, keystore, base_dir, capsys):
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--clean-residual",
                 "--path-noise", "0.5", "--gate-lr", "0.05", "--model", str(base_dir)]) == 0
    saved = ckpt.load(bundle / "tuning" / ckpt.CHECKPOINT_NAME)["config"]
    assert saved["private_path"] == {"enabled": True, "noise": 0.5, "rank": None, "residual": "clean",
                                     "gate": "channel"}
    assert saved["gate_lr"] == 0.05
    manifest = Manifest.read(bundle)
    assert manifest.privacy["private_path"]["config"] == saved["private_path"]
    assert manifest.privacy["stuning"]["private_path"]["residual"] == "clean"  # in the privacy mode's key
    model = ClientModel.from_bundle(bundle, store=keystore)
    assert model.private_path.config.clean and model.private_path.local is None
    assert 0 < (model.private_path.gate - 1).abs().max().item() <= 3 * 0.05 + 1e-6
    engine = CompletionEngine.split(model, LocalMiddle(model.load_middle()),
                                    EngineConfig(stop=StopConfig(max_tokens=4, multiline=True)))
    assert asyncio.run(engine.complete("def add(a, b):\n    return ", "\n")).generated_tokens >= 1
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--out", str(bundle / "t2"),
                 "--private-path", "--path-noise", "0.5"]) == 2  # the local residual is another path
    assert "cannot be changed in place" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--path-gate", "vector"])


def test_tune_forward_only(bundle, corpus_dir, keystore, base_dir, capsys):
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--clean-residual",
                 "--path-noise", "1", "--forward-only", "--model", str(base_dir)]) == 0
    saved = ckpt.load(bundle / "tuning" / ckpt.CHECKPOINT_NAME)["config"]
    assert saved["cloud_backward"] is False
    assert saved["gradient_noise"]["noise_multiplier"] == 0.0  # nothing is sent back to noise
    stuning = Manifest.read(bundle).privacy["stuning"]
    assert stuning["cloud_backward"] is False  # in the privacy mode's key
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--out", str(bundle / "t2"),
                 "--forward-only", "--gradient-noise", "0.1"]) == 2
    assert "sends none" in capsys.readouterr().err


def test_the_default_path_is_the_frontiers_choice(bundle, corpus_dir, keystore, tmp_path, base_dir, capsys):
    """With no path flag `umbra tune` attaches DEFAULT_PRIVATE_PATH (the clean residual, keyed noise
    s = 4, gate lr CLEAN_GATE_LR): the frontier grid's `noir+clean+noise4`, whose measured mode at the
    product's ε and steps is defended. --no-private-path tunes plain STuning and refuses path flags."""
    from umbra.attack_grid.frontier import VARIANTS
    from umbra.privacy.mode import PrivacyMode, mode_of_manifest, stuning_record
    from umbra.tuning.config import CLEAN_GATE_LR, DEFAULT_PRIVATE_PATH, TuneConfig
    from umbra.tuning.gradient_noise import GradientNoise, default_sigma

    measured = VARIANTS["noir+clean+noise4"]
    assert (measured.private_path, measured.gate_lr) == (DEFAULT_PRIVATE_PATH, CLEAN_GATE_LR)
    product = TuneConfig(gradient_noise=GradientNoise(default_sigma(1024.0)), private_path=DEFAULT_PRIVATE_PATH,
                         gate_lr=CLEAN_GATE_LR)  # `umbra tune`'s defaults on an `umbra init` bundle (ε = 1 024)
    mode = PrivacyMode.of(1024.0, stuning_record(product, cloud_lora=False))
    assert mode.defended and "attacks held" in mode.summary

    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore)]) == 0
    assert "private path: clean residual, keyed noise s = 4" in capsys.readouterr().err
    saved = ckpt.load(bundle / "tuning" / ckpt.CHECKPOINT_NAME)["config"]
    assert saved["private_path"] == DEFAULT_PRIVATE_PATH.to_dict() and saved["gate_lr"] == CLEAN_GATE_LR
    assert Manifest.read(bundle).privacy["stuning"]["private_path"] == DEFAULT_PRIVATE_PATH.to_dict()
    assert ClientModel.from_bundle(bundle, store=keystore).private_path.config == DEFAULT_PRIVATE_PATH
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--out", str(bundle / "t2"),
                 "--no-private-path"]) == 2  # a bundle's path stays
    assert "cannot be changed in place" in capsys.readouterr().err
    assert main(["tune", "--bundle", str(bundle), *_flags(corpus_dir, keystore), "--out", str(bundle / "t3"),
                 "--path-gate", "scalar"]) == 2  # another gate is another path, not silently the bundle's
    assert "cannot be changed in place" in capsys.readouterr().err

    plain = tmp_path / "plain"
    init_bundle(base_dir, BundleConfig(epsilon=32.0), plain, store=keystore)
    for extra, why in ((["--path-noise", "1"], "drop the path flags"), (["--path-gate", "scalar"], "drop the path"),
                       (["--gate-lr", "0.1"], "--gate-lr is a setting of the clean residual")):
        assert main(["tune", "--bundle", str(plain), *_flags(corpus_dir, keystore), "--no-private-path", *extra]) == 2
        assert why in capsys.readouterr().err
    assert main(["tune", "--bundle", str(plain), *_flags(corpus_dir, keystore), "--no-private-path"]) == 0
    assert "private path:" not in capsys.readouterr().err
    saved = ckpt.load(plain / "tuning" / ckpt.CHECKPOINT_NAME)["config"]
    assert saved["private_path"] == PrivatePathConfig().to_dict() and saved["gate_lr"] is None
    assert "private_path" not in Manifest.read(plain).privacy
    assert "private_path" not in mode_of_manifest(Manifest.read(plain)).key  # plain STuning's mode
