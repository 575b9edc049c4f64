"""The middle skipped: identity forward and backward, so a split step through SkipMiddle trains
the client exactly as autograd through decoder(encoder(ids)) does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from umbra.errors import SessionError, ValidationError
from umbra.evaluation.next_token import lean_logits_fn
from umbra.middle.skip import SkipBlocks, SkipMiddle
from umbra.model.loader import load_client
from umbra.tuning.client import TuneClient, named_parameters, select_trainable
from umbra.tuning.loop import split_step


def _grads(client) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in named_parameters(client).items() if p.grad is not None}


async def test_a_split_step_through_the_skipped_middle_is_autograd_without_a_middle(fim_qwen2_dir):
    torch.manual_seed(0)
    ids = torch.randint(0, 512, (2, 24))
    a = TuneClient(*load_client(fim_qwen2_dir))
    b = TuneClient(*load_client(fim_qwen2_dir))
    select_trainable(a, False), select_trainable(b, False)
    middle = SkipMiddle(a.encoder.spec.hidden_size)
    session = await middle.open_session(training=True)
    loss = await split_step(a, middle, session, ids)

    positions = torch.arange(24).expand(2, 24)
    logits = b.decoder(b.encoder(ids, positions), positions)
    direct = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))
    direct.backward()
    assert torch.equal(loss, direct.detach())
    ga, gb = _grads(a), _grads(b)
    assert set(ga) == set(gb) and any(n.startswith("encoder.stack.") for n in ga)
    for name in ga:
        torch.testing.assert_close(ga[name], gb[name], rtol=0, atol=1e-7, msg=name)
    # the whole-model function with SkipBlocks is the same computation
    run = lean_logits_fn(b.encoder, SkipBlocks(b.encoder.spec.hidden_size), b.decoder)
    with torch.no_grad():
        assert torch.equal(run(ids), b.decoder(b.encoder(ids, positions), positions))


async def test_sessions_and_shapes_are_checked():
    middle = SkipMiddle(8)
    inference = await middle.open_session()
    x = torch.randn(1, 3, 8)
    out = await middle.forward(x, torch.arange(3)[None], inference)
    assert torch.equal(out, x) and out is not x
    with pytest.raises(SessionError):
        await middle.backward(torch.randn(1, 3, 8), inference)  # not a training session
    with pytest.raises(ValidationError):
        await middle.forward(torch.randn(1, 3, 4), torch.arange(3)[None], inference)
    await middle.close(inference)
    with pytest.raises(SessionError):
        await middle.forward(x, torch.arange(3)[None], inference)
    with pytest.raises(ValidationError):
        SkipBlocks(8)(torch.randn(1, 2, 4), torch.arange(2)[None])
