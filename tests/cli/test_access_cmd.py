"""`umbra keys access ...` end to end: the CLI's entry point with its own stdin, stdout and stderr
(in-process, tests/cli_helpers.py; one test runs the console program in a subprocess, stdin piped
for real), the real OS keyring (GNOME Keyring under a private D-Bus session), a tiny bundle. Keys
are printed once on stdout, read back only from stdin, never written to a file; every bad input is
one clear line on stderr with exit status ≠ 0 and the bundle exactly as before."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import pytest
from adapter_helpers import perturb
from cli_helpers import umbra_in_process, umbra_subprocess
from keys.access_keys import delete_key, entry_name, held_key_ids, parse
from securegate.helpers import SMALL_GATE
from umbra.engine import ClientModel
from umbra.model.adapters import LoraConfig, build_adapter
from umbra.model.adapters.files import save_adapter
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.privacy.manifest import Manifest
from umbra.securegate.gate import GateConfig, gate_from_bytes

umbra = umbra_in_process


def snapshot(d: Path) -> dict[str, str]:
    return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


def gate_config(bundle: Path) -> GateConfig:
    """The settings the bundle's access gate was trained with (recorded in the gate file)."""
    return gate_from_bytes((bundle / Manifest.read(bundle).access["gate"]["file"]).read_bytes(), "gate").config


@pytest.fixture
def setup(tmp_path, keystore, fim_llama_dir):
    """(bundle, plaintext revealing adapter, the commands' common options) over the run's tiny
    llama (read-only, built once). The commands that retrain the gate get `--gate-config` with the
    SecureGate tests' small settings (retraining with the defaults takes tens of seconds on a
    loaded machine); the console-program test below keeps the defaults, so one `create` per run
    trains the product's default gate through the CLI."""
    base = fim_llama_dir
    bundle = tmp_path / "bundle"
    init_bundle(base, BundleConfig(epsilon=float("inf")), bundle, store=keystore)
    model = ClientModel.from_bundle(bundle, base, store=keystore)
    shape = model.plan.shape(model.spec.num_layers)
    add_adapter(bundle, perturb(build_adapter("secure", LoraConfig(rank=2), model.spec, shape), seed=1), role="secure")
    team = perturb(build_adapter("team", LoraConfig(rank=2), model.spec, shape), seed=2)
    plain = tmp_path / "plain" / "team.safetensors"  # the trainer's own plaintext copy, outside the bundle
    plain.parent.mkdir()
    save_adapter(team, plain, model.spec, shape)
    small = tmp_path / "small-gate.json"
    small.write_text(json.dumps(SMALL_GATE))
    return bundle, plain, ["--bundle", str(bundle), "--service", keystore.service], ["--gate-config", str(small)]


