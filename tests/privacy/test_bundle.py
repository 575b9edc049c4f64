"""Client bundle: `init` → `load_bundle` → `save_client_weights`, the no-π-on-disk scan,
refusal to overwrite, rotation through the CLI (real keyring, subprocesses inherit the bus)."""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from tiny_models import build_tiny_model_dir

import umbra.privacy.bundle as bundle_mod
from umbra.engine.tokenizer import ClientTokenizer
from umbra.errors import ConfigError, ValidationError
from umbra.model.loader import load_client, load_middle
from umbra.model.parts import SplitPlan
from umbra.privacy import sealed
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle, save_client_weights
from umbra.privacy.manifest import DEFAULT_EPSILON, Manifest, sha256_file


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("base-qwen2-tied")
    build_tiny_model_dir(d, family="qwen2-tied")
    return d


def _files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


def _encodings_of(perm_array: np.ndarray) -> list[bytes]:
    """π (or π⁻¹) as raw little-endian integer arrays and as text, whole and in windows."""
    out = []
    windows = [perm_array] + [perm_array[i : i + 12] for i in range(0, perm_array.size - 12, 37)]
    for w in windows:
        for dtype in ("<i2", "<u2", "<i4", "<i8"):
            out.append(w.astype(dtype).tobytes())
        nums = [str(int(v)) for v in w]
        for sep in (",", ", ", " ", "\n", "\t"):
            out.append(sep.join(nums).encode())
        out.append(json.dumps([int(v) for v in w]).encode())
    return out


def test_init_writes_no_permutation_or_key_in_clear(base_dir, tmp_path, keystore):
    out = tmp_path / "bundle"
    manifest = init_bundle(base_dir, BundleConfig(epsilon=64.0, seed=1), out, store=keystore)
    entry = keystore.list()
    assert len(entry) == 1 and entry[0].startswith(f"bundle/{manifest.bundle_id}/")
    key = keystore.get(entry[0])
    assert len(key) == 32
    perm = sealed.open_(out, manifest.bundle_id, keystore)
    header, _, _ = sealed.read_header((out / sealed.FILENAME).read_bytes())
    aes_key = HKDF(hashes.SHA256(), 32, bytes.fromhex(header["salt"]), sealed._INFO).derive(key)

    needles = _encodings_of(perm.forward) + _encodings_of(perm.inverse)
    needles += [key, aes_key, base64.b64encode(key), base64.urlsafe_b64encode(key), key.hex().encode(),
                base64.b64encode(key).rstrip(b"="), base64.b64encode(aes_key)]
    files = _files(out)
    assert {p.relative_to(out).as_posix() for p in files} >= {
        "manifest.json", "indvocab.safetensors", "client.safetensors", "permutation.sealed",
        "base/config.json", "base/tokenizer.json",
    }
    for path in files:
        data = path.read_bytes()
        for needle in needles:
            assert needle not in data, f"{path.name} holds π or the key"
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]  # no leftover temp directory


def test_manifest_contents(base_dir, tmp_path, keystore):
    out = tmp_path / "b"
    m = init_bundle(base_dir, BundleConfig(epsilon=math.inf, h=0.5, split=SplitPlan(1, 3)), out, store=keystore)
    data = json.loads((out / "manifest.json").read_text())
    assert data["privacy"]["epsilon"] == "inf" and data["privacy"]["h"] == 0.5
    assert data["split"] == {"encoder_blocks": 1, "decoder_blocks": 3}
    assert data["base"]["weights"] == {"model.safetensors": sha256_file(base_dir / "model.safetensors")}
    assert data["base"]["vocab_size"] == 512 and data["versions"]["torch"] == torch.__version__
    assert Manifest.read(out).epsilon == math.inf and m.bundle_id == data["bundle_id"]


