"""umbra/engine/draft.py: the draft model (the client's blocks with the middle skipped) under a
private path. With the clean residual its encoder reads the path's clean table, because that is
what the tuned decoder reads when the middle is the identity: its drafts are the greedy ids of
decoder(encoder over the clean table), and with the gate closed the split model itself gives
exactly those ids, so every draft would be accepted. Without the clean residual (the local path)
it reads the encoder's own table, as before. The client-only runner is the same runner."""

from __future__ import annotations

import copy

import pytest
import torch

from umbra.engine.client_only import ClientOnlyRunner
from umbra.engine.draft import DraftModel
from umbra.model.adapters.selection import EMPTY
from umbra.model.loader import load_client, load_middle
from umbra.model.private_path import PrivatePath, split_logits
from umbra.model.private_path_config import PrivatePathConfig

SECRET = bytes(range(32))


@pytest.fixture(scope="module")
def parts(fim_qwen2_dir):
    encoder, decoder = load_client(fim_qwen2_dir)
    sender = copy.deepcopy(encoder)  # the same blocks over a randomized (INDVocab-like) table
    with torch.no_grad():
        sender.embed_tokens.weight.add_(0.5 * torch.randn(sender.embed_tokens.weight.shape,
                                                          generator=torch.Generator().manual_seed(1)))
    return encoder, sender, load_middle(fim_qwen2_dir), decoder


def _clean_path(encoder, sender) -> PrivatePath:
    config = PrivatePathConfig(enabled=True, residual="clean", noise=1.0)
    return PrivatePath(config, encoder.spec.hidden_size, SECRET, clean_table=encoder.embed_tokens.weight.detach())


def _greedy(encoder, decoder, ids: list[int], n: int) -> list[int]:
    """n greedy ids of decoder(encoder(ids)), recomputed in full each step (no caches)."""
    ids, out = list(ids), []
    for _ in range(n):
        x = torch.tensor([ids])
        pos = torch.arange(len(ids))[None]
        with torch.no_grad():
            out.append(int(decoder(encoder(x, pos), pos)[0, -1].argmax()))
        ids.append(out[-1])
    return out


async def _nothing() -> None:
    pass


async def _draft(encoder, decoder, path, seq: list[int], n: int) -> list[int]:
    allowed = torch.ones(encoder.spec.vocab_size, dtype=torch.bool)
    return await DraftModel(encoder, decoder, allowed, private_path=path).extend(seq, n, EMPTY, _nothing)


SEQ = list(range(40, 72))


async def test_under_the_clean_residual_the_draft_reads_the_clean_table(parts):
    encoder, sender, _, decoder = parts
    path = _clean_path(encoder, sender)
    got = await _draft(sender, decoder, path, SEQ, 6)
    assert got == _greedy(encoder, decoder, SEQ, 6)  # the clean table's blocks alone
    assert got != await _draft(sender, decoder, None, SEQ, 6)  # not the randomized table's


async def test_with_the_gate_closed_the_split_model_chooses_every_draft(parts):
    encoder, sender, middle, decoder = parts
    path = _clean_path(encoder, sender)
    with torch.no_grad():
        path.gate.zero_()
    drafts = await _draft(sender, decoder, path, SEQ, 6)
    ids = torch.tensor([SEQ + drafts])
    with torch.no_grad():
        verify = split_logits(sender, middle, decoder, path, ids)[0, len(SEQ) - 1 : -1].argmax(-1)
    assert verify.tolist() == drafts


async def test_the_local_path_keeps_the_encoders_own_table(parts):
    encoder, sender, _, decoder = parts
    local = PrivatePath(PrivatePathConfig(enabled=True, noise=1.0), encoder.spec.hidden_size, SECRET)
    assert await _draft(sender, decoder, local, SEQ, 4) == _greedy(sender, decoder, SEQ, 4)


async def test_client_only_under_the_clean_residual_is_the_clean_blocks_alone(parts):
    encoder, sender, _, decoder = parts
    runner = ClientOnlyRunner(sender, decoder, _clean_path(encoder, sender))
    await runner.use(EMPTY)
    logits = await runner.run(SEQ)
    pos = torch.arange(len(SEQ))[None]
    with torch.no_grad():
        want = decoder(encoder(torch.tensor([SEQ]), pos), pos)[0, -1].float()
    assert torch.allclose(logits, want, atol=1e-5)
