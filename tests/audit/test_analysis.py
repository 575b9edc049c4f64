"""`umbra audit` runs the adaptive attacker on the user's own recorded traffic
(umbra/audit/analysis.py with umbra/attack_grid/shadow_audit.py, through the real CLI): a bundle
whose manifest holds a STuning record completes through a self-started cloud with auditing on;
`umbra audit` then builds a shadow client of that configuration (its own table and π, tuned with
the bundle's steps), runs the decipherment attack and — given the bundle — the oracle probe, and
the report shows their figures, the per-layer table and how each ran. Without the bundle the
oracle says what it needs; `--no-adaptive` leaves the shadow out but keeps decipherment. (The
default-path test's completion starts its own cloud; the other two complete through the module's
real cloud, in a thread of this process: the recorder, on the client's side, is the same.)"""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from server.launch import local_cloud_thread
from umbra.attack_grid.shadow import ShadowConfig
from umbra.attack_grid.shadow_audit import AdaptiveAudit, audit_adaptive
from tests.audit.audit_world import make_world, umbra_cli
from umbra.attacks.probe import ProbeConfig
from umbra.audit.analysis import AuditConfig, run_audit
from umbra.audit.store import AuditStore
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle, save_client_weights
from umbra.privacy.mode import stuning_record
from umbra.tuning import TuneConfig

TUNE = TuneConfig(steps=2, batch_size=2, context_length=32, lr=1e-3, warmup_steps=0, checkpoint_every=2)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("audit-adaptive"))


@pytest.fixture(scope="module")
def cloud(world):
    """`--cloud URL --token T` of one real cloud serving the world's model."""
    with local_cloud_thread(world / "model", settings={"torch_threads": 1}) as running:
        yield ["--cloud", running.base_url, "--token", running.token]


def _umbra(*args, env=None) -> subprocess.CompletedProcess:
    return umbra_cli(*args, env=env, timeout=900)


def _tuned_bundle(world, keystore, tmp_path):
    bundle_dir = tmp_path / "bundle"
    init_bundle(world / "model", BundleConfig(epsilon=13.0), bundle_dir, store=keystore)
    bundle = load_bundle(bundle_dir, store=keystore)
    save_client_weights(bundle, stuning=stuning_record(TUNE, cloud_lora=False))  # the record `umbra tune` writes
    return bundle_dir


def test_audit_reports_shadow_decipherment_and_oracle(world, cloud, keystore, tmp_path):
    bundle = _tuned_bundle(world, keystore, tmp_path)
    env = {"UMBRA_AUDIT_SERVICE": keystore.service, "UMBRA_AUDIT": "1"}
    r = _umbra("complete", f"{world / 'src.py'}:6:16", "--model", world / "model", "--max-tokens", "4",
               "--threads", "1", "--bundle", bundle, "--service", keystore.service, *cloud, env=env)
    assert r.returncode == 0, r.stderr
    (record,) = AuditStore(store=keystore).records()
    assert record.meta["stuning"]["steps"] == TUNE.steps  # the recorder keeps the manifest's STuning record
    out = tmp_path / "report.html"
    r = _umbra("audit", "--out", out, "--corpus", world / "corpus", "--public-blocks", "32", "--probe-epochs", "2",
               "--threads", "1", "--bundle", bundle, "--service", keystore.service, env=env)
    assert r.returncode == 0, r.stderr
    doc = out.read_text()
    for title in ("(f) shadow client", "(f′) shadow client", "(g) oracle probe", "(h) decipherment"):
        assert title in doc
    assert f"tuned like yours ({TUNE.steps} STuning steps" in doc
    assert "Token recovery % per layer" in doc and "layer1:" in doc
    assert "needs your bundle" not in doc and "did not apply" not in doc.split("Requests")[0].split("(f)")[1]


def test_without_the_bundle_the_oracle_says_what_it_needs(world, cloud, keystore, tmp_path):
    bundle = _tuned_bundle(world, keystore, tmp_path)
    env = {"UMBRA_AUDIT_SERVICE": keystore.service, "UMBRA_AUDIT": "1"}
    r = _umbra("complete", f"{world / 'src.py'}:6:16", "--model", world / "model", "--max-tokens", "4",
               "--threads", "1", "--bundle", bundle, "--service", keystore.service, *cloud, env=env)
    assert r.returncode == 0, r.stderr
    store = AuditStore(store=keystore)
    config = AuditConfig(corpus_dir=world / "corpus", public_blocks=32, probe=ProbeConfig(epochs=2, hidden=64))
    settings = AdaptiveAudit(world / "corpus", tmp_path / "cache", public_blocks=32,
                             shadow=ShadowConfig(probe=ProbeConfig(epochs=2, hidden=64), layers=False))
    (group,) = run_audit(store, config, adaptive=audit_adaptive(settings))
    assert {"shadow", "decipher"} <= set(group.suite.scores) and "oracle" not in group.suite.scores
    assert "needs your bundle" in group.notes["oracle"]
    assert f"{TUNE.steps} STuning steps" in group.notes["shadow"]
    (plain,) = run_audit(store, config)  # no adaptive attacker: decipherment still runs
    assert "decipher" in plain.suite.scores and "shadow" not in plain.suite.scores
    # fitted on a part of the traffic (here one sequence), the decipherment still reads every position
    (part,) = run_audit(store, replace(config, decipher_fit_positions=1))
    assert part.suite.scores["decipher"].tokens_scored == plain.suite.scores["decipher"].tokens_scored > 0


def test_audit_of_a_bundle_tuned_with_the_default_private_path(world, keystore, tmp_path):
    """The product's default: `umbra tune` with no path flag gives the clean residual with keyed
    noise; completion through a self-started cloud records what it sent, and `umbra audit --bundle`
    tunes its shadow with the same path (its own secret) and runs the oracle through the bundle's."""
    bundle = tmp_path / "bundle"
    init_bundle(world / "model", BundleConfig(epsilon=13.0), bundle, store=keystore)
    r = _umbra("tune", "--bundle", bundle, "--in-process", "--steps", "2", "--batch-size", "2", "--context-length",
               "32", "--warmup-steps", "0", "--corpus-dir", world / "corpus", "--service", keystore.service,
               "--threads", "1")
    assert r.returncode == 0, r.stderr
    env = {"UMBRA_AUDIT_SERVICE": keystore.service, "UMBRA_AUDIT": "1"}
    r = _umbra("complete", f"{world / 'src.py'}:6:16", "--max-tokens", "4", "--threads", "1", "--bundle", bundle,
               "--service", keystore.service, env=env)
    assert r.returncode == 0, r.stderr
    (record,) = AuditStore(store=keystore).records()
    assert record.meta["stuning"]["private_path"]["residual"] == "clean"
    out = tmp_path / "report.html"
    r = _umbra("audit", "--out", out, "--corpus", world / "corpus", "--public-blocks", "32", "--probe-epochs", "2",
               "--threads", "1", "--bundle", bundle, "--service", keystore.service, env=env)
    assert r.returncode == 0, r.stderr
    doc = out.read_text()
    for title in ("(f) shadow client", "(g) oracle probe", "(h) decipherment"):
        assert title in doc
    assert "tuned like yours (2 STuning steps" in doc
    assert "needs your bundle" not in doc and "not run" not in doc.split("Requests")[0].split("(f)")[1]
