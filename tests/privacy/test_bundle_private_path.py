"""A bundle's private local path: tune → save → load → complete gives the tuned client's logits;
the secret is derived from π (stable under key rotation, never on disk); a changed file is refused;
a new save sweeps the old file. The clean residual: its gate and its clean table (public row
order) round-trip; untuned and lossless at ε = ∞ it is the plain split model."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load as st_load

from tests.tuning.conftest import tiny_config
from umbra.engine import ClientModel
from umbra.engine.runner import SplitRunner
from umbra.errors import ConfigError
from umbra.middle.local import LocalMiddle
from umbra.model.loader import load_client, load_middle
from umbra.model.private_path import NOISE_LABEL, split_logits, subkey
from umbra.model.private_path_config import PrivatePathConfig
from umbra.privacy.bundle import BundleConfig, init_bundle, load_bundle, rotate_bundle_key, save_client_weights
from umbra.privacy.bundle_private_path import PRIVATE_PATH, bundle_secret, save_private_path
from umbra.privacy.manifest import Manifest
from umbra.tuning.data import TuneData
from umbra.tuning.loop import tune
from umbra.tuning.private_path import prepare_for_tuning

PATH = PrivatePathConfig(enabled=True, noise=0.5, rank=16)
IDS = torch.randint(5, 500, (1, 20), generator=torch.Generator().manual_seed(7))


@pytest.fixture
def tuned(fim_qwen2_dir, tmp_path, keystore, tune_corpus):
    out = tmp_path / "bundle"
    init_bundle(fim_qwen2_dir, BundleConfig(epsilon=32.0), out, store=keystore)
    bundle = load_bundle(out, store=keystore)
    assert bundle.private_path is None
    config = tiny_config(private_path=PATH)
    prepare_for_tuning(bundle, config, bundle_secret(bundle.permutation, bundle.manifest.bundle_id))
    data = TuneData.from_corpus(tune_corpus, fim_qwen2_dir, config, vocab_size=512)
    import asyncio

    asyncio.run(tune(bundle, LocalMiddle(load_middle(fim_qwen2_dir)), data, config))
    save_private_path(bundle)  # the path first: a crash between the two never leaves a lossy-tuned
    save_client_weights(bundle)  # client without its path
    return bundle


@pytest.fixture(scope="module")
def tune_corpus(tmp_path_factory):
    import random

    from tiny_models import CODE_SNIPPETS
    from umbra.data.corpus import Document, write_documents

    root = tmp_path_factory.mktemp("pp-corpus")
    rng = random.Random(1)
    for lang in ("python", "go"):
        docs = [Document(lang, f"{lang}/train/{i}", "".join(rng.sample(CODE_SNIPPETS, 2))) for i in range(24)]
        write_documents(root, "train", lang, docs)
    return root


async def test_tune_save_load_complete_gives_the_same_logits(tuned, keystore, fim_qwen2_dir):
    loaded = load_bundle(tuned.dir, store=keystore)
    assert loaded.private_path.config == PATH
    assert torch.equal(loaded.private_path.local.weight, tuned.private_path.local.weight)
    assert torch.equal(loaded.private_path.basis, tuned.private_path.basis)
    middle = load_middle(fim_qwen2_dir)
    with torch.no_grad():
        want = split_logits(tuned.encoder, middle, tuned.decoder, tuned.private_path, IDS)[0, -1]
    model = ClientModel.from_bundle(tuned.dir, store=keystore)
    assert model.private_path is not None
    runner = SplitRunner(model.encoder, model.decoder, LocalMiddle(middle), model.private_path)
    got = await runner.run(IDS[0, :9].tolist())
    got = await runner.run(IDS[0, 9:].tolist())
    await runner.close()
    assert (got - want.float()).abs().max().item() <= 1e-4


def test_the_secret_survives_key_rotation_and_never_reaches_disk(tuned, keystore):
    before = load_bundle(tuned.dir, store=keystore).private_path.noise_for(IDS)
    rotate_bundle_key(tuned.dir, store=keystore)
    after = load_bundle(tuned.dir, store=keystore).private_path.noise_for(IDS)
    assert torch.equal(before, after)  # a rotation must not give the cloud a second draw of a prefix
    secret = bundle_secret(tuned.permutation, tuned.manifest.bundle_id)
    for f in tuned.dir.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert secret not in data and subkey(secret, NOISE_LABEL) not in data and secret.hex().encode() not in data


def test_a_changed_file_is_refused_and_old_files_are_swept(tuned, keystore):
    entry = Manifest.read(tuned.dir).privacy[PRIVATE_PATH]
    with torch.no_grad():
        tuned.private_path.local.weight.add_(0.01)
    save_private_path(tuned)
    new = Manifest.read(tuned.dir).privacy[PRIVATE_PATH]
    assert new["file"] != entry["file"] and not (tuned.dir / entry["file"]).exists()
    assert (tuned.dir / new["file"]).is_file()
    save_client_weights(tuned)  # another engineer's writer keeps the entry and its file
    assert Manifest.read(tuned.dir).privacy[PRIVATE_PATH] == new and (tuned.dir / new["file"]).is_file()
    (tuned.dir / new["file"]).write_bytes(b"not the weights")
    with pytest.raises(ConfigError, match="does not match the manifest"):
        load_bundle(tuned.dir, store=keystore)


# -- the clean residual: its gate and its clean table in the bundle -------------------------------
CLEAN = PrivatePathConfig(enabled=True, residual="clean", noise=0.5)


def _public_table(base_dir) -> torch.Tensor:
    return load_client(base_dir)[0].embed_tokens.weight.detach().clone()


async def test_a_clean_residual_bundle_round_trips_with_its_table_in_public_order(fim_qwen2_dir, tmp_path, keystore,
                                                                               tune_corpus):
    out = tmp_path / "bundle"
    init_bundle(fim_qwen2_dir, BundleConfig(epsilon=32.0), out, store=keystore)
    bundle = load_bundle(out, store=keystore)
    config = tiny_config(private_path=CLEAN, gate_lr=0.05)
    public = _public_table(fim_qwen2_dir)
    prepare_for_tuning(bundle, config, bundle_secret(bundle.permutation, bundle.manifest.bundle_id), public)
    data = TuneData.from_corpus(tune_corpus, fim_qwen2_dir, config, vocab_size=512)
    await tune(bundle, LocalMiddle(load_middle(fim_qwen2_dir)), data, config)
    save_private_path(bundle)
    save_client_weights(bundle)
    entry = Manifest.read(out).privacy[PRIVATE_PATH]
    assert entry["config"]["residual"] == "clean"
    stored = st_load((out / entry["file"]).read_bytes())
    assert set(stored) == {"gate", "clean_embed"}
    assert torch.equal(stored["clean_embed"], public)  # the base model's rows as they are: no π in the order
    loaded = load_bundle(out, store=keystore)
    assert torch.equal(loaded.private_path.gate, bundle.private_path.gate)
    assert torch.equal(loaded.private_path.clean_embed, bundle.private_path.clean_embed)
    middle = load_middle(fim_qwen2_dir)
    with torch.no_grad():
        want = split_logits(bundle.encoder, middle, bundle.decoder, bundle.private_path, IDS)[0, -1]
    model = ClientModel.from_bundle(out, store=keystore)
    runner = SplitRunner(model.encoder, model.decoder, LocalMiddle(middle), model.private_path)
    await runner.run(IDS[0, :9].tolist())
    got = await runner.run(IDS[0, 9:].tolist())
    await runner.close()
    assert (got - want.float()).abs().max().item() <= 1e-4


def test_an_untuned_lossless_clean_residual_at_eps_inf_is_the_plain_split_model(fim_qwen2_dir, tmp_path, keystore):
    out = tmp_path / "bundle"
    init_bundle(fim_qwen2_dir, BundleConfig(epsilon=float("inf")), out, store=keystore)
    bundle = load_bundle(out, store=keystore)
    config = tiny_config(private_path=PrivatePathConfig(enabled=True, residual="clean"))
    prepare_for_tuning(bundle, config, bundle_secret(bundle.permutation, bundle.manifest.bundle_id),
                       _public_table(fim_qwen2_dir))
    middle = load_middle(fim_qwen2_dir)
    with torch.no_grad():
        plain = split_logits(bundle.encoder, middle, bundle.decoder, None, IDS)
        clean = split_logits(bundle.encoder, middle, bundle.decoder, bundle.private_path, IDS)
    assert torch.equal(plain, clean)
