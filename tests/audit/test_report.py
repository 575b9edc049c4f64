"""`umbra audit` end to end: auditing turned on, `umbra complete` through a self-started cloud
records its traffic (encrypted), and `umbra audit` attacks the recording and writes a
self-contained HTML report — plots embedded, the truth next to each attack's reconstruction,
ε and defences in force, mode 0600. The plain path and a bundle, through the CLI's entry point;
`umbra audit` (the report) runs once as the console program in a subprocess. The recorded
completion of the plain path starts its own cloud; the others complete through the module's
real cloud (in a thread of this process), which the recorder, on the client's side, cannot tell
apart."""

from __future__ import annotations

import html
import re
import stat
import subprocess

import pytest

from server.launch import local_cloud_thread
from tests.audit.audit_world import make_world, umbra_cli
from umbra.attacks.probe import ProbeConfig
from umbra.audit.analysis import AuditConfig, run_audit
from umbra.audit.report import write_report
from umbra.audit.store import AuditStore
from umbra.privacy.bundle import BundleConfig, init_bundle



@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("audit-world"))


@pytest.fixture(scope="module")
def cloud(world):
    """`--cloud URL --token T` of one real cloud serving the world's model, for the completions
    whose cloud is not what they check (each self-started one is a process of its own)."""
    with local_cloud_thread(world / "model", settings={"torch_threads": 1}) as running:
        yield ["--cloud", running.base_url, "--token", running.token]


def _umbra(*args, env=None, in_process=True) -> subprocess.CompletedProcess:
    return umbra_cli(*args, env=env, timeout=600, in_process=in_process)


def _complete(world, *extra, env=None):
    r = _umbra("complete", f"{world / 'src.py'}:6:16", "--model", world / "model", "--max-tokens", "4",
               "--threads", "1", *extra, env=env)
    assert r.returncode == 0, r.stderr
    return r


def _check_report(path, truth_snippet: str) -> str:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = path.read_text()
    assert doc.count("src='data:image/png;base64,") >= 1
    assert not re.search(r"""(src|href)=['"]?(https?:|//)""", doc)  # self-contained
    for title in ("(a) nearest-neighbour", "(b) learned inversion probe", "(c) frequency analysis",
                  "(d) code reconstruction", "frequency-only baseline"):
        assert title in doc
    assert html.escape(truth_snippet) in doc
    return doc


def test_cli_records_only_when_on_and_reports(world, cloud, keystore, tmp_path):
    env = {"UMBRA_AUDIT_SERVICE": keystore.service}
    _complete(world, *cloud, env=env)
    status = _umbra("audit", "status", env=env)
    assert status.returncode == 0 and "auditing: off; 0 recording(s)" in status.stdout
    assert _umbra("audit", "on", env=env).returncode == 0
    _complete(world, env=env)  # through a cloud it starts itself
    _complete(world, *cloud, env={**env, "UMBRA_AUDIT": "0"})  # the environment switch wins
    status = _umbra("audit", "status", env=env)
    assert "auditing: on; 1 recording(s)" in status.stdout
    (rec_file,) = AuditStore(store=keystore).paths()
    assert b"load_settings" not in rec_file.read_bytes()
    out = tmp_path / "report.html"
    r = _umbra("audit", "--out", out, "--corpus", world / "corpus", "--public-blocks", "32", "--probe-epochs", "2",
               "--threads", "1", env=env, in_process=False)
    assert r.returncode == 0, r.stderr
    doc = _check_report(out, "def load_settings(path):")
    assert "Defences: none" in doc and "no INDVocab" in doc and "no split fine-tuning traffic recorded" in doc
    cleared = _umbra("audit", "clear", env=env)
    assert cleared.returncode == 0 and "removed 1 recording(s)" in cleared.stdout
    assert not [n for n in keystore.list() if n.startswith("audit/")]


def test_bundle_requests_report_epsilon_and_defences(world, cloud, keystore, tmp_path):
    bundle = tmp_path / "bundle"
    init_bundle(world / "model", BundleConfig(epsilon=13.0), bundle, store=keystore)
    env = {"UMBRA_AUDIT_SERVICE": keystore.service, "UMBRA_AUDIT": "1"}
    _complete(world, "--bundle", bundle, "--service", keystore.service, *cloud, env=env)
    _complete(world, "--bundle", bundle, "--service", keystore.service, *cloud, env=env)
    groups = run_audit(AuditStore(store=keystore), AuditConfig(corpus_dir=world / "corpus", public_blocks=32,
                                                               probe=ProbeConfig(epochs=2, hidden=64)))
    (group,) = groups
    assert group.facts["epsilon"] == 13.0 and len(group.requests) == 2
    assert set(group.suite.scores) >= {"baseline", "nearest", "probe", "probe_aware", "frequency", "reconstruction"}
    assert all("probe_aware" in r.scores for r in group.requests)  # the probe trained at the bundle's ε
    doc = _check_report(write_report(tmp_path / "r.html", groups, "umbra audit"), "def load_settings(path):")
    assert "Defences: INDVocab, LTokenizer" in doc and "ε in force: 13.0" in doc
    assert "(b′) noise-aware probe" in doc
