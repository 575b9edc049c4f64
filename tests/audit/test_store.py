"""Audit recordings are encrypted at rest under a key in the real OS keyring: they round-trip,
no hidden state, id or text is on disk in clear, files are 0600, tampering and a lost key are
clear errors, and `clear` removes files and key."""

from __future__ import annotations

import json
import stat

import numpy as np
import pytest
import torch

from umbra.attacks.transcript import ObservedSequence
from umbra.audit.store import AuditStore
from umbra.errors import ConfigError

META = {"model_dir": "/m", "encoder_blocks": 1, "decoder_blocks": 2, "hidden_size": 8, "epsilon": 13.0,
        "indvocab": True, "ltokenizer": True, "bundle_id": "b"}


def _seq(t=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    truth = np.arange(1000 + seed, 1000 + seed + t, dtype=np.int64)
    return ObservedSequence(torch.randn(t, 8, generator=g), torch.arange(t), np.array([True] * t),
                            np.array([True] * (t - 1) + [False]), truth=truth)


def test_round_trip_and_nothing_in_clear(keystore, tmp_path):
    store = AuditStore(tmp_path / "a", keystore)
    seqs = [_seq(6, 0), _seq(4, 1)]
    path = store.save(META | {"note": "def secret_function(): pass"}, seqs)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (rec,) = store.records()
    assert rec.meta["note"] == "def secret_function(): pass" and rec.meta["epsilon"] == 13.0
    for a, b in zip(rec.sequences, seqs):
        assert torch.equal(a.hidden, b.hidden) and torch.equal(a.positions, b.positions)
        assert np.array_equal(a.truth, b.truth) and np.array_equal(a.real, b.real) and np.array_equal(a.fresh, b.fresh)
    blob = path.read_bytes()
    needles = [b"secret_function", seqs[0].hidden.numpy().tobytes()[:32], seqs[0].truth.astype("<i8").tobytes(),
               seqs[0].truth.astype("<i4").tobytes(), seqs[0].truth.astype("<i2").tobytes()]
    assert not any(n in blob for n in needles)
    assert [n for n in keystore.list() if n.startswith("audit/")]
    for p in (tmp_path / "a").rglob("*"):
        assert keystore.get(keystore.list()[0]) not in p.read_bytes()


def test_tampering_and_a_lost_key_are_clear_errors(keystore, tmp_path):
    store = AuditStore(tmp_path / "a", keystore)
    path = store.save(META, [_seq()])
    blob = bytearray(path.read_bytes())
    blob[-20] ^= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(ConfigError, match="fails authentication"):
        store.records()
    store_id = json.loads((tmp_path / "a" / "store.json").read_text())["store_id"]
    keystore.delete(f"audit/{store_id}")
    with pytest.raises(ConfigError, match="key is gone"):
        store.records()


def test_clear_removes_recordings_and_key(keystore, tmp_path):
    store = AuditStore(tmp_path / "a", keystore)
    store.save(META, [_seq()])
    store.save(META, [_seq(5, 2)])
    assert len(store.paths()) == 2
    assert store.clear() == 2
    assert store.paths() == [] and not [n for n in keystore.list() if n.startswith("audit/")]
    assert store.clear() == 0


def test_records_without_truth_are_refused(keystore, tmp_path):
    seq = _seq()
    seq.truth = None
    with pytest.raises(ConfigError, match="truth"):
        AuditStore(tmp_path / "a", keystore).save(META, [seq])
