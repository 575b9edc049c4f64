"""One decode step of many sessions through one BlockStack, as one batch (continuous batching).

Every session brings its own KV cache, positions and key-padding mask; rows of all sessions are
stacked into a slab of exactly `width` rows (zero rows pad the rest) and run together through the
norms, projections and MLP, while attention reads each session's own cache (ragged lengths, its
own mask): gathered with sessions of the same short attention length, or in place on its own
cache, with the same bits either way (umbra/model/ragged_attention.py). A slab has one
of a few fixed widths (`slab_widths`: the smallest, doubled up to the largest), so the GEMM
kernels see one of a few shapes whatever the company: a session's output is bit-identical in
fp32 (and in fp16/bf16) whether it runs alone or next to any other sessions, in any slot of the
slab — the row-invariance test in tests/model/test_batch_decode.py checks it. Whether a wider slab
gives a row the same bits as a narrower one depends on the BLAS kernels the machine picks for its
row count (a plain `Linear` on one row is a GEMV, whose sums differ in the last bits from a
GEMM's); `check_slab_shape` checks each width once, at start, and keeps only those that agree.
On the CPU (`slab_floor`) it also picks the smallest width to start from: the narrowest slab whose
bits every wider one shares, so a lone step pays for as few padding rows as the kernels allow (on
this AVX-512 EPYC: 2 rows in bf16, whose GEMM costs no more than the one-row GEMV; 4 in fp32) and
never gets other bits than it would beside other sessions. An accelerator starts at 16 (padding
is free there). `solo_widths` can still let a lone step run unpadded at width 1, at the price of
its bits (within the dtype's tolerance of the batched ones): off unless asked.

Steps carrying adapters are not batched here (BlockStack.forward runs them)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from umbra.errors import ValidationError
from umbra.model.kvcache import KVCache
from umbra.model.layers import Block
from umbra.model.ragged_attention import Group, group_attention, plan_groups
from umbra.model.rope import apply_rope, rope_cos_sin
from umbra.model.stack import BlockStack

GROUP_SLOTS = 256  # longest attention (in slots) of sessions gathered into one group; longer attend in place
CHECK_SESSIONS = 16  # sessions of the start-up check (fewer when the widest slab holds fewer)


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


def solo_widths(widths: Sequence[int], solo: bool) -> tuple[int, ...]:
    """The slab widths a service uses: the checked `widths` (ascending), led by 1 when `solo` (a lone
    one-row step then runs unpadded: its bits are the unbatched blocks', not the batched widths')."""
    return (1, *widths) if solo and widths[0] > 1 else tuple(widths)


def slab_floor(device: torch.device | str, asked: int | None) -> tuple[int, bool]:
    """Where a service's ladder of slab widths starts and whether the start-up check may raise it
    (`check_slab_shape`'s `smallest`): `asked` when set; else on the CPU from one row up, the check
    keeping the narrowest slab whose bits every wider one shares (each padding row costs a CPU the
    arithmetic of a real one); on an accelerator, whose decode step costs the same at 1 row or 16, 16."""
    if asked is not None:
        return asked, False
    return (1, True) if torch.device(device).type == "cpu" else (16, False)


@dataclass(frozen=True)
class SlabShape:
    """What the start-up check kept: the slab widths (ascending) and the longest attention (slots)
    of sessions gathered into a group (umbra/model/ragged_attention.py; 0: all attend in place)."""

    widths: tuple[int, ...]
    group_slots: int


@torch.no_grad()
def check_slab_shape(stack: BlockStack, widths: list[int], dtype: torch.dtype, group_slots: int = GROUP_SLOTS,
                     seed: int = 0, smallest: bool = False) -> SlabShape:
    """The widths (ascending) in which a session's decode step gets the same bits alone and in any
    company. `n` random sessions (ragged caches, prefilled once and copied per run) run each alone in
    a slab of the floor width, then the first k of them together in one slab of each width (k the
    width or n): a width is kept if every row equals the same session alone. The kernels are chosen
    by shape, not by values, so one check per width and machine stands for every step. The floor is
    `widths[0]`, or with `smallest` the smallest of `widths` whose kept widths reach the widest
    (else the smallest that agrees with itself): on the CPU the cheapest lone step whose bits every
    batch shares. Sessions alone attend in place and together gathered, so the check covers both
    ways; if no floor holds, gathering does not give the in-place bits on this machine: it is
    turned off (`group_slots` 0) and the check runs again."""
    g = torch.Generator().manual_seed(seed)
    c, dev = stack.spec.hidden_size, stack.inv_freq.device
    sessions = []
    for i in range(min(max(widths[0], CHECK_SESSIONS), widths[-1])):
        cache, t = stack.new_cache(dtype), 2 + i % 5
        stack(torch.randn(1, t, c, generator=g).to(dev, dtype), torch.arange(t, device=dev)[None], cache)
        sessions.append((cache, torch.randn(1, 1, c, generator=g).to(dev, dtype), torch.tensor([[t]], device=dev)))

    def outputs(width: int, members: list[int], slots: int) -> list[torch.Tensor]:
        steps = [DecodeStep(sessions[i][1], sessions[i][2], copy.deepcopy(sessions[i][0])) for i in members]
        return decode_slab(stack, steps, width, slots)

    for slots in dict.fromkeys([group_slots, 0]):
        together = {w: outputs(w, list(range(min(w, len(sessions)))), slots) for w in widths}
        valid: list[tuple[int, ...]] = []
        for floor in widths if smallest else widths[:1]:
            alone = [outputs(floor, [i], slots)[0] for i in range(len(sessions))]
            kept = tuple(w for w in widths if w >= floor and all(map(torch.equal, together[w], alone)))
            if kept and kept[0] == floor:
                if kept[-1] == widths[-1]:
                    return SlabShape(kept, slots)
                valid.append(kept)
        if valid:
            return SlabShape(valid[0], slots)
    raise ValidationError("a slab of one session and of several give rows different bits on this machine")


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
def decode_slab(stack: BlockStack, steps: list[DecodeStep], width: int,
                group_slots: int = GROUP_SLOTS) -> list[torch.Tensor]:
    """Run one decode step of every session in `steps` (their rows together <= width); returns
    each session's output [B,1,C] and advances each cache by one slot. Sessions sharing an
    attention length of at most `group_slots` attend gathered, the others in place."""
    rows = [s.rows for s in steps]
    pad = width - sum(rows)
    if pad < 0:
        raise ValidationError(f"{sum(rows)} rows do not fit a slab of {width}")
    c, dtype = steps[0].x.shape[-1], steps[0].cache.dtype
    # one op per tensor, not one per session: on a busy server every op is a GIL hand-off
    dev = steps[0].x.device  # the blocks' (the caller moved each step there)
    x = torch.cat([s.x.to(dtype) for s in steps] + [torch.zeros(pad, 1, c, dtype=dtype, device=dev)])  # [W,1,C]
    positions = torch.cat([s.positions for s in steps] + [torch.zeros(pad, 1, dtype=torch.int64, device=dev)])
    starts = [s.cache.length for s in steps]
    for s, start in zip(steps, starts):
        s.cache.reserve(s.rows, start + 1)
    offsets = list(itertools.accumulate(rows, initial=0))
    caches = [s.cache for s in steps]
    groups = plan_groups(caches, starts, offsets, [s.key_padding for s in steps],
                         {b.window for b in stack.layers}, group_slots)
    cos, sin = rope_cos_sin(stack.inv_freq, positions, stack.spec.rope_attention_scaling, dtype)
    new_kv = x.new_empty(len(stack.layers), 2, width, stack.spec.num_kv_heads, stack.spec.head_dim)
    for i, block in enumerate(stack.layers):
        x = _block(block, x, cos, sin, groups, caches, starts, new_kv, i)
    for group in groups:  # gathered: every layer's new slot, one write per session
        if group.kv is not None:
            for j in group.members:
                caches[j].put_slot(starts[j], new_kv[:, :, offsets[j]: offsets[j + 1]])
    for s, start in zip(steps, starts):
        s.cache.length = start + 1
    return list(x.split(rows + [pad])[:-1])


def _block(block: Block, x, cos, sin, groups: list[Group], caches: list[KVCache], starts: list[int],
           new_kv: torch.Tensor, layer: int) -> torch.Tensor:
    """One block over the slab x [W,1,C]; each row's new key and value go to new_kv[layer]."""
    attn = block.self_attn
    h = block.input_layernorm(x)
    w = x.shape[0]
    q = attn.q_proj(h).view(w, 1, attn.num_heads, attn.head_dim).transpose(1, 2)  # [W,H,1,hd]
    k = attn.k_proj(h).view(w, 1, attn.num_kv_heads, attn.head_dim).transpose(1, 2)  # [W,KV,1,hd]
    v = attn.v_proj(h).view(w, 1, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    kv = new_kv[layer]  # [2,W,KV,hd]
    kv[0], kv[1] = k[:, :, 0], v[:, :, 0]
    y = torch.zeros_like(q)  # the padding rows attend to nothing
    for group in groups:
        group_attention(attn, group, caches, starts, layer, q, kv, block.window, y)
    x = x + attn.o_proj(y.transpose(1, 2).reshape(w, 1, -1))
    return x + block.mlp(block.post_attention_layernorm(x))
