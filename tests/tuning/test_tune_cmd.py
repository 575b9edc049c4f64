"""`umbra tune --bundle DIR`: through a self-started cloud, a given cloud and in-process, the
same tuned weights are written back into the bundle; stop and --resume; usage errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from server.launch import local_cloud_thread
from umbra.cli.main import main
from umbra.engine import ClientModel
from umbra.paths import repo_root
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.manifest import Manifest
from umbra.tuning import checkpoint as ckpt
from umbra.tuning.gradient_noise import DEFAULT_SIGMA, default_sigma


@pytest.fixture
def bundles(base_dir, tmp_path, keystore):
    """Three copies of one bundle (same table, same π, same keyring entry)."""
    first = tmp_path / "b1"
    init_bundle(base_dir, BundleConfig(epsilon=32.0), first, store=keystore)
    copies = [first]
    for name in ("b2", "b3"):
        shutil.copytree(first, tmp_path / name)
        copies.append(tmp_path / name)
    return copies


def _flags(corpus_dir, keystore) -> list[str]:
    """Exact gradients (--gradient-noise 0) and the CPU (--device cpu: a self-started cloud computes
    there) so that runs can be compared bit for bit; the default σ draws its noise from the OS CSPRNG."""
    return ["--steps", "3", "--batch-size", "2", "--context-length", "32", "--warmup-steps", "1", "--seed", "5",
            "--corpus-dir", str(corpus_dir), "--service", keystore.service, "--threads", "1", "--device", "cpu",
            "--gradient-noise", "0"]


def _client_tensors(bundle):
    return load_file(bundle / Manifest.read(bundle).weights["client"])  # the file the manifest names


def test_tune_cli_three_ways_same_weights(bundles, base_dir, corpus_dir, keystore, capsys):
    b1, b2, b3 = bundles
    before = _client_tensors(b1)
    env = {k: v for k, v in os.environ.items() if k not in ("UMBRA_CLOUD_URL", "UMBRA_CLOUD_TOKEN")}
    r = subprocess.run([sys.executable, "-m", "umbra.cli.main", "tune", "--bundle", str(b1),
                        *_flags(corpus_dir, keystore)], capture_output=True, text=True, env=env, timeout=600,
                       cwd=repo_root())
    assert r.returncode == 0, r.stderr
    assert "finished; tuned weights written to the bundle" in r.stdout and "step 3/3" in r.stderr

    assert main(["tune", "--bundle", str(b2), "--in-process", *_flags(corpus_dir, keystore), "--stop-at-step", "2"]) == 0
    assert "stopped" in capsys.readouterr().out
    assert all((_client_tensors(b2)[k] == v).all() for k, v in before.items())  # nothing written back yet
    assert main(["tune", "--bundle", str(b2), "--in-process", *_flags(corpus_dir, keystore), "--resume"]) == 0
    assert "3/3 steps" in capsys.readouterr().out

    with local_cloud_thread(base_dir, settings={"torch_threads": 1}) as cloud:
        assert main(["tune", "--bundle", str(b3), "--cloud", cloud.base_url, "--token", cloud.token,
                     *_flags(corpus_dir, keystore)]) == 0

    tuned = [_client_tensors(b) for b in (b1, b2, b3)]
    assert any(not (tuned[0][k] == before[k]).all() for k in before)
    for other in tuned[1:]:
        for k, v in tuned[0].items():
            assert (other[k] == v).all(), k  # bit-identical three ways
    model = ClientModel.from_bundle(b1, store=keystore)  # the written-back bundle still verifies
    assert model.bundle.manifest.updated is not None


def test_tune_cli_usage_errors(bundles, corpus_dir, keystore, capsys):
    b1 = bundles[0]
    flags = _flags(corpus_dir, keystore)
    assert main(["tune", "--bundle", str(b1), "--in-process", "--cloud", "http://x", *flags]) == 2
    assert "--in-process runs without a cloud" in capsys.readouterr().err
    assert main(["tune", "--bundle", str(b1), "--in-process", *flags, "--resume"]) == 2
    assert "no tuning checkpoint" in capsys.readouterr().err
    assert main(["tune", "--bundle", str(b1), "--in-process", *flags, "--context-length", "1"]) == 2
    assert "context_length must be >= 2" in capsys.readouterr().err
    assert main(["tune", "--bundle", str(b1), *flags, "--gradient-noise", "-1"]) == 2
    assert "noise_multiplier" in capsys.readouterr().err
    for device, why in (("tpu", "device 'tpu'"), ("cuda:99", "CUDA")):  # no machine here has either
        assert main(["tune", "--bundle", str(b1), "--in-process", *flags, "--device", device]) == 2
        assert why in capsys.readouterr().err
    assert not (b1 / "tuning").exists()  # refused before anything ran


def test_tune_cli_with_gradient_noise_through_a_cloud(bundles, base_dir, corpus_dir, keystore, capsys, monkeypatch):
    """--gradient-noise through a running cloud whose token is in the keyring (as `umbra keys
    cloud-token set URL` stores it): the run states its per-message ε, finishes, and its settings
    are recorded with the checkpoint (a resume keeps them)."""
    import torch

    from keys.cloud_tokens import cloud_token_name
    from umbra.tuning import checkpoint as ckpt

    b1 = bundles[0]
    before = _client_tensors(b1)
    monkeypatch.delenv("UMBRA_CLOUD_TOKEN", raising=False)
    with local_cloud_thread(base_dir, settings={"torch_threads": 1}) as cloud:
        assert main(["tune", "--bundle", str(b1), "--cloud", cloud.base_url, *_flags(corpus_dir, keystore)]) == 2
        assert "no keyring entry" in capsys.readouterr().err  # and no UMBRA_CLOUD_TOKEN either
        keystore.set(cloud_token_name(cloud.base_url), cloud.token.encode())
        assert main(["tune", "--bundle", str(b1), "--cloud", cloud.base_url,
                     *_flags(corpus_dir, keystore), "--gradient-noise", "0.5", "--gradient-clip", "0.01"]) == 0
    out, err = capsys.readouterr()
    assert "finished; tuned weights written to the bundle" in out
    assert "noise σ = 0.5" in err and "-DP about its sequence" in err
    saved = ckpt.load(b1 / "tuning" / ckpt.CHECKPOINT_NAME)["config"]["gradient_noise"]
    assert saved == {"noise_multiplier": 0.5, "clip_norm": 0.01}
    assert any(not torch.equal(_client_tensors(b1)[k], v) for k, v in before.items())


def test_tune_cli_with_the_inversion_penalty(bundles, corpus_dir, keystore, capsys):
    """--inversion-penalty builds the codebook from the bundle's base model and our own blocks,
    tunes, and records the setting with the checkpoint."""
    from umbra.tuning import checkpoint as ckpt

    b1 = bundles[0]
    assert main(["tune", "--bundle", str(b1), "--in-process", *_flags(corpus_dir, keystore),
                 "--inversion-penalty", "5", "--penalty-temperature", "0.1"]) == 0
    assert "finished; tuned weights written to the bundle" in capsys.readouterr().out
    saved = ckpt.load(b1 / "tuning" / ckpt.CHECKPOINT_NAME)["config"]["inversion_penalty"]
    assert saved == {"weight": 5.0, "temperature": 0.1, "codebook_blocks": 128}
    assert main(["tune", "--bundle", str(bundles[1]), "--in-process", *_flags(corpus_dir, keystore),
                 "--inversion-penalty", "-1"]) == 2
    assert "inversion penalty weight" in capsys.readouterr().err


def test_default_gradient_noise_follows_the_bundles_epsilon(bundles, base_dir, corpus_dir, keystore, tmp_path,
                                                           capsys):
    """Without --gradient-noise, a bundle with INDVocab noise tunes with σ = DEFAULT_SIGMA, in-process
    too (the measured default of docs/privacy/utility.md); a bundle at ε = ∞ with exact gradients."""
    flags = _flags(corpus_dir, keystore)[:-2]  # without "--gradient-noise 0"
    assert main(["tune", "--bundle", str(bundles[0]), "--in-process", *flags]) == 0
    saved = ckpt.load(bundles[0] / "tuning" / ckpt.CHECKPOINT_NAME)["config"]["gradient_noise"]
    assert saved["noise_multiplier"] == DEFAULT_SIGMA == default_sigma(13.0) > 0
    assert "sent gradient" not in capsys.readouterr().err  # in-process: nothing is sent, no per-message ε
    clean = tmp_path / "clean"
    init_bundle(base_dir, BundleConfig(epsilon=float("inf")), clean, store=keystore)
    assert main(["tune", "--bundle", str(clean), "--in-process", *flags, "--steps", "1"]) == 0
    assert ckpt.load(clean / "tuning" / ckpt.CHECKPOINT_NAME)["config"]["gradient_noise"]["noise_multiplier"] == 0
    assert default_sigma(float("inf")) == 0.0


def test_tune_records_its_stuning_in_the_manifest_and_the_mode_follows(bundles, corpus_dir, keystore, capsys):
    """The finished run writes `privacy.stuning` (trajectory + cloud_lora), which names the bundle's
    privacy mode; weights rewritten without a STuning record (NOESIS --family full) drop it."""
    from umbra.privacy.bundle import load_bundle, save_client_weights
    from umbra.privacy.mode import NOESIS_SUFFIX, config_key, mode_of_manifest

    b1 = bundles[0]
    assert "stuning" not in Manifest.read(b1).privacy
    assert main(["tune", "--bundle", str(b1), "--in-process", *_flags(corpus_dir, keystore)]) == 0
    capsys.readouterr()
    manifest = Manifest.read(b1)
    record = manifest.privacy["stuning"]
    assert record["steps"] == 3 and record["cloud_lora"] is False and record["train_embedding"] is False
    assert record["gradient_noise"]["noise_multiplier"] == 0.0 and record["inversion_penalty"]["weight"] == 0.0
    mode = mode_of_manifest(manifest)
    other = " · base model other than the measured umbra-code-tiny, umbra-code-deep"  # a tiny model: no figures lent
    assert record["private_path"]["residual"] == "clean"  # `umbra tune`'s default path
    label = "NOIR ε=32 · STuned 3 steps, private path"
    assert mode.key == config_key(32.0, record) and mode.label == label + other
    assert mode.measured is None and mode.summary == label + other + " · not measured"

    save_client_weights(load_bundle(b1, store=keystore), dp={"epsilon": 1.0, "delta": 1e-6})  # NOESIS's path
    rewritten = Manifest.read(b1)
    assert "stuning" not in rewritten.privacy
    assert mode_of_manifest(rewritten).key == "eps=32" + NOESIS_SUFFIX and not mode_of_manifest(rewritten).defended


def test_tune_through_a_cloud_not_on_this_machine_needs_a_defended_configuration(bundles, corpus_dir, keystore,
                                                                                capsys, monkeypatch):
    """Exact gradients at ε = 32 are measured by nothing: refused before the token is looked up."""
    monkeypatch.delenv("UMBRA_ALLOW_UNDEFENDED_REMOTE_CLOUD", raising=False)
    assert main(["tune", "--bundle", str(bundles[0]), "--cloud", "http://192.0.2.1:9", "--token", "t",
                 *_flags(corpus_dir, keystore)]) == 2
    err = capsys.readouterr().err
    assert "not on this machine" in err and "NOIR ε=32 · STuned 3 steps" in err and "--allow-undefended" in err
    assert "stuning" not in Manifest.read(bundles[0]).privacy


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA accelerator")
def test_tune_cli_on_cuda_writes_what_the_cpu_writes(bundles, corpus_dir, keystore):
    """--device cuda: the client's blocks and the in-process middle train on the accelerator; the
    bundle gets CPU weights that agree with a CPU run's to float tolerance."""
    b1, b2, _ = bundles
    flags = [f for f in _flags(corpus_dir, keystore) if f not in ("--device", "cpu")]
    assert main(["tune", "--bundle", str(b1), "--in-process", *flags, "--device", "cpu"]) == 0
    assert main(["tune", "--bundle", str(b2), "--in-process", *flags, "--device", "cuda"]) == 0
    cpu, gpu = _client_tensors(b1), _client_tensors(b2)
    for k, v in cpu.items():
        torch.testing.assert_close(gpu[k], v, rtol=1e-3, atol=1e-4)