def test_keys_are_created_listed_exported_imported_rotated_and_revoked(setup, keystore, tmp_path, fim_llama_dir):
    bundle, plain, b, g = setup
    created = umbra("keys", "access", "create", "team-a", "--adapter", "team", "--adapter-file", str(plain), *b, *g)
    assert created.returncode == 0, created.stderr
    key_a = parse(created.stdout)  # stdout is the key alone: one line
    assert created.stdout.count("\n") == 1 and "shown once" in created.stderr
    assert len(key_a.secret) * 8 >= 128
    assert asdict(gate_config(bundle)) == asdict(GateConfig(**SMALL_GATE))  # --gate-config trained it
    second = umbra("keys", "access", "create", "team-b", "--adapter", "team", *b, *g)  # a second key, same adapter
    assert second.returncode == 0, second.stderr
    key_b = parse(second.stdout)
    assert key_b.key_id != key_a.key_id and key_b.secret != key_a.secret
    manifest = Manifest.read(bundle)
    assert manifest.adapters["team"]["role"] == "revealing" and manifest.adapters["team"]["file"] == ""

    listed = umbra("keys", "access", "list", *b)
    assert listed.returncode == 0 and "team-a" in listed.stdout and "team-b" in listed.stdout
    assert key_a.text() not in listed.stdout and "yes" in listed.stdout

    status = umbra("keys", "access", "status", *b)
    assert status.returncode == 0, status.stderr
    assert "you can unlock: team (key team-a)" in status.stdout and "secure adapter (no key needed): secure" in status.stdout
    exported = umbra("keys", "access", "export", "team-a", *b)
    assert exported.returncode == 0 and exported.stdout.strip() == key_a.text()

    # a user who holds no key: status says so; importing the key (stdin) unlocks the adapter
    for key in (key_a, key_b):
        delete_key(keystore, key.bundle_id, key.key_id)
    assert "unlock: nothing" in umbra("keys", "access", "status", *b).stdout
    imported = umbra("keys", "access", "import", *b, stdin=key_a.text() + "\n")
    assert imported.returncode == 0, imported.stderr
    assert "team-a" in imported.stdout and key_a.text() not in imported.stdout + imported.stderr
    assert keystore.get(entry_name(key_a.bundle_id, key_a.key_id)) == key_a.secret
    assert "you can unlock: team (key team-a)" in umbra("keys", "access", "status", *b).stdout
    assert umbra("keys", "access", "import", *b, stdin=key_b.text()).returncode == 0

    rotated = umbra("keys", "access", "rotate", "team-a", *b, *g)
    assert rotated.returncode == 0, rotated.stderr
    new_a = parse(rotated.stdout)
    assert new_a.key_id != key_a.key_id and key_a.key_id not in held_key_ids(keystore, key_a.bundle_id)
    stale = umbra("keys", "access", "import", *b, stdin=key_a.text())  # the old key opens nothing now
    assert stale.returncode != 0 and "rotated or revoked" in stale.stderr
    assert "you can unlock: team (key team-a)" in umbra("keys", "access", "status", *b).stdout

    last = umbra("keys", "access", "revoke", "team-b", *b, *g)
    assert last.returncode == 0, last.stderr
    refused = umbra("keys", "access", "revoke", "team-a", *b, *g)
    assert refused.returncode != 0 and "--drop-adapter" in refused.stderr
    dropped = umbra("keys", "access", "revoke", "team-a", "--drop-adapter", *b, *g)
    assert dropped.returncode == 0 and "team" not in Manifest.read(bundle).adapters
    assert "revealing adapters: none" in umbra("keys", "access", "status", *b).stdout
    assert held_key_ids(keystore, key_a.bundle_id) == []

    keys_text = [k.text().encode() for k in (key_a, key_b, new_a)] + [k.secret for k in (key_a, key_b, new_a)]
    for path in [*tmp_path.rglob("*"), *fim_llama_dir.rglob("*")]:  # no key in any file the commands wrote
        if path.is_file():
            data = path.read_bytes()
            assert not any(k in data for k in keys_text), path


