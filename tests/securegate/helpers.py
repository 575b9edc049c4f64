"""Helpers of the SecureGate tests: adapters with every weight drawn from a seed (so a subprocess
builds exactly the adapter the parent checks), bundle and keyring snapshots and clones, users'
keyrings, and the needle scan that looks for secrets and plaintext adapters in files.

Imported as `securegate.helpers` (tests/ is on sys.path) by the test modules and by the crash
test's subprocesses; it imports nothing from pytest."""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path

import numpy as np
import torch

from keys import KeyStore
from keys.access_keys import AccessKey, held_key_ids
from umbra.model.adapters import Adapter, build_adapter
from umbra.privacy.aead import derive_key, read_header
from umbra.privacy.bundle_adapters import bundle_shape
from umbra.privacy.manifest import Manifest
from umbra.securegate import sealing
from umbra.securegate.bundle_access import key_entries
from umbra.securegate.key_embedding import key_seed

# GateConfig kwargs where the gate is not the subject (test_gate.py trains the default one). Every
# valid key is still checked, and a key the gate misroutes still opens nothing (the seal); fewer
# negatives keep each retraining ~0.3 s here instead of 2-6 s: a key embedding costs ~1.2 ms (a
# KeystreamRNG per key allocates 2 MiB), and the default config embeds ~5000 keys plus 40 per valid key.
SMALL_GATE = dict(random_keys=128, absent_tokens=128, malformed_per_key=4, other_bundle_per_key=2,
                  check_per_class=64, steps=150)


# -- adapters ----------------------------------------------------------------------------------------

def make_adapter(bundle_dir, name: str, config, seed: int, std: float = 0.3) -> Adapter:
    """An adapter of the bundle's shape with EVERY weight drawn from `seed` (not only the output
    weights: the input weights of build_adapter's init could coincide with another adapter's,
    and the leak scan must find only this adapter's bytes)."""
    d = Path(bundle_dir)
    spec, shape = bundle_shape(d, Manifest.read(d))
    adapter = build_adapter(name, config, spec, shape)
    gen = torch.Generator().manual_seed(10_000 + seed)
    with torch.no_grad():
        for p in adapter.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * std)
    adapter.touch()
    return adapter.eval()


def same_weights(a: Adapter, b: Adapter) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# -- snapshots ---------------------------------------------------------------------------------------

def snapshot(d) -> dict[str, bytes]:
    """Every file under `d` (relative path -> bytes), the lock file included."""
    d = Path(d)
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def secret_collection():
    """(connection, default collection with one open session): straight to the Secret Service,
    one connection and one session for many items (KeyStore pays both per call, 20-70 ms)."""
    import secretstorage
    from secretstorage.util import open_session

    conn = secretstorage.dbus_init()
    collection = secretstorage.get_default_collection(conn)
    collection.session = open_session(conn)
    return conn, collection


def _service_items(service: str):
    """(connection, items) of one keyring service."""
    conn, collection = secret_collection()
    return conn, list(collection.search_items({"service": service}))


def keyring_snapshot(store: KeyStore) -> dict[str, bytes]:
    """Everything the keyring holds under the store's service (its index entry included), as the
    Secret Service itself returns it."""
    conn, items = _service_items(store.service)
    try:
        return {item.get_attributes()["username"]: item.get_secret() for item in items}
    finally:
        conn.close()


def new_store() -> KeyStore:
    """A KeyStore over the real Secret Service under a fresh service name (no entries)."""
    return KeyStore(service=f"umbra-test-{secrets.token_hex(6)}")


def empty_stores(stores) -> None:
    """Delete every item of these stores' services (their indexes too), in one connection."""
    conn, collection = secret_collection()
    try:
        for service in {s.service for s in stores}:
            for item in list(collection.search_items({"service": service})):
                item.delete()
    finally:
        conn.close()


def copy_entries(src: KeyStore, dst: KeyStore, prefix: str = "") -> None:
    for name in src.list(prefix=prefix):
        dst.set(name, src.get(name))


