"""Tuning checkpoints: a stopped-and-resumed run equals an uninterrupted one exactly, and no file
written by tuning (checkpoint, log, write-back into the bundle) holds π or the bundle key."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from tests.tuning.conftest import tiny_config
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.model.loader import load_middle
from umbra.privacy import sealed
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle, save_client_weights
from umbra.privacy.ltokenizer import public_rows
from umbra.privacy.manifest import Manifest
from umbra.tuning import checkpoint as ckpt
from umbra.tuning.client import EMBEDDING, LM_HEAD, named_parameters
from umbra.tuning.data import TuneData
from umbra.tuning.loop import LOG_NAME, tune


@pytest.fixture
def bundle_dir(base_dir, tmp_path, keystore):
    out = tmp_path / "bundle"
    init_bundle(base_dir, BundleConfig(epsilon=64.0), out, store=keystore)
    return out


async def _run(base_dir, corpus_dir, bundle_dir, keystore, config, out_dir, resume=False):
    client = load_bundle(bundle_dir, store=keystore)
    data = TuneData.from_corpus(corpus_dir, base_dir, config, cache_dir=out_dir / "data")
    result = await tune(client, LocalMiddle(load_middle(base_dir)), data, config, out_dir=out_dir, resume=resume)
    return client, result


async def test_resume_is_exact(base_dir, corpus_dir, bundle_dir, keystore, tmp_path):
    config = tiny_config(steps=6, train_embedding=True)  # embedding moments go through public order too
    full_client, full = await _run(base_dir, corpus_dir, bundle_dir, keystore, config, tmp_path / "full")
    _, first = await _run(base_dir, corpus_dir, bundle_dir, keystore, tiny_config(steps=6, train_embedding=True,
                                                                                  stop_at_step=4), tmp_path / "split")
    assert not first.finished and first.state.step == 4 and first.losses == full.losses[:4]
    resumed_client, second = await _run(base_dir, corpus_dir, bundle_dir, keystore, config, tmp_path / "split",
                                        resume=True)
    assert second.finished and second.losses == full.losses[4:]  # exact, step by step
    a, b = named_parameters(full_client), named_parameters(resumed_client)
    for name in a:
        assert torch.equal(a[name], b[name]), name
    rows = (tmp_path / "split" / LOG_NAME).read_text().splitlines()
    assert len(rows) == 1 + 6 and rows[-1].startswith("6,")
    with pytest.raises(ConfigError, match="exists"):
        await _run(base_dir, corpus_dir, bundle_dir, keystore, config, tmp_path / "full")
    with pytest.raises(ConfigError, match="other tuning settings"):
        await _run(base_dir, corpus_dir, bundle_dir, keystore, tiny_config(steps=7, train_embedding=True),
                   tmp_path / "full", resume=True)


async def test_checkpoint_rows_are_in_public_order(base_dir, corpus_dir, bundle_dir, keystore, tmp_path):
    client, _ = await _run(base_dir, corpus_dir, bundle_dir, keystore, tiny_config(train_embedding=True), tmp_path)
    payload = ckpt.load(tmp_path / ckpt.CHECKPOINT_NAME)
    perm = client.permutation
    assert torch.equal(payload["params"][LM_HEAD], public_rows(client.decoder.lm_head.weight, perm))
    assert torch.equal(payload["params"][EMBEDDING], public_rows(client.encoder.embed_tokens.weight, perm))
    head_index = payload["param_names"].index(LM_HEAD)
    assert payload["optimizer"]["state"][head_index]["exp_avg"].shape == client.decoder.lm_head.weight.shape


def _needles(perm_array: np.ndarray) -> list[bytes]:
    """π (or π⁻¹) as little-endian int16/int32/int64 arrays, whole and in 12-id windows."""
    out = []
    for w in [perm_array] + [perm_array[i : i + 12] for i in range(0, perm_array.size - 12, 29)]:
        for dtype in ("<i2", "<u2", "<i4", "<i8"):
            out.append(w.astype(dtype).tobytes())
    return out


async def test_no_file_written_by_tuning_holds_pi_or_the_key(base_dir, corpus_dir, bundle_dir, keystore, tmp_path):
    before = {p: p.stat().st_mtime_ns for p in bundle_dir.rglob("*") if p.is_file()}
    out = tmp_path / "run"
    await _run(base_dir, corpus_dir, bundle_dir, keystore, tiny_config(train_embedding=True, stop_at_step=3), out)
    client, result = await _run(base_dir, corpus_dir, bundle_dir, keystore, tiny_config(train_embedding=True), out,
                                resume=True)
    assert result.finished
    save_client_weights(client)  # the write-back `umbra tune` does
    written = [p for p in out.rglob("*") if p.is_file()]
    written += [p for p in bundle_dir.rglob("*") if p.is_file() and before.get(p) != p.stat().st_mtime_ns]
    names = {p.name for p in written}
    weights = Manifest.read(bundle_dir).weights  # content-addressed names: client.<sha>.safetensors, ...
    assert {ckpt.CHECKPOINT_NAME, LOG_NAME, weights["client"], weights["indvocab"], "manifest.json"} <= names

    (entry,) = keystore.list()
    key = keystore.get(entry)
    header, _, _ = sealed.read_header((bundle_dir / sealed.FILENAME).read_bytes())
    aes_key = HKDF(hashes.SHA256(), 32, bytes.fromhex(header["salt"]), sealed._INFO).derive(key)
    perm = client.permutation
    needles = _needles(perm.forward) + _needles(perm.inverse)
    needles += [key, aes_key, key.hex().encode(), aes_key.hex().encode()]
    needles += [enc(k) for k in (key, aes_key) for enc in (base64.b64encode, base64.urlsafe_b64encode)]
    needles += [base64.b64encode(k).rstrip(b"=") for k in (key, aes_key)]
    for path in written:
        data = path.read_bytes()
        for needle in needles:
            assert needle not in data, f"{path.name} holds π or the key"
    again = load_bundle(bundle_dir, store=keystore)  # write-back kept the bundle valid (hashes updated)
    assert torch.equal(again.decoder.lm_head.weight, client.decoder.lm_head.weight)
