"""DESIGN invariant 3, over everything the SecureGate tests did: after every other test of the
session (conftest.py moves this one last), walk every file the tests and the commands they ran
(in this process, in the op server's children, killed or not) wrote under their tmp dirs, and
look for every access key's secret (raw, hex, base64url), text form and HMAC seed (key_seed), the
HKDF-derived AES key of every sealed adapter (the salt from its header), the permutation keys,
and every revealing adapter in plaintext (adapter_bytes, the decrypted ciphertexts, their tensor
data, windows of every tensor in fp32/fp16/bf16). Keys come from the tests' registrations and
from every keyring service the tests used (read straight from the Secret Service).

It first runs a whole lifecycle itself (add, create, rotate, export/import, unlock and complete,
revoke, drop), so it means something when run alone."""

from __future__ import annotations

import asyncio
import base64
import binascii

from keys.access_keys import AccessKey
from umbra.engine import ClientModel, CompletionEngine, EngineConfig, StopConfig
from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.privacy.manifest import Manifest
from umbra.securegate import sealing
from umbra.securegate.bundle_access import (add_revealing_adapter, create_key, export_key, import_key, revoke_key,
                                            rotate_key)
from umbra.securegate.gate import GateConfig

from .helpers import SMALL_GATE, make_adapter, secret_collection
from .needles import files_under, scan

GATE = GateConfig(**SMALL_GATE)


def _lifecycle(base, root, stores, needles) -> int:
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
    return len(keys)


def _all_keyring_keys(needles, services) -> int:
    """Every access and permutation key the tests' keyring services hold now, read from the
    Secret Service."""
    found = 0
    conn, collection = secret_collection()
    try:
        for item in (i for service in services for i in collection.search_items({"service": service})):
            name = item.get_attributes().get("username", "")
            if name.startswith(("access/", "bundle/")):
                try:
                    secret = base64.b64decode(item.get_secret(), validate=True)
                except binascii.Error:  # an entry a test wrote behind Umbra's back
                    continue
                kind, bundle_id, key_id = name.split("/", 2)
                if kind == "access":
                    needles.key(AccessKey(bundle_id, key_id, secret))
                elif len(secret) >= 16:
                    needles.needles[f"permutation key {bundle_id}/{key_id}"] = secret
                found += 1
    finally:
        conn.close()
    return found


def test_no_secret_and_no_plaintext_adapter_in_any_file_the_tests_wrote(sg_base, sg_tmp, stores, needles, tmp_path):
    made = _lifecycle(sg_base, sg_tmp("sg-scan"), stores, needles)
    assert made == 3
    assert _all_keyring_keys(needles, stores.services) >= 2
    files = files_under(needles.roots)
    for path in files:  # every ciphertext still on disk: its AES key and plaintext are needles too
        data = path.read_bytes()
        if data.startswith(sealing.MAGIC):
            needles.sealed_blob(data)
    kinds = {label.split(" ")[0] for label in needles.needles}
    assert {"key", "aes", "plaintext", "adapter"} <= kinds, kinds
    assert len(files) >= 10 and len(needles.keys) >= 3
    assert scan(files, needles.needles) == []

    # the positive control: the scanner finds each kind of needle planted at any offset
    planted = tmp_path / "planted.bin"
    some = {kind: next(v for k, v in needles.needles.items() if k.startswith(kind)) for kind in kinds}
    for offset in range(9):
        for kind, needle in some.items():
            planted.write_bytes(b"\x00" * offset + needle[:-1] + needle + b"\xff" * 3)
            hits = scan([planted], needles.needles)
            assert hits and all(f == str(planted) for f, _ in hits), (kind, offset)
    planted.unlink()
