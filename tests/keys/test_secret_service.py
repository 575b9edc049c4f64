"""keys/secret_service.py over the real Secret Service: one connection per process, entries
keyring's own backend reads and writes alike, recovery from a dropped connection and from the
daemon's transient "no such object", and many processes at once without the daemon aborting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import keyring
import pytest

from keys import KeyStore, KeyStoreUnavailable
from keys.secret_service import CONNECTION, TRANSIENT_ATTEMPTS, SecretServiceCalls

REPO = Path(__file__).resolve().parents[2]


def test_one_connection_serves_every_call(keystore):
    assert isinstance(keystore._calls, SecretServiceCalls)
    keystore.exists("warm")  # the process's connection is open from here on
    opened = CONNECTION.opened
    for i in range(20):
        keystore.set(f"k{i % 3}", os.urandom(16))
        keystore.get(f"k{i % 3}")
    assert keystore.list() == ["k0", "k1", "k2"]
    for i in range(3):
        keystore.delete(f"k{i}")
    other = KeyStore(service=keystore.service + "-other")
    other.set("x", b"1")
    other.delete("x")
    assert CONNECTION.opened == opened


def test_entries_are_keyrings_own(keystore):
    """What the shared connection writes keyring's backend reads, and the other way round."""
    import base64

    keystore.set("ours", b"written-here")
    assert keyring.get_password(keystore.service, "ours") == base64.b64encode(b"written-here").decode()
    keystore.set("theirs", b"placeholder")  # indexed by the store ...
    keyring.set_password(keystore.service, "theirs", base64.b64encode(b"from-keyring").decode())  # ... replaced
    assert keystore.get("theirs") == b"from-keyring"


def test_a_dropped_connection_is_opened_again(keystore):
    keystore.set("a", b"1")
    opened = CONNECTION.opened
    CONNECTION._connection.sock.close()  # as when the daemon restarts
    assert keystore.get("a") == b"1"
    assert CONNECTION.opened == opened + 1
    keystore.set("a", b"2")
    assert keystore.get("a") == b"2" and CONNECTION.opened == opened + 1


def test_a_forked_child_opens_its_own_connection(keystore):
    keystore.set("a", b"parent")
    opened = CONNECTION.opened
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: same object, inherited socket; it must not use the parent's
        try:
            os.close(r)
            value = keystore.get("a")
            keystore.set("b", b"child")
            os.write(w, json.dumps([value.decode(), CONNECTION.opened - opened]).encode())
        finally:
            os._exit(0)
    os.close(w)
    out = b""
    while chunk := os.read(r, 4096):
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    assert json.loads(out) == ["parent", 1]
    assert keystore.get("b") == b"child" and keystore.get("a") == b"parent"  # the parent's still works
    assert CONNECTION.opened == opened


def _flaky(monkeypatch, times: int, after: bool, error=None) -> SimpleNamespace:
    """Collection.create_item of the real connection, raising `error` (the Secret Service's transient
    "no such object" by default) `times` times, before the item is written (refused) or after it
    (its reply lost); `.made` counts the calls."""
    from secretstorage.collection import Collection
    from secretstorage.exceptions import ItemNotFoundException

    flaky = SimpleNamespace(real=Collection.create_item, times=times, after=after, made=0)
    error = error or ItemNotFoundException("Item does not exist!")

    def create_item(collection, *args, **kwargs):
        flaky.made += 1
        if flaky.times and flaky.after:
            flaky.real(collection, *args, **kwargs)
        if flaky.times:
            flaky.times -= 1
            raise error
        return flaky.real(collection, *args, **kwargs)

    monkeypatch.setattr(Collection, "create_item", create_item)
    return flaky


@pytest.mark.parametrize("after", [True, False], ids=["reply-lost", "refused-once"])
def test_a_transient_no_such_object_is_tried_again(keystore, monkeypatch, after):
    keystore.set("a", b"old")
    flaky = _flaky(monkeypatch, times=1, after=after)
    keystore.set("a", b"new")
    assert keystore.get("a") == b"new"
    assert flaky.made == (1 if after else 2)  # a write that landed is not made twice


def test_a_lasting_no_such_object_is_an_error(keystore, monkeypatch):
    keystore.set("a", b"old")
    flaky = _flaky(monkeypatch, times=100, after=False)
    with pytest.raises(KeyStoreUnavailable, match="refused to write.*ItemNotFoundException"):
        keystore.set("a", b"new")
    assert flaky.made == TRANSIENT_ATTEMPTS
    assert keystore.get("a") == b"old"


def test_other_errors_are_not_tried_again(keystore, monkeypatch):
    from keyring.errors import KeyringLocked

    locked = _flaky(monkeypatch, times=100, after=False, error=KeyringLocked("Failed to unlock the collection!"))
    with pytest.raises(KeyStoreUnavailable, match="KeyringLocked"):
        keystore.set("a", b"x")
    assert locked.made == 1  # a dismissed prompt is not shown again


WORKER = r"""
import os, sys
sys.path.insert(0, os.getcwd())
from keys import KeyStore
store = KeyStore(service=sys.argv[1])
for i in range(int(sys.argv[2])):
    store.set(f"n{i % 4}", os.urandom(32))
    store.get(f"n{i % 4}")
    if i % 7 == 0:
        store.delete(f"n{i % 4}")
for name in store.list():
    store.delete(name)
print("ok")
"""


def test_many_processes_at_once_leave_the_daemon_running(keystore):
    """Before the shared connection, two processes making ~30 calls each at once aborted GNOME
    Keyring 42 (a connection per call); here four make ~350 each."""
    from keyring_fixture import secret_service_usable

    procs = [subprocess.Popen([sys.executable, "-c", WORKER, f"{keystore.service}-{k}", "100"], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["ok"] * 4
    assert secret_service_usable()
    keystore.set("after", b"still-here")
    assert keystore.get("after") == b"still-here"