def clone_bundle(src_dir, src_store: KeyStore, dst_dir, dst_store: KeyStore) -> Path:
    """A copy of a bundle and of everything its keyring service holds (permutation key, access
    keys, the store's index) under another service: the same bundle id, independent state."""
    shutil.copytree(src_dir, dst_dir)
    conn, collection = secret_collection()
    try:
        for item in list(collection.search_items({"service": src_store.service})):
            attributes = dict(item.get_attributes(), service=dst_store.service)
            collection.create_item(item.get_label(), attributes, item.get_secret(), replace=True)
    finally:
        conn.close()
    return Path(dst_dir)


def access_ids(store: KeyStore, bundle_dir) -> set[str]:
    return set(held_key_ids(store, Manifest.read(Path(bundle_dir)).bundle_id))


def current_ids(bundle_dir) -> dict[str, str]:
    """key name -> key id of the committed manifest."""
    return {n: e.key_id for n, e in key_entries(Manifest.read(Path(bundle_dir))).items()}


def referenced_files_whole(bundle_dir) -> None:
    """Every file the manifest names exists and has its hash; the access dir holds nothing else."""
    from umbra.privacy.bundle_commit import referenced
    from umbra.privacy.manifest import sha256_file

    d = Path(bundle_dir)
    m = Manifest.read(d)
    refs = referenced(m)
    for rel in refs:
        assert (d / rel).is_file(), rel
    for name, e in key_entries(m).items():
        assert sha256_file(d / e.file) == e.sha256, name
    gate = m.access.get("gate")
    if gate:
        assert sha256_file(d / gate["file"]) == gate["sha256"]
    if (d / "access").is_dir():
        assert {f"access/{p.name}" for p in (d / "access").iterdir()} <= refs


# -- the leak scan -----------------------------------------------------------------------------------

