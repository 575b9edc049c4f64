"""`umbra securegate train` end to end on a tiny bundle (the console program in a subprocess, the
middle in-process): the organization's code is scrubbed, both adapters trained and fused, the
secure one stored in plaintext, the revealing one only sealed under the new access key printed
once, which then unlocks it."""

from __future__ import annotations

from cli_helpers import umbra_in_process, umbra_subprocess

from keys.access_keys import parse
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.manifest import Manifest

FILES = {
    f"svc/mod{i}.py": (f'"""Service {i}."""\nDB_HOST = "db-{i}.corp.acme.internal"\n'
                       f'API_KEY = "sk_live_{i}a8f3Kq9ZxLm2Vb7Rt4Np6Wc"\n\n\ndef handler_{i}(request):\n'
                       f'    # contact: ops{i}@acme.example\n    return {{"host": DB_HOST, "n": {i}}}\n')
    for i in range(24)
}


def test_train_scrubs_trains_fuses_and_seals(tmp_path, keystore, fim_llama_dir):
    base = fim_llama_dir  # the run's tiny llama, read-only
    bundle = tmp_path / "bundle"
    init_bundle(base, BundleConfig(epsilon=float("inf")), bundle, store=keystore)
    code = tmp_path / "code"
    for rel, text in FILES.items():
        (code / rel).parent.mkdir(parents=True, exist_ok=True)
        (code / rel).write_text(text)
    r = umbra_subprocess("securegate", "train", code, "--bundle", bundle, "--key-name", "platform", "--in-process",
                         "--epochs", "1", "--rank", "2", "--internal-domain", "acme.example", "--service",
                         keystore.service)
    assert r.returncode == 0, r.stderr
    key = parse(r.stdout)
    manifest = Manifest.read(bundle)
    assert manifest.adapters["secure"]["role"] == "secure" and manifest.adapters["secure"]["file"]
    assert manifest.adapters["revealing"]["role"] == "revealing" and manifest.adapters["revealing"]["file"] == ""
    report = manifest.adapters["secure"]["training"]["report"]
    assert report["scrub_findings"].get("secret", 0) >= 20 and report["query_files"] >= 1
    assert "sk_live_" not in (bundle / "manifest.json").read_text()
    status = umbra_in_process("keys", "access", "status", "--bundle", bundle, "--service", keystore.service)
    assert "you can unlock: revealing (key platform)" in status.stdout, status.stdout + status.stderr
    for path in [*tmp_path.rglob("*"), *base.rglob("*")]:
        if path.is_file():
            assert key.secret not in path.read_bytes() and key.text().encode() not in path.read_bytes(), path
