"""Fixtures of the SecureGate tests: one tiny base model for the directory, keyrings under fresh
service names over the real Secret Service (emptied at the end), and the process's needle
registry: every access key, sealed adapter and revealing adapter the tests and the commands
they run make is registered, with the tmp dirs they wrote and the keyring services they used;
after each test file, its leak scan (needles.LeakScan) looks for all of them in every file those
tests wrote, so each file is a unit of its own on the xdist workers (tests/xdist_units.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from keyring_fixture import private_secret_service

from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.securegate.bundle_access import STEPS, add_revealing_adapter, create_key

from .access_table import GATE, TABLE
from .helpers import clone_bundle, empty_stores, make_adapter, new_store
from .needles import LeakScan, Needles
from .op_server import OpServer


@pytest.fixture(scope="session")
def needles() -> Needles:
    return Needles()


@pytest.fixture(scope="session")
def leak_scan(needles) -> LeakScan:
    return LeakScan(needles)


@pytest.fixture(scope="module", autouse=True)
def _leak_scan_after_each_file(leak_scan):
    """After the file's last test (and its module fixtures' teardown): DESIGN invariant 3 over
    everything this process's tests wrote so far (needles.LeakScan); a leak fails the file's
    last test at teardown, naming the files and the needles (labels, never their bytes)."""
    yield
    _files, hits = leak_scan.check()
    if hits:
        pytest.fail(f"secrets or plaintext adapters in files the tests wrote: {hits}", pytrace=False)


@pytest.fixture(scope="session")
def sg_tmp(tmp_path_factory, needles):
    """mktemp whose directory the leak scan walks."""
    return lambda name: needles.root(tmp_path_factory.mktemp(name))


@pytest.fixture(autouse=True)
def _scanned_tmp_path(request, needles):
    if "tmp_path" in request.fixturenames:
        needles.root(request.getfixturevalue("tmp_path"))


@pytest.fixture(scope="session")
def sg_base(fim_qwen2_dir, needles) -> Path:
    """The public base model of every SecureGate test: the run's tiny random qwen2 (tied
    embeddings, StarCoder-style tokenizer), built once per run, read-only; scanned like the
    tests' own directories."""
    return needles.root(fim_qwen2_dir)


@pytest.fixture(scope="session")
def stores(secret_service, needles):
    """make() -> a KeyStore under a fresh service name; all emptied at the end of the session (on a
    desktop's Secret Service; this process's own throwaway one is deleted whole)."""
    made = []

    def make():
        store = new_store()
        made.append(store)
        needles.services.add(store.service)
        return store

    yield make
    if private_secret_service():  # deleted whole with its daemon: no need to empty it item by item
        return
    try:
        empty_stores(made)
    except Exception:  # noqa: BLE001 - best effort on a desktop's Secret Service
        pass


@pytest.fixture(scope="session")
def op_server(secret_service):
    """Another process that runs access changes (op_server.SERVER); it starts importing at once."""
    server = OpServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def table(sg_base, sg_tmp, stores, needles):
    """A bundle with a secure adapter and three revealing ones (2, 2 and 1 keys), made through the
    public functions; its admin keyring; the adapters as built; the keys as returned. Shared by the
    access tests, which only read it (those that change a bundle take a `clone`)."""
    store = stores()
    out = sg_tmp("sg-table") / "bundle"
    init_bundle(sg_base, BundleConfig(epsilon=13.0), out, store=store)
    add_adapter(out, make_adapter(out, "secure", BottleneckConfig(size=8), seed=20), role="secure")
    adapters, keys = {}, {}
    for i, (name, key_names) in enumerate(TABLE.items()):
        config = LoraConfig(rank=2) if i % 2 else BottleneckConfig(size=8)
        adapters[name] = make_adapter(out, name, config, seed=21 + i)
        needles.adapter(adapters[name], bundle_dir=out)
        steps = []
        keys[key_names[0]] = add_revealing_adapter(out, adapters[name], key_names[0], store, gate_config=GATE,
                                                   training={"method": "test"}, progress=steps.append)
        assert steps == list(STEPS)
        for extra in key_names[1:]:
            keys[extra] = create_key(out, extra, name, store, gate_config=GATE)
    for key in keys.values():
        needles.key(key)
    needles.sealed_in(out)
    encoder = load_bundle(out, store=store).encoder
    return dict(dir=out, store=store, adapters=adapters, keys=keys, encoder=encoder)


@pytest.fixture
def clone(table, tmp_path, stores):
    """A private copy of the table bundle and its admin keyring, for tests that change it."""
    store = stores()
    d = clone_bundle(table["dir"], table["store"], tmp_path / "bundle", store)
    return dict(table, dir=d, store=store)