class Needles:
    """Byte strings that must never appear in a file: access keys' secrets (raw, hex, base64url),
    text forms and HMAC seeds, the HKDF-derived AES keys of their sealed adapters, and plaintext
    revealing adapters (the whole safetensors file and windows of every tensor's raw bytes)."""

    def __init__(self):
        self.needles: dict[str, bytes] = {}
        self.keys: dict[tuple[str, str], AccessKey] = {}
        self.roots: set[Path] = set()

    def root(self, d) -> Path:
        self.roots.add(Path(d))
        return Path(d)

    def key(self, key: AccessKey) -> AccessKey:
        self.keys[(key.bundle_id, key.key_id)] = key
        tag = f"key {key.key_id}"
        secret = bytes(key.secret)
        if len(secret) >= 16:
            self.needles[f"{tag} secret"] = secret
            self.needles[f"{tag} secret hex"] = secret.hex().encode()
        self.needles[f"{tag} text"] = key.text().encode()
        self.needles[f"{tag} secret base64url"] = key.text().rsplit(":", 1)[1].encode()
        self.needles[f"{tag} seed"] = key_seed(secret, key.bundle_id)
        return key

    def keys_of(self, store: KeyStore, bundle_dir) -> None:
        """Every access key of the bundle this keyring holds (current, orphan or stale)."""
        from keys.access_keys import load_key

        bundle_id = Manifest.read(Path(bundle_dir)).bundle_id
        for key_id in held_key_ids(store, bundle_id):
            self.key(load_key(store, bundle_id, key_id))

    def sealed_blob(self, blob: bytes) -> None:
        """The AES key of a sealed revealing adapter, if its access key is registered."""
        try:
            header = read_header(blob, sealing.MAGIC)[0]
            key = self.keys.get((header["bundle_id"], header["key_id"]))
        except Exception:  # noqa: BLE001 - a corrupted copy made by a test
            return
        if key is not None:
            info = sealing._info(key.bundle_id, header["adapter"], key.key_id)
            self.needles[f"aes {key.key_id} {header['salt'][:8]}"] = derive_key(key.secret, bytes.fromhex(header["salt"]),
                                                                              info)
            try:
                plain = sealing.open_adapter(blob, key, header["adapter"])
            except Exception:  # noqa: BLE001 - a tampered copy
                return
            self.plaintext(f"{header['adapter']} under {key.key_id}", plain)

    def plaintext(self, label: str, plain: bytes) -> None:
        """A plaintext adapter file as sealed: the whole file and its tensor data (after the
        safetensors header, whose metadata order safetensors does not fix)."""
        self.needles[f"plaintext {label} file"] = plain
        head = 8 + int.from_bytes(plain[:8], "little")
        if len(plain) - head >= 16:
            self.needles[f"plaintext {label} data"] = plain[head:]

    def sealed_in(self, bundle_dir) -> None:
        access = Path(bundle_dir) / "access"
        if access.is_dir():
            for p in access.glob("*.sealed"):
                self.sealed_blob(p.read_bytes())

    def adapter(self, adapter: Adapter, bundle_dir=None) -> None:
        """A revealing adapter: its file bytes as the bundle would write them (adapter_bytes) and
        windows of its tensors' raw bytes (fp32: 4 values; fp16/bf16: 8 values)."""
        if bundle_dir is not None:
            from umbra.model.adapters.files import adapter_bytes

            d = Path(bundle_dir)
            self.plaintext(f"{adapter.name} {adapter.revision}",
                           adapter_bytes(adapter, *bundle_shape(d, Manifest.read(d))))
        for name, tensor in adapter.state_dict().items():
            flat = tensor.detach().flatten().float()
            for dtype, width in ((torch.float32, 4), (torch.float16, 8), (torch.bfloat16, 8)):
                step = max(1, flat.numel() // 8)
                for start in range(0, max(1, flat.numel() - width + 1), step):
                    window = flat[start:start + width].to(dtype)
                    if (window == 0).any():  # zero bytes are everywhere
                        continue
                    self.needles[f"adapter {adapter.name} {adapter.revision} {name}[{start}] {dtype}"] = \
                        window.view(torch.uint8).numpy().tobytes()


def files_under(roots) -> list[Path]:
    out = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            out += [Path(dirpath) / n for n in names if not os.path.islink(Path(dirpath) / n)]
    return sorted(set(out))


def scan(files, needles: dict[str, bytes]) -> list[tuple[str, str]]:
    """(file, needle label) for every needle found in a file. Needles are ≥ 16 bytes; candidates
    come from their first 8 bytes at every offset (numpy, 8 alignments), then compared whole."""
    by_prefix: dict[bytes, list[tuple[str, bytes]]] = {}
    for label, n in needles.items():
        assert len(n) >= 16, label
        by_prefix.setdefault(n[:8], []).append((label, n))
    prefixes = np.frombuffer(b"".join(by_prefix), dtype="<u8")
    hits = []
    for path in files:
        data = Path(path).read_bytes()
        for o in range(8):
            m = (len(data) - o) // 8
            if m <= 0:
                continue
            values = np.frombuffer(data, dtype="<u8", count=m, offset=o)
            for i in np.nonzero(np.isin(values, prefixes))[0]:
                pos = o + 8 * int(i)
                for label, n in by_prefix[data[pos:pos + 8]]:
                    if data[pos:pos + len(n)] == n:
                        hits.append((str(path), label))
    return sorted(set(hits))


# -- another process ---------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
ADDED_SEED = 77  # the adapter an `add` in another process builds: make_adapter(d, arg, LoraConfig(rank=2), ADDED_SEED)

# A process started as `python -c SERVER`: it imports Umbra and warms torch up once (the first
# optimizer step alone imports torch._dynamo, ~1 s), then, for each request on stdin, FORKS a child
# that runs one access change on the bundle through the same Secret Service (it inherits
# DBUS_SESSION_BUS_ADDRESS) and whose progress callback SIGKILLs the child itself at the asked
# step. The server waits for the child and answers its exit code (-9 for a kill) and, if it
# raised, the traceback. New keys are never printed: the parent reads them from the keyring.
SERVER = r"""
import json, os, signal, sys, traceback
sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "tests")]
import torch
torch.set_num_threads(1)
from keys import KeyStore
from umbra.model.adapters import LoraConfig
from umbra.privacy import bundle  # noqa: F401  (what the gate step loads)
from umbra.securegate import bundle_access as ba
from umbra.securegate.gate import GateConfig
from securegate.helpers import ADDED_SEED, SMALL_GATE, make_adapter

p = torch.nn.Parameter(torch.zeros(2))
opt = torch.optim.Adam([p])
p.sum().backward()
opt.step()
del p, opt


def run(req):
    def progress(step):
        if step == req["kill_at"]:
            os.kill(os.getpid(), signal.SIGKILL)

    d, name, arg = req["bundle"], req["name"], req["arg"]
    store = KeyStore(service=req["service"])
    kw = dict(progress=progress, gate_config=GateConfig(**SMALL_GATE))
    if req["op"] == "rotate":
        ba.rotate_key(d, name, store, **kw)
    elif req["op"] == "create":
        ba.create_key(d, name, arg, store, **kw)
    elif req["op"] == "revoke":
        ba.revoke_key(d, name, store, drop_adapter=(arg == "drop"), **kw)
    elif req["op"] == "add":
        ba.add_revealing_adapter(d, make_adapter(d, arg, LoraConfig(rank=2), ADDED_SEED), name, store, **kw)
    else:
        raise ValueError(req["op"])


def start(req):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        error = ""
        try:
            run(req)
        except BaseException:
            error = traceback.format_exc()
        os.write(w, error.encode())
        os._exit(1 if error else 0)
    os.close(w)
    return pid, r


def finish(pid, r):
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return {"pid": pid, "exit": os.waitstatus_to_exitcode(status), "error": b"".join(chunks).decode(errors="replace")}


print(json.dumps({"ready": os.getpid()}), flush=True)
warm = False
for line in sys.stdin:
    batch = json.loads(line)  # a list of requests, on different bundles: run `parallel` at a time
    if not warm:  # reading the model spec imports transformers (~1 s): once here, not in every child
        from pathlib import Path
        from umbra.privacy.bundle_adapters import bundle_shape
        from umbra.privacy.manifest import Manifest
        bundle_shape(Path(batch[0]["bundle"]), Manifest.read(Path(batch[0]["bundle"])))
        warm = True
    results, running = [None] * len(batch), []
    for i, req in enumerate(batch):
        if len(running) >= req.get("parallel", 1):
            j, pid, r = running.pop(0)
            results[j] = finish(pid, r)
        running.append((i, *start(req)))
    for j, pid, r in running:
        results[j] = finish(pid, r)
    print(json.dumps(results), flush=True)
"""


class OpServer:
    """Another process (see SERVER) that runs access changes, each in a forked child."""

    def __init__(self):
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], cwd=REPO, env=op_env(), text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.ready = None

    def run(self, op: str, bundle_dir, store: KeyStore, name: str, arg: str = "", kill_at: str = "") -> dict:
        """{"pid", "exit", "error"} of one change in a child process (exit -9: killed at `kill_at`)."""
        return self.run_many([(op, bundle_dir, store, name, arg, kill_at)])[0]

    def run_many(self, requests, parallel: int = 1) -> list[dict]:
        """Several changes (op, bundle_dir, store, name, arg, kill_at), each in its own child,
        `parallel` at a time (on different bundles and keyrings)."""
        if self.ready is None:
            self.ready = json.loads(self.proc.stdout.readline() or '{"ready": null}')["ready"]
            assert self.ready, "the op server did not start"
        batch = [dict(op=op, bundle=str(d), service=store.service, name=name, arg=arg, kill_at=kill_at,
                      parallel=parallel) for op, d, store, name, arg, kill_at in requests]
        self.proc.stdin.write(json.dumps(batch) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the op server died"
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def op_env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