def test_bad_input_is_one_clear_error_and_leaves_the_bundle_as_it_was(setup, keystore, tmp_path, fim_llama_dir):
    bundle, plain, b, g = setup
    created = umbra("keys", "access", "create", "team-a", "--adapter", "team", "--adapter-file", str(plain), *b, *g)
    assert created.returncode == 0, created.stderr
    key = parse(created.stdout)
    before = snapshot(bundle)
    other = tmp_path / "other"
    bad_gate, low_gate = tmp_path / "bad-gate.json", tmp_path / "low-gate.json"
    bad_gate.write_text(json.dumps({**SMALL_GATE, "layers": 3}))
    low_gate.write_text(json.dumps({**SMALL_GATE, "threshold": 0.2}))
    init_bundle(fim_llama_dir, BundleConfig(epsilon=float("inf")), other, store=keystore)
    cases = {
        "unknown key": (["keys", "access", "rotate", "nobody", *b], None, "no access key named 'nobody'"),
        "unknown adapter": (["keys", "access", "create", "k2", "--adapter", "ghost", *b], None,
                            "no revealing adapter named 'ghost'"),
        "bad key name": (["keys", "access", "create", "../x", "--adapter", "team", *b], None, "not a valid access key name"),
        "duplicate key": (["keys", "access", "create", "team-a", "--adapter", "team", *b], None, "already has an access key"),
        "export unknown": (["keys", "access", "export", "nobody", *b], None, "no access key named"),
        "garbage import": (["keys", "access", "import", *b], "not-a-key", "not an Umbra access key"),
        "empty import": (["keys", "access", "import", *b], "", "empty"),
        "other bundle's key": (["keys", "access", "import", "--bundle", str(other), "--service", keystore.service],
                               key.text(), "belongs to another bundle"),
        "not a bundle": (["keys", "access", "list", "--bundle", str(tmp_path / "nothing"), "--service", keystore.service],
                         None, "not a client bundle"),
        "unknown gate setting": (["keys", "access", "rotate", "team-a", *b, "--gate-config", str(bad_gate)], None,
                                 "malformed gate config"),
        "bad gate setting": (["keys", "access", "revoke", "team-a", *b, "--gate-config", str(low_gate)], None,
                             "gate threshold must be in [0.5, 1)"),
        "gate config not JSON": (["keys", "access", "create", "k2", "--adapter", "team", *b, "--gate-config",
                                  str(plain)], None, "cannot read the gate config"),
        "no gate config file": (["keys", "access", "rotate", "team-a", *b, "--gate-config", str(tmp_path / "none")],
                                None, "cannot read the gate config"),
    }
    for what, (args, stdin, message) in cases.items():
        r = umbra(*args, stdin=stdin)
        assert r.returncode != 0 and message in r.stderr, (what, r.stderr)
        assert "Traceback" not in r.stderr and key.text() not in r.stderr + r.stdout, what
        assert snapshot(bundle) == before, what

    sealed = next((bundle / "access").glob("team-a.*.sealed"))
    good = sealed.read_bytes()
    for damage in (good[:-7], good[:20] + bytes([good[20] ^ 1]) + good[21:]):  # truncated, flipped
        sealed.write_bytes(damage)
        damaged = snapshot(bundle)
        r = umbra("keys", "access", "rotate", "team-a", *b, *g)
        assert r.returncode != 0 and "corrupted" in r.stderr and "Traceback" not in r.stderr
        assert snapshot(bundle) == damaged
        assert "unlock: nothing" in umbra("keys", "access", "status", *b).stdout  # the secure adapter serves
    sealed.write_bytes(good)
    assert "you can unlock: team (key team-a)" in umbra("keys", "access", "status", *b).stdout  # works again
    delete_key(keystore, key.bundle_id, key.key_id)  # a key this keyring does not hold
    r = umbra("keys", "access", "rotate", "team-a", *b, *g)
    assert r.returncode != 0 and "needs its current secret in this keyring" in r.stderr
    assert snapshot(bundle) == before


def test_the_console_program_prints_the_key_alone_and_reads_it_from_a_pipe(setup, keystore):
    """The real `umbra` process: stdout is the key alone (so `... | tool` captures it), and `import`
    reads the key from a real pipe on stdin; a bad key is exit status 2 and one line on stderr, no
    traceback. (The key is created in-process: creating one retrains the gate, which the tests
    above run five times; the console program adds nothing to that. It is created without
    --gate-config: the one access gate per run trained through the CLI with the defaults.)"""
    bundle, plain, b, _ = setup
    created = umbra_in_process("keys", "access", "create", "team-a", "--adapter", "team", "--adapter-file", str(plain), *b)
    assert created.returncode == 0, created.stderr
    assert asdict(gate_config(bundle)) == asdict(GateConfig())
    key = parse(created.stdout)
    exported = umbra_subprocess("keys", "access", "export", "team-a", *b, timeout=300)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == key.text() + "\n"
    delete_key(keystore, key.bundle_id, key.key_id)
    imported = umbra_subprocess("keys", "access", "import", *b, stdin=key.text() + "\n", timeout=300)
    assert imported.returncode == 0, imported.stderr
    assert "team-a" in imported.stdout and key.text() not in imported.stdout + imported.stderr
    assert keystore.get(entry_name(key.bundle_id, key.key_id)) == key.secret
    bad = umbra_subprocess("keys", "access", "import", *b, stdin="not-a-key", timeout=300)
    assert bad.returncode == 2 and "not an Umbra access key" in bad.stderr and bad.stderr.count("\n") == 1
    assert "Traceback" not in bad.stderr
