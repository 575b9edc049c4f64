"""Split logits (encoder -> LocalMiddle -> decoder) equal transformers' monolithic logits."""

from __future__ import annotations

import pytest
import torch

from tiny_models import FAMILIES
from umbra.middle.local import LocalMiddle
from umbra.model.loader import load_client, load_middle

TOL = 1e-5


@pytest.fixture(params=FAMILIES)
def family(request):
    return request.param


def reference_logits(hf, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf(ids).logits  # [1,T,V]


class SplitClient:
    """Encoder and decoder with their KV caches, driving one Middle session."""

    def __init__(self, model_dir, middle):
        self.enc, self.dec = load_client(model_dir)
        self.middle = middle
        self.ce, self.cd = self.enc.stack.new_cache(), self.dec.stack.new_cache()

    async def open(self):
        self.session = await self.middle.open_session()

    async def run(self, ids: torch.Tensor) -> torch.Tensor:
        start = self.ce.length
        pos = torch.arange(start, start + ids.shape[1])[None]
        with torch.no_grad():
            h = self.enc(ids, pos, self.ce)
            h = await self.middle.forward(h, pos, self.session)
            return self.dec(h, pos, self.cd)

    async def truncate(self, n: int):
        self.ce.truncate(n)
        self.cd.truncate(n)
        await self.middle.truncate(self.session, n)


async def test_prefill_decode_truncate_match_transformers(family, tiny_model_dirs, hf_models):
    d, hf = tiny_model_dirs[family], hf_models[family]
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (1, 24 + 32), generator=gen)
    ref = reference_logits(hf, ids)
    client = SplitClient(d, LocalMiddle(load_middle(d)))
    await client.open()

    prefill = await client.run(ids[:, :24])
    assert (prefill - ref[:, :24]).abs().max().item() <= TOL
    for t in range(24, 56):  # 32 single-token decode steps
        step = await client.run(ids[:, t : t + 1])
        assert (step[:, 0] - ref[:, t]).abs().max().item() <= TOL, f"decode step {t}"

    # roll back to a shared prefix of 20 tokens and continue with different text
    await client.truncate(20)
    new = torch.randint(0, 512, (1, 12), generator=gen)
    ref2 = reference_logits(hf, torch.cat([ids[:, :20], new], 1))
    cont = await client.run(new)
    assert (cont - ref2[:, 20:]).abs().max().item() <= TOL


async def test_middle_backward_matches_autograd(tiny_model_dirs):
    """backward() recomputes the forward and returns d(loss)/d(input) of the middle blocks."""
    d = tiny_model_dirs["qwen2-untied"]
    blocks = load_middle(d)
    middle = LocalMiddle(blocks)
    sid = await middle.open_session(training=True)
    x = torch.randn(2, 10, 64)
    pos = torch.arange(10).expand(2, 10)
    y = await middle.forward(x, pos, sid)
    grad_out = torch.randn_like(y)
    grad_in = await middle.backward(grad_out, sid)

    xr = x.clone().requires_grad_(True)
    with torch.enable_grad():
        blocks.requires_grad_(False)
        yr = blocks(xr, pos)
        (yr * grad_out).sum().backward()
    assert torch.allclose(y, yr.detach(), atol=1e-6)
    assert torch.allclose(grad_in, xr.grad, atol=1e-6)
