"""An organization that keeps a client bundle trains the federation's secure adapter on its bundle's
private tokenizer and embedding table (node config `bundle`, keys from this machine's OS keyring):
the same scrubbed text becomes other token ids and other states, and its update still has the global
adapter's names and shapes (a LoRA of the decoder blocks, which a bundle shares with the public
model), so the federation aggregates it with the others; simulated end to end with two plain
organizations, the global adapter is eqs. 3-5 of what the server received."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from conftest import ORGS, fast_settings, replay, write_org_code
from umbra.errors import UmbraError
from umbra.federation import client_app
from umbra.federation.aggregate import ServerOptConfig
from umbra.federation.client_app import node_settings, train_config
from umbra.federation.record import load_arrays
from umbra.federation.server_app import initial_global
from umbra.federation.simulation import simulate
from umbra.privacy.bundle import BundleConfig, init_bundle


@pytest.fixture
def bundle(tmp_path, fim_qwen2_dir, keystore):
    out = tmp_path / "bundle"
    init_bundle(fim_qwen2_dir, BundleConfig(epsilon=13.0), out, store=keystore)
    return out


def _config(code, model_dir, **extra) -> dict:
    return {"data": str(code), "model": str(model_dir), "threads": 1, "internal-domains": "acme.com", **extra}


def test_an_organization_trains_on_its_bundles_private_tokenizer(tmp_path, fim_qwen2_dir, bundle, keystore):
    code = write_org_code(tmp_path / "orgs", "acme")
    rc = fast_settings(tmp_path, fim_qwen2_dir).run_config()
    own = asyncio.run(client_app._trainer(node_settings(_config(code, fim_qwen2_dir, bundle=str(bundle),
                                                                  **{"keyring-service": keystore.service})),
                                          train_config(rc)))
    public = asyncio.run(client_app._trainer(node_settings(_config(code, fim_qwen2_dir)), train_config(rc)))
    assert own.model.bundle is not None and public.model.bundle is None
    # the same scrubbed view, tokenized with the private tokenizer: π of the public ids
    assert own.view == public.view and own.samples == public.samples
    perm = own.model.bundle.permutation
    assert not np.array_equal(own.blocks.ids.numpy(), public.blocks.ids.numpy())
    real = public.blocks.mask  # padding stays 0 in both
    assert np.array_equal(own.blocks.mask.numpy(), real.numpy())
    assert np.array_equal(own.blocks.ids[real].numpy(), np.asarray(perm.to_private(public.blocks.ids[real])))
    assert not np.allclose(own.hidden.numpy(), public.hidden.numpy())  # the bundle's INDVocab table
    start = initial_global(fim_qwen2_dir, rc)
    mine, n_mine, _ = own.round(start, 1)
    theirs, n_theirs, _ = public.round(start, 1)
    assert n_mine == n_theirs
    assert {k: v.shape for k, v in mine.items()} == {k: v.shape for k, v in start.items()} \
        == {k: v.shape for k, v in theirs.items()}
    assert any(not np.allclose(mine[k], theirs[k]) for k in mine)


def test_a_bundle_whose_keys_this_keyring_lacks_is_a_clear_error(tmp_path, fim_qwen2_dir, bundle, keystore):
    code = write_org_code(tmp_path / "orgs", "acme")
    rc = fast_settings(tmp_path, fim_qwen2_dir).run_config()
    other = node_settings(_config(code, fim_qwen2_dir, bundle=str(bundle),
                                  **{"keyring-service": keystore.service + "-elsewhere"}))
    with pytest.raises(UmbraError, match="(?i)key"):
        asyncio.run(client_app._trainer(other, train_config(rc)))


def test_a_simulated_federation_with_a_bundle_organization_ends_at_the_pure_aggregation(
        tmp_path, fim_qwen2_dir, bundle, keystore):
    organizations = [_config(write_org_code(tmp_path / "orgs", org), fim_qwen2_dir) for org in ORGS]
    organizations[0].update({"bundle": str(bundle), "keyring-service": keystore.service})
    settings = fast_settings(tmp_path, fim_qwen2_dir, node_wait=60.0)
    simulate(settings, organizations, cpus=2)
    record = tmp_path / "record"
    rounds = [json.loads(x) for x in (record / "rounds.jsonl").read_text().splitlines()]
    assert all(len(r["accepted"]) == 3 and not r["rejected"] for r in rounds)
    expected = replay(record, settings.rounds, ServerOptConfig(settings.momentum, settings.server_lr))
    final, _ = load_arrays(tmp_path / "global.npz")
    assert all(np.array_equal(final[k], expected.weights[k]) for k in expected.weights)
    # the bundle organization's round-1 update is the one its bundle trains here, not the public model's
    rc, start = settings.run_config(), load_arrays(record / "round-0" / "global.npz")[0]
    received = [load_arrays(record / "round-1" / f"{n}.npz")[0] for n in rounds[0]["accepted"]]
    for bundle_on, expect in ((True, 1), (False, 0)):
        extra = {"bundle": str(bundle), "keyring-service": keystore.service} if bundle_on else {}
        trainer = asyncio.run(client_app._trainer(node_settings({**organizations[0], "bundle": "", **extra}),
                                                  train_config(rc)))
        local, _, _ = trainer.round(start, 1)
        assert sum(all(np.allclose(u[k], local[k], atol=1e-6) for k in local) for u in received) == expect
