"""Fixtures of the SecureGate tests: one tiny base model for the directory, keyrings under fresh
service names over the real Secret Service (emptied at the end), and the session's needle
registry: every access key, sealed adapter and revealing adapter the tests and the commands
they run make is registered, with the tmp dirs they wrote, and test_leak_scan.py (moved to the
end of the session) looks for all of them in every one of those files."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_models import build_tiny_model_dir

from umbra.model.adapters import BottleneckConfig, LoraConfig
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle
from umbra.privacy.bundle_adapters import add_adapter
from umbra.securegate.bundle_access import STEPS, add_revealing_adapter, create_key

from .access_table import GATE, TABLE
from .helpers import clone_bundle, empty_stores, make_adapter, new_store
from .needles import Needles
from .op_server import OpServer

SCAN_FILE = "test_leak_scan.py"


def pytest_collection_modifyitems(session, config, items):
    """The leak scan runs after every other test of the session (stable: order kept otherwise)."""
    items.sort(key=lambda item: Path(str(item.fspath)).name == SCAN_FILE)


@pytest.fixture(scope="session")
def needles() -> Needles:
    return Needles()


@pytest.fixture(scope="session")
def sg_tmp(tmp_path_factory, needles):
    """mktemp whose directory the leak scan walks."""
    return lambda name: needles.root(tmp_path_factory.mktemp(name))


@pytest.fixture(autouse=True)
def _scanned_tmp_path(request, needles):
    if "tmp_path" in request.fixturenames:
        needles.root(request.getfixturevalue("tmp_path"))


@pytest.fixture(scope="session")
def sg_base(sg_tmp) -> Path:
    """The public base model of every SecureGate test (tiny, random, saved once)."""
    d = sg_tmp("sg-base")
    build_tiny_model_dir(d, family="qwen2-tied")
    return d


@pytest.fixture(scope="session")
def stores(secret_service):
    """make() -> a KeyStore under a fresh service name; all emptied at the end of the session."""
    made = []

    def make():
        store = new_store()
        made.append(store)
        return store

    make.services = _Services(made)
    yield make
    try:
        empty_stores(made)
    except Exception:  # noqa: BLE001 - a private keyring daemon dies with the session anyway
        pass


@pytest.fixture(scope="session")
def op_server(secret_service):
    """Another process that runs access changes (op_server.SERVER); it starts importing at once."""
    server = OpServer()
    yield server
    server.close()


class _Services:
    """The service names of the stores made so far (iterable, live)."""

    def __init__(self, made):
        self.made = made

    def __iter__(self):
        return iter([s.service for s in self.made])


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
