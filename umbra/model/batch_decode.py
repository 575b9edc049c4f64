"""One decode step of many sessions through one BlockStack, as one batch (continuous batching).

Every session brings its own KV cache, positions and key-padding mask; rows of all sessions are
stacked into a slab of exactly `width` rows (zero rows pad the rest) and run together through the
norms, projections and MLP, while attention runs per session over its own cache (ragged lengths,
its own mask). A slab has one of a few fixed widths (`slab_widths`: the smallest, doubled up to
the largest), so the GEMM kernels see one of a few shapes whatever the company: a session's
output is bit-identical in fp32 (and in fp16/bf16) whether it runs alone or next to any other
sessions, in any slot of the slab — the row-invariance test in tests/model/test_batch_decode.py
checks it. (A plain `Linear` on [1,C] is a GEMV whose sums differ in the last bits from a GEMM's,
which is why a single step is padded too.) Whether a wider slab gives a row the same bits as the
smallest depends on the BLAS kernels the machine picks for its row count; `row_invariant_widths`
checks each width once, at start, and keeps only those that do (with MKL on AVX2, 16 rows and up
agree, fewer do not).

Steps carrying adapters are not batched here (BlockStack.forward runs them)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from umbra.errors import ValidationError
from umbra.model.kvcache import KVCache
from umbra.model.layers import Block, attention_mask
from umbra.model.rope import apply_rope, rope_cos_sin
from umbra.model.stack import BlockStack


@dataclass
class DecodeStep:
    """One session's step: x [B,1,C], positions [B,1], key_padding [B, cached+1] or None."""

    x: torch.Tensor
    positions: torch.Tensor
    cache: KVCache
    key_padding: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return self.x.shape[0]


def slab_widths(smallest: int, largest: int) -> list[int]:
    """The slab widths to try: `smallest`, doubled while it stays below `largest`, and `largest`."""
    if smallest < 1 or largest < 1:
        raise ValidationError(f"slab widths must be positive, got {smallest} and {largest}")
    smallest = min(smallest, largest)
    widths = [smallest]
    while widths[-1] * 2 < largest:
        widths.append(widths[-1] * 2)
    return widths if widths[-1] == largest else widths + [largest]


def slab_width(rows: int, widths: Sequence[int]) -> int:
    """The smallest of `widths` (ascending) that holds `rows`."""
    for w in widths:
        if rows <= w:
            return w
    raise ValidationError(f"a batched decode slab holds at most {widths[-1]} rows, got {rows}")


@torch.no_grad()
def row_invariant_widths(stack: BlockStack, widths: list[int], dtype: torch.dtype, seed: int = 0) -> list[int]:
    """The widths (ascending; the first always kept) whose slabs give every row the same bits as a
    slab of the first width: one step of `widths[0]` random sessions (ragged caches, prefilled
    once and copied per width) is run at each width and compared. The kernels are chosen by
    shape, not by values, so one check per width and machine stands for every step."""
    if len(widths) == 1:  # nothing to compare: no start-up work
        return list(widths)
    g = torch.Generator().manual_seed(seed)
    c = stack.spec.hidden_size
    sessions = []
    for i in range(widths[0]):
        cache, t = stack.new_cache(dtype), 2 + i % 5
        stack(torch.randn(1, t, c, generator=g).to(dtype), torch.arange(t)[None], cache)
        sessions.append((cache, torch.randn(1, 1, c, generator=g).to(dtype), torch.tensor([[t]])))

    def outputs(width: int) -> list[torch.Tensor]:
        steps = [DecodeStep(x, pos, copy.deepcopy(cache)) for cache, x, pos in sessions]
        return decode_slab(stack, steps, width)

    base = outputs(widths[0])
    return [widths[0]] + [w for w in widths[1:] if all(map(torch.equal, outputs(w), base))]


def slabs(steps: list[DecodeStep], width: int) -> list[list[int]]:
    """Indices of `steps` grouped, in order, so that each group's rows fit in one slab."""
    groups: list[list[int]] = [[]]
    used = 0
    for i, s in enumerate(steps):
        if s.rows > width:
            raise ValidationError(f"a batched decode step holds at most {width} rows, got {s.rows}")
        if used + s.rows > width:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += s.rows
    return [g for g in groups if g]


@torch.no_grad()
def decode_slab(stack: BlockStack, steps: list[DecodeStep], width: int) -> list[torch.Tensor]:
    """Run one decode step of every session in `steps` (their rows together <= width); returns
    each session's output [B,1,C] and advances each cache by one slot."""
    rows = [s.rows for s in steps]
    pad = width - sum(rows)
    if pad < 0:
        raise ValidationError(f"{sum(rows)} rows do not fit a slab of {width}")
    c, dtype = steps[0].x.shape[-1], steps[0].cache.dtype
    # one op per tensor, not one per session: on a busy server every op is a GIL hand-off
    x = torch.cat([s.x.to(dtype) for s in steps] + [torch.zeros(pad, 1, c, dtype=dtype)])  # [W,1,C]
    positions = torch.cat([s.positions for s in steps] + [torch.zeros(pad, 1, dtype=torch.int64)])  # [W,1]
    starts = [s.cache.length for s in steps]
    for s, start in zip(steps, starts):
        s.cache.reserve(s.rows, start + 1)
    cos, sin = rope_cos_sin(stack.inv_freq, positions, stack.spec.rope_attention_scaling, dtype)
    masks: list[dict] = [{} for _ in steps]
    for i, block in enumerate(stack.layers):
        x = _block(block, x, cos, sin, steps, starts, rows + [pad], masks, i)
    for s, start in zip(steps, starts):
        s.cache.length = start + 1
    return list(x.split(rows + [pad])[:-1])


def _block(block: Block, x, cos, sin, steps, starts, rows: list[int], masks, layer: int) -> torch.Tensor:
    """One block over the slab; `rows`: each step's rows, then the padding's."""
    attn = block.self_attn
    h = block.input_layernorm(x)
    w = x.shape[0]
    q = attn.q_proj(h).view(w, 1, attn.num_heads, attn.head_dim).transpose(1, 2)  # [W,H,1,hd]
    k = attn.k_proj(h).view(w, 1, attn.num_kv_heads, attn.head_dim).transpose(1, 2)  # [W,KV,1,hd]
    v = attn.v_proj(h).view(w, 1, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    qs, ks, vs = q.split(rows), k.split(rows), v.split(rows)  # per step, views
    ys = []
    for j, (s, start) in enumerate(zip(steps, starts)):
        kk, vv = s.cache.write(layer, start, ks[j], vs[j])  # [B,KV,S,hd], this session's own
        if block.window not in masks[j]:
            masks[j][block.window] = attention_mask(start, 1, block.window, s.key_padding, x.device)
        ys.append(F.scaled_dot_product_attention(qs[j], kk, vv, attn_mask=masks[j][block.window],
                                                 enable_gqa=attn.gqa))
    y = torch.cat(ys + [torch.zeros_like(qs[-1])])  # the padding rows attend to nothing
    x = x + attn.o_proj(y.transpose(1, 2).reshape(w, 1, -1))
    return x + block.mlp(block.post_attention_layernorm(x))
