"""SecureGate's dual adapters: the revealing adapter, trained on the raw view, memorizes a canary
repeated in it; the secure one, trained on the scrubbed view, does not. The encoder and middle run
once per block of each view (not once per epoch), forward only: no gradient crosses the wire, and
only the decoder-side adapter changes."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from tiny_models import CODE_SNIPPETS
from umbra.data.corpus import Document
from umbra.data.tokenizer import EOS
from umbra.errors import ConfigError
from umbra.evaluation.canaries import CanaryConfig, plant_canaries
from umbra.evaluation.memorization import Trunk, inference_attack, route_logits, text_score
from umbra.middle.local import LocalMiddle
from umbra.model.adapters import AdapterSet
from umbra.model.adapters.config import Placement
from umbra.privacy.ltokenizer import Permutation
from umbra.tuning.dual_adapters import (AdapterTrainConfig, DualAdapterConfig, pack_view, train_dual,
                                        train_view_adapter)

# Scaled to the 64-wide random test model: a high lr and many epochs over a tiny view.
TRAIN = AdapterTrainConfig(rank=8, lr=3e-3, epochs=60, block_len=128, batch_size=8, fim_rate=0.0, seed=0)


class RecordingMiddle:
    """A LocalMiddle that records what it is asked (what the cloud would see) and refuses backward."""

    def __init__(self, blocks):
        self.inner = LocalMiddle(blocks)
        self.hidden_size = self.inner.hidden_size
        self.forwards: list[tuple[int, int]] = []  # (B, T) of each forward
        self.training_sessions = 0

    async def open_session(self, *, training=False):
        self.training_sessions += training
        return await self.inner.open_session(training=training)

    async def forward(self, hidden, positions, session, key_padding=None):
        self.forwards.append(tuple(hidden.shape[:2]))
        return await self.inner.forward(hidden, positions, session, key_padding)

    async def backward(self, grad_out, session):
        raise AssertionError("a decoder-side adapter must never send a gradient to the middle")

    async def truncate(self, session, length):
        await self.inner.truncate(session, length)

    async def close(self, session):
        await self.inner.close(session)

    async def aclose(self):
        await self.inner.aclose()


@pytest.fixture(scope="module")
def planted():
    rng = random.Random(0)
    docs = [Document("python", f"f{i}.py", "".join(rng.sample(CODE_SNIPPETS, 2))) for i in range(24)]
    return plant_canaries(docs, CanaryConfig(repeats=(16,), per_group=2, seed=0))


@pytest.fixture(scope="module")
def trained(model, middle_blocks, planted):
    decoder_before = {k: v.clone() for k, v in model.decoder.state_dict().items()}
    middle = RecordingMiddle(middle_blocks)
    raw = [d.text for d in planted.documents]
    scrubbed = [d.text for d in planted.masked_documents()]
    secure, revealing, report = asyncio.run(train_dual(model, middle, raw, scrubbed, DualAdapterConfig(TRAIN, TRAIN)))
    return secure, revealing, report, middle, decoder_before


def test_the_revealing_adapter_memorizes_a_repeated_canary_and_the_secure_one_does_not(
        model, middle_blocks, planted, trained):
    secure, revealing, *_ = trained
    trunk = Trunk(model.encoder, middle_blocks)
    sets = planted.candidate_sets(50, seed=1)
    result = {name: inference_attack(text_score(model.tokenizer, route_logits(model.decoder, trunk, aset)), sets)
              for name, aset in (("none", AdapterSet()), ("secure", AdapterSet([secure])),
                                 ("revealing", AdapterSet([revealing])))}
    assert result["revealing"].correct >= 4 and result["revealing"].times_chance >= 30  # 6 canaries, chance 1/50
    assert result["secure"].correct <= 1 and result["none"].correct <= 1
    mean_rank = {k: sum(r.ranks) / len(r.ranks) for k, r in result.items()}
    assert mean_rank["revealing"] < mean_rank["secure"] / 3


def test_the_trunk_runs_once_per_block_forward_only_and_only_the_adapters_change(model, trained):
    secure, revealing, report, middle, decoder_before = trained
    for r in (report.secure, report.revealing):
        batches = -(-r.blocks // TRAIN.batch_size)
        assert r.steps == TRAIN.epochs * batches == len(r.losses)
        assert r.tokens > 0 and r.texts == 24 and r.trunk_seconds > 0 and r.train_seconds > 0
    sent_blocks = sum(b for b, _ in middle.forwards)
    assert sent_blocks == report.secure.blocks + report.revealing.blocks  # once per block, not per epoch
    assert {t for _, t in middle.forwards} == {TRAIN.block_len} and middle.training_sessions == 2
    after = model.decoder.state_dict()
    assert all(torch.equal(v, after[k]) for k, v in decoder_before.items())
    shape = model.plan.shape(model.spec.num_layers)
    for adapter in (secure, revealing):
        assert adapter.config.placement is Placement.DECODER and adapter.blocks == shape.blocks(Placement.DECODER)
        assert adapter.config.scale == 4.0  # alpha = 4·r by default (seed 003 App. A.1)
        assert not any(p.requires_grad for p in adapter.parameters())
    assert report.revealing.epoch_losses[-1] < report.revealing.epoch_losses[0] - 0.5


async def test_training_is_a_function_of_the_seed(model, middle_blocks):
    texts = CODE_SNIPPETS[:4]
    cfg = AdapterTrainConfig(epochs=2, block_len=32, batch_size=4, fim_rate=0.5, seed=7)
    runs = [await train_view_adapter(model, LocalMiddle(middle_blocks), texts, c, "a")
            for c in (cfg, cfg, AdapterTrainConfig(epochs=2, block_len=32, batch_size=4, fim_rate=0.5, seed=8))]
    (a, ra), (b, rb), (c, _) = runs
    assert ra.losses == rb.losses
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


def test_views_are_packed_with_the_clients_tokenizer_in_its_id_space(model):
    tok = model.tokenizer
    texts = ["def f():\n    return 1\n", "x = 2\n"]
    blocks = pack_view(tok, texts, block_len=8)
    stream = tok.encode(texts[0]) + [tok.token_id(EOS)] + tok.encode(texts[1]) + [tok.token_id(EOS)]
    assert blocks.tokens == len(stream) and blocks.ids.shape[1] == 8
    assert blocks.ids.flatten()[: len(stream)].tolist() == stream
    assert not blocks.mask.flatten()[len(stream):].any() and blocks.ids.shape[0] == -(-len(stream) // 8)
    perm = Permutation.random(model.spec.vocab_size)  # a bundle's π: every id is private
    private = pack_view(tok.with_permutation(perm), texts, block_len=8)
    assert torch.equal(private.ids[private.mask], torch.as_tensor(perm.to_private(blocks.ids[blocks.mask].tolist())))
    fim = pack_view(tok, CODE_SNIPPETS, block_len=64, fim_rate=1.0, seed=3)
    assert (fim.ids == tok.token_id("<fim_middle>")).sum() == len(CODE_SNIPPETS)
    assert torch.equal(fim.ids, pack_view(tok, CODE_SNIPPETS, block_len=64, fim_rate=1.0, seed=3).ids)


async def test_bad_settings_are_config_errors(model, middle_blocks):
    for bad in (dict(rank=0), dict(lr=0.0), dict(epochs=0), dict(fim_rate=1.5), dict(targets=("nope",))):
        with pytest.raises(ConfigError):
            AdapterTrainConfig(**bad).validate()
    with pytest.raises(ConfigError, match="different names"):
        await train_dual(model, LocalMiddle(middle_blocks), ["a"], ["b"], DualAdapterConfig(secure_name="x",
                                                                                          revealing_name="x"))
    with pytest.raises(ConfigError, match="at least one text"):
        pack_view(model.tokenizer, [], 8)


async def test_a_client_with_a_private_local_path_is_refused(base_dir, middle_blocks):
    """Its decoder also reads the encoder's output: adapters trained on the middle's alone would
    not be the ones it runs, so training them is refused, not done wrong."""
    from umbra.engine import ClientModel
    from umbra.model.private_path_config import PrivatePathConfig
    from umbra.tuning.private_path import attach_private_path

    client = ClientModel.load(base_dir)
    attach_private_path(client, PrivatePathConfig(enabled=True, noise=0.5, rank=16), b"s" * 32)
    with pytest.raises(ConfigError, match="private local path"):
        await train_view_adapter(client, LocalMiddle(middle_blocks), ["def f(a, b):\n    return a + b\n"], TRAIN,
                                 "secure")
