"""Per-document gradients of the shared parameters through the split model (NOESIS stage 1).

One chunk of P blocks (one per document, padding rows weighted 0) goes through the split once:

    h = encoder(ids)                         client, batched, no autograd
    y = await middle.forward(h)              cloud: never sees ids, labels or the parameters
    g_dec_i, g_y_i = ∇ loss_i                client: per document, torch.func.vmap(grad(...)) over the
                                             decoder (only g_y when nothing trains on the decoder:
                                             rows are independent, one batched backward gives it)
    g_h = await middle.backward(g_y)         cloud: the batched backward; row i is document i's
    g_enc_i = ∇_enc <encoder(ids_i), g_h_i>  client: vmap(grad(...)) over the encoder

so each g_i depends on document i alone. `batch_grads` is the non-private step: one ordinary
backward of Σ_i w_i·loss_i. loss_i is the mean next-token loss of document i's block (the
positions after a soft prompt; padding excluded)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from umbra.middle.protocol import Middle
from umbra.model.device import device_of
from umbra.tuning.doc_blocks import Blocks
from umbra.tuning.shared_params import SharedParams


def doc_losses(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss of each row: logits [P,T,V] (the block's positions), ids/mask [P,T] -> [P]."""
    nll = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), ids[:, 1:], reduction="none")  # [P,T-1]
    m = (mask[:, 1:] & mask[:, :-1]).to(nll.dtype)
    return (nll * m).sum(1) / m.sum(1).clamp(min=1)


def _positions(p: int, t: int, device: torch.device) -> torch.Tensor:
    return torch.arange(t, dtype=torch.int64, device=device).expand(p, t)


async def per_sample_grads(shared: SharedParams, middle: Middle, session: str,
                           blocks: Blocks) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """({name: [P, ...]} per-document gradients, losses [P]) of one chunk."""
    holder, n = shared.holder, shared.prompt_length
    params = shared.parameters()
    enc_names, dec_names = shared.encoder_side(), shared.decoder_side()
    enc = {k: params[k].detach() for k in enc_names}
    dec = {k: params[k].detach() for k in dec_names}
    blocks = blocks.to(device_of(holder))
    p, t = blocks.ids.shape
    pos = _positions(p, n + t, blocks.ids.device)
    with torch.no_grad():
        h = functional_call(holder, enc, ("encoder", blocks.ids, pos))  # [P,n+T,C]
    y = await middle.forward(h, pos, session)  # [P,n+T,C]

    grads: dict[str, torch.Tensor] = {}
    if dec:
        def dec_loss(dparams, y_i, ids_i, mask_i):
            logits = functional_call(holder, dparams, ("decoder", y_i[None], pos[:1]))[:, n:]
            loss = doc_losses(logits, ids_i[None], mask_i[None])[0]
            return loss, loss.detach()

        with sdpa_kernel(SDPBackend.MATH):  # composite attention: vmap has batching rules for it
            (g_dec, g_y), losses = vmap(grad(dec_loss, argnums=(0, 1), has_aux=True), in_dims=(None, 0, 0, 0))(
                dec, y, blocks.ids, blocks.mask)
        grads.update(g_dec)
    else:
        y = y.detach().requires_grad_(True)
        with torch.enable_grad():
            rows = doc_losses(holder("decoder", y, pos)[:, n:], blocks.ids, blocks.mask)
            (g_y,) = torch.autograd.grad(rows.sum(), [y])  # rows independent: g_y[i] = ∇_y loss_i
        losses = rows.detach()

    if enc:
        g_h = await middle.backward(g_y.detach(), session)  # [P,n+T,C]

        def enc_dot(eparams, ids_i, g_i):
            return (functional_call(holder, eparams, ("encoder", ids_i[None], pos[:1]))[0] * g_i).sum()

        with sdpa_kernel(SDPBackend.MATH):
            grads.update(vmap(grad(enc_dot), in_dims=(None, 0, 0))(enc, blocks.ids, g_h))
    return {k: grads[k] for k in shared.names}, losses


async def batch_grads(shared: SharedParams, middle: Middle, session: str,
                      blocks: Blocks) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """({name: gradient of Σ_i w_i·loss_i}, losses [P]): the non-private step's one backward."""
    holder, n = shared.holder, shared.prompt_length
    params = shared.parameters()
    enc_names, dec_names = shared.encoder_side(), shared.decoder_side()
    blocks = blocks.to(device_of(holder))
    p, t = blocks.ids.shape
    pos = _positions(p, n + t, blocks.ids.device)
    with torch.enable_grad():
        h = holder("encoder", blocks.ids, pos)
        y = await middle.forward(h.detach(), pos, session)
        y = y.detach().requires_grad_(bool(enc_names))
        rows = doc_losses(holder("decoder", y, pos)[:, n:], blocks.ids, blocks.mask)
        total = (rows * blocks.weight).sum()
        wrt = [params[k] for k in dec_names] + ([y] if enc_names else [])
        got = torch.autograd.grad(total, wrt) if wrt else ()
        grads = dict(zip(dec_names, got))
        if enc_names:
            g_h = await middle.backward(got[-1], session)
            grads.update(zip(enc_names, torch.autograd.grad(h, [params[k] for k in enc_names], g_h)))
    return {k: grads[k] for k in shared.names}, rows.detach()