@torch.no_grad()
def test_loaded_bundle_matches_public_model_at_infinite_epsilon(base_dir, tmp_path, keystore):
    out = tmp_path / "b"
    init_bundle(base_dir, BundleConfig(epsilon=math.inf), out, store=keystore)
    b = load_bundle(out, store=keystore, tokenizer_loader=ClientTokenizer.from_dir)
    enc, dec = load_client(base_dir)
    mid = load_middle(base_dir)
    text = "def add(a, b):\n    return a + b\n"
    ids_private = torch.tensor([b.tokenizer.encode(text)])
    ids_public = b.permutation.to_public(ids_private)
    pos = torch.arange(ids_private.shape[1]).unsqueeze(0)
    public_logits = dec(mid(enc(ids_public, pos), pos), pos)
    private_logits = b.decoder(mid(b.encoder(ids_private, pos), pos), pos)
    assert torch.allclose(private_logits, public_logits[..., torch.tensor(b.permutation.inverse)], atol=1e-5, rtol=0)
    assert b.tokenizer.decode(ids_private[0].tolist()) == text
    assert "Permutation(size=512)" in repr(b.permutation) and "forward" not in repr(b)


def test_randomized_table_is_stored_in_public_order(base_dir, tmp_path, keystore):
    out = tmp_path / "b"
    init_bundle(base_dir, BundleConfig(epsilon=32.0), out, store=keystore)
    b = load_bundle(out, store=keystore)
    from safetensors.torch import load_file

    stored = load_file(out / "indvocab.safetensors")["embed_tokens.weight"]
    original = load_client(base_dir)[0].embed_tokens.weight
    assert torch.equal(b.encoder.embed_tokens.weight[torch.tensor(b.permutation.forward)], stored)
    assert not torch.equal(stored, original)
    for i in range(0, original.shape[1], 7):  # every output value comes from its own column
        assert set(stored[:, i].tolist()) <= set(original[:, i].tolist())
    head = load_file(out / "client.safetensors")["decoder.lm_head.weight"]
    assert torch.equal(head, load_client(base_dir)[1].lm_head.weight)  # LM head: public rows, not noised


def test_init_refuses_to_overwrite(base_dir, tmp_path, keystore):
    out = tmp_path / "b"
    first = init_bundle(base_dir, BundleConfig(epsilon=8.0), out, store=keystore)
    with pytest.raises(ConfigError, match="--force"):
        init_bundle(base_dir, BundleConfig(epsilon=8.0), out, store=keystore)
    assert Manifest.read(out).bundle_id == first.bundle_id
    second = init_bundle(base_dir, BundleConfig(epsilon=8.0), out, store=keystore, force=True)
    assert second.bundle_id != first.bundle_id
    assert all(n.startswith(f"bundle/{second.bundle_id}/") for n in keystore.list())  # old key deleted
    other = tmp_path / "not-a-bundle"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an Umbra client bundle"):
        init_bundle(base_dir, BundleConfig(epsilon=8.0), other, store=keystore, force=True)
    assert (other / "notes.txt").read_text() == "mine"


def test_failed_init_leaves_nothing_behind(base_dir, tmp_path, keystore, monkeypatch):
    def boom(_):
        raise RuntimeError("crash while hashing")

    monkeypatch.setattr(bundle_mod, "_file_hashes", boom)
    with pytest.raises(RuntimeError):
        init_bundle(base_dir, BundleConfig(epsilon=8.0), tmp_path / "b", store=keystore)
    assert list(tmp_path.iterdir()) == [] and keystore.list() == []


