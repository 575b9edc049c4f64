"""Another process for the SecureGate crash tests: a server (SERVER, started as `python -c`) that
runs access changes on bundles, each in a forked child that can be killed at a chosen step."""

from __future__ import annotations

import json
import os
from pathlib import Path

from keys import KeyStore

from .helpers import SMALL_GATE

REPO = Path(__file__).resolve().parents[2]

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
from securegate.helpers import ADDED_SEED, make_adapter

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
    kw = dict(progress=progress, gate_config=GateConfig(**req["gate"]))
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

    def run_many(self, requests, parallel: int = 1, gate: dict | None = None) -> list[dict]:
        """Several changes (op, bundle_dir, store, name, arg, kill_at), each in its own child,
        `parallel` at a time (on different bundles and keyrings), the gate retrained with `gate`
        (GateConfig fields; default helpers.SMALL_GATE)."""
        if self.ready is None:
            self.ready = json.loads(self.proc.stdout.readline() or '{"ready": null}')["ready"]
            assert self.ready, "the op server did not start"
        batch = [dict(op=op, bundle=str(d), service=store.service, name=name, arg=arg, kill_at=kill_at,
                      parallel=parallel, gate=gate or SMALL_GATE) for op, d, store, name, arg, kill_at in requests]
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
