"""DESIGN invariant 3, over everything the SecureGate tests did. After each test file the
conftest's leak scan (needles.LeakScan) walks every file the process's tests and the commands
they ran (in this process, in the op server's children, killed or not) wrote under their tmp
dirs, and looks for every access key's secret (raw, hex, base64url), text form and HMAC seed
(key_seed), the HKDF-derived AES key of every sealed adapter (the salt from its header), the
permutation keys, and every revealing adapter in plaintext (adapter_bytes, the decrypted
ciphertexts, their tensor data, windows of every tensor in fp32/fp16/bf16). Keys come from the
tests' registrations and from every keyring service the tests used (read straight from the
Secret Service).

Here: a whole lifecycle (add, create, rotate, export/import, unlock and complete, revoke, drop)
checked by that scan, so it means something when run alone; the scanner finds every kind of
needle at any offset; and the per-file scan itself reports a planted leak in a new file, in a
file changed since its last check and, for a needle registered later, in a file it had already
checked."""

from __future__ import annotations

import asyncio
import base64
import os

from keys.access_keys import generate
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.privacy.manifest import Manifest
from umbra.securegate.bundle_access import (add_revealing_adapter, create_key, export_key, import_key, revoke_key,
                                            rotate_key)
from umbra.securegate.gate import GateConfig

from .helpers import SMALL_GATE, keyring_snapshot, make_adapter
from .needles import LeakScan, Needles, scan

GATE = GateConfig(**SMALL_GATE)


def _lifecycle(base, root, stores, needles):
    admin, user = stores(), stores()
    d = root / "bundle"
    init_bundle(base, BundleConfig(epsilon=13.0), d, store=admin)
    add_adapter(d, make_adapter(d, "secure", BottleneckConfig(size=8), seed=60), role="secure")
    team = make_adapter(d, "team", LoraConfig(rank=4), seed=61, std=0.5)
    needles.adapter(team, bundle_dir=d)
    keys = [needles.key(add_revealing_adapter(d, team, "t1", admin, gate_config=GATE)),
            needles.key(create_key(d, "t2", "team", admin, gate_config=GATE))]
    needles.sealed_in(d)  # ciphertexts later deleted by the rotation: their AES keys too
    keys.append(needles.key(rotate_key(d, "t1", admin, gate_config=GATE)))
    needles.sealed_in(d)
    assert export_key(d, "t1", admin).text() == keys[-1].text()
    bundle_id = Manifest.read(d).bundle_id
    for name in admin.list(prefix=f"bundle/{bundle_id}/"):
        user.set(name, admin.get(name))
    import_key(d, keys[-1].text(), user)
    model = ClientModel.from_bundle(d, base, store=user)
    engine = CompletionEngine.monolithic(model, EngineConfig(stop=StopConfig(max_tokens=6)))
    result = asyncio.run(engine.complete("def add(a, b):\n    return ", "\n", language="python"))
    assert result.access == "revealing: team"
    revoke_key(d, "t2", admin, gate_config=GATE)
    revoke_key(d, "t1", admin, drop_adapter=True, gate_config=GATE)
    assert model.unlock() is None
    return len(keys), admin, user


def test_no_secret_and_no_plaintext_adapter_in_any_file_the_tests_wrote(sg_base, sg_tmp, stores, needles, leak_scan,
                                                                        tmp_path):
    made, admin, user = _lifecycle(sg_base, sg_tmp("sg-scan"), stores, needles)
    assert made == 3
    # the scan's keyring sweep (one GetSecrets call) reads what secretstorage reads item by item
    swept = Needles()
    swept.services |= {admin.service, user.service}
    assert leak_scan.keyring(swept) >= 2
    for store in (admin, user):
        for name, value in keyring_snapshot(store).items():
            kind, bundle_id, key_id = (name.split("/", 2) + ["", ""])[:3]
            if kind == "access":
                assert bytes(swept.keys[(bundle_id, key_id)].secret) == base64.b64decode(value), name
            elif kind == "bundle":
                assert swept.needles[f"permutation key {bundle_id}/{key_id}"] == base64.b64decode(value), name
    files, hits = leak_scan.check()  # what the conftest runs after this file, now (it runs again)
    assert hits == []
    kinds = {label.split(" ")[0] for label in needles.needles}
    assert {"key", "aes", "plaintext", "adapter", "permutation"} <= kinds, kinds
    assert len(files) >= 10 and len(needles.keys) >= 3

    # the positive control: the scanner finds each kind of needle planted at any offset
    planted = tmp_path / "planted.bin"
    some = {kind: next(v for k, v in needles.needles.items() if k.startswith(kind)) for kind in kinds}
    for offset in range(9):
        for kind, needle in some.items():
            planted.write_bytes(b"\x00" * offset + needle[:-1] + needle + b"\xff" * 3)
            hits = scan([planted], needles.needles)
            assert hits and all(f == str(planted) for f, _ in hits), (kind, offset)
    planted.unlink()


def test_the_scan_after_each_file_reports_a_planted_leak(needles, leak_scan, tmp_path):
    """LeakScan's rules on a scan of its own (no keyring service: nothing to sweep): a key's text
    planted in a new file is reported; an unchanged file it already checked is checked again for
    a needle registered after (and only then reported); a file changed since its last check is
    checked whole again. Then the conftest's own scan object (the one that runs after every test
    file) reports a key planted in a test's tmp_path, and is clean once it is gone (so this
    file's own scan passes)."""
    own = LeakScan(Needles())
    n = own.needles
    root = n.root(tmp_path / "own")
    root.mkdir()
    noise = root / "noise.bin"
    noise.write_bytes(os.urandom(4096))
    assert own.check()[1] == []

    first = n.key(generate("planted-bundle-1"))
    new_file = root / "new.txt"
    new_file.write_bytes(b"config: " + first.text().encode() + b"\n")
    hits = own.check()[1]
    assert (str(new_file), f"key {first.key_id} text") in hits and {f for f, _ in hits} == {str(new_file)}

    late = generate("planted-bundle-2")  # in a file before it is a needle: not reported yet
    early_file = root / "early.bin"
    early_file.write_bytes(os.urandom(100) + bytes(late.secret) + os.urandom(100))
    new_file.unlink()
    assert own.check()[1] == []
    n.key(late)  # registered after the file was checked, the file unchanged since
    assert own.check()[1] == [(str(early_file), f"key {late.key_id} secret")]

    early_file.unlink()
    third = n.key(generate("planted-bundle-3"))
    assert own.check()[1] == []
    data = noise.read_bytes()
    noise.write_bytes(data[:1000] + third.secret.hex().encode() + data[1000:])  # a checked file changed
    assert own.check()[1] == [(str(noise), f"key {third.key_id} secret hex")]

    assert tmp_path in needles.roots  # every test's tmp_path is scanned (conftest)
    planted = tmp_path / "planted.txt"
    key = needles.key(generate("planted-bundle-4"))
    planted.write_bytes(b"token=" + key.text().encode())
    hits = leak_scan.check()[1]
    assert (str(planted), f"key {key.key_id} text") in hits and {f for f, _ in hits} == {str(planted)}
    planted.unlink()