@torch.no_grad()
def test_save_client_weights_round_trip(base_dir, tmp_path, keystore):
    out = tmp_path / "b"
    init_bundle(base_dir, BundleConfig(epsilon=16.0), out, store=keystore)
    b = load_bundle(out, store=keystore, tokenizer_loader=ClientTokenizer.from_dir)
    p = b.tokenizer.encode("return")[0]  # a private id
    b.encoder.embed_tokens.weight[p] += 1.0
    b.decoder.lm_head.weight[p] -= 1.0
    b.decoder.stack.layers[0].mlp.down_proj.weight.mul_(0.5)
    expect_emb = b.encoder.embed_tokens.weight.clone()
    expect_head = b.decoder.lm_head.weight.clone()
    expect_down = b.decoder.stack.layers[0].mlp.down_proj.weight.clone()
    manifest = save_client_weights(b)
    assert manifest.updated is not None
    again = load_bundle(out, store=keystore)  # verify=True: hashes were updated
    assert torch.equal(again.encoder.embed_tokens.weight, expect_emb)
    assert torch.equal(again.decoder.lm_head.weight, expect_head)
    assert torch.equal(again.decoder.stack.layers[0].mlp.down_proj.weight, expect_down)
    from safetensors.torch import load_file

    assert manifest.format_version == 3 and manifest.weights["client"] != "client.safetensors"  # migrated
    assert not (out / "client.safetensors").exists()  # the replaced weights were swept after the commit
    stored = load_file(out / manifest.weights["client"])["decoder.lm_head.weight"]
    assert torch.equal(stored[b.permutation.to_public(p)], expect_head[p])  # public row order on disk
    with pytest.raises(ValidationError):
        save_client_weights(b, encoder=load_client(base_dir, SplitPlan(2, 2))[0])


def test_load_detects_modified_files(base_dir, tmp_path, keystore):
    out = tmp_path / "b"
    init_bundle(base_dir, BundleConfig(epsilon=16.0), out, store=keystore)
    with open(out / "client.safetensors", "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x01\x02\x03")
    with pytest.raises(ConfigError, match="does not match the manifest"):
        load_bundle(out, store=keystore)
    with pytest.raises(ConfigError, match="not a client bundle"):
        load_bundle(tmp_path, store=keystore)


def test_cli_init_list_rotate(base_dir, tmp_path, keystore, capsys):
    """`umbra init` in a subprocess (it inherits the bus address, so it reaches the same Secret
    Service); refusal, rotation and listing through the same dispatcher in-process."""
    from umbra.cli.main import main

    out = tmp_path / "b"
    r = subprocess.run(
        [sys.executable, "-m", "umbra.cli.main", "init", "--base", str(base_dir), "--epsilon", "inf",
         "--out", str(out), "--split", "1,2", "--service", keystore.service],
        capture_output=True, text=True, timeout=300, env=os.environ.copy(),
    )
    assert r.returncode == 0, r.stderr
    bundle_id = Manifest.read(out).bundle_id
    assert bundle_id in r.stdout
    capsys.readouterr()
    assert main(["init", "--base", str(base_dir), "--epsilon", "inf", "--out", str(out),
                 "--service", keystore.service]) == 2
    assert "--force" in capsys.readouterr().err

    before = keystore.list()
    old_key = keystore.get(before[0])
    perm = load_bundle(out, store=keystore).permutation
    assert main(["keys", "rotate", "--bundle", str(out), "--service", keystore.service]) == 0
    after = keystore.list()
    assert len(after) == 1 and after != before and after[0].startswith(f"bundle/{bundle_id}/")
    assert load_bundle(out, store=keystore).permutation == perm
    with pytest.raises(ConfigError, match="cannot be decrypted"):
        sealed.unseal((out / sealed.FILENAME).read_bytes(), old_key)

    capsys.readouterr()
    assert main(["keys", "list", "--service", keystore.service]) == 0
    printed = capsys.readouterr()
    assert printed.out.split() == after
    assert base64.b64encode(keystore.get(after[0])).decode() not in printed.out + printed.err

    assert main(["init", "--base", str(base_dir), "--out", str(tmp_path / "default"),
                 "--service", keystore.service]) == 0  # no --epsilon: the documented default
    assert Manifest.read(tmp_path / "default").epsilon == DEFAULT_EPSILON == 1024.0
    assert "INDVocab epsilon=1024.0" in capsys.readouterr().out
