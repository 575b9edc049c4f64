"""Attention of one decode step of many sessions, each over its own KV cache (ragged lengths).

Every session's query attends with one formula: scores by batched matmul over the first S slots
of its cache (S: its length rounded up to `BUCKET`, within the capacity), a mask per row (its own
length, window and key padding; the slots past its length are masked, so what they hold never
counts), softmax, matmul with the values. The formula runs one of two ways, with the same bits:
- **gathered:** sessions of one S (at least two, S at most `group_slots`) are copied into one
  tensor [layers, 2, R, KV, S, hd] once per step, every layer at once, and each layer attends
  for the whole group with one call of each op. Per session and layer, a call of SDPA cost some
  30 µs of op overhead whatever the cache held; at 64 sessions that, not the GEMMs, was most of
  a slab;
- **in place:** a lone session of its S, or a long cache (where the copy would cost more than the
  calls it saves), attends over views of its own cache.
A session's S depends on its own cache alone, and the batched matmul gives each matrix of a batch
the same bits whatever the batch and the strides — the start-up check of
`umbra/model/batch_decode.py` verifies that on the machine and turns gathering off where it does
not hold. So a session's output has the same bits alone or in any company, gathered or not."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from umbra.model.kvcache import KVCache
from umbra.model.layers import Attention

BUCKET = 16  # a session attends over its length rounded up to this many slots


def attention_slots(length: int, capacity: int) -> int:
    """The slots S a session whose new key goes to slot `length - 1` attends over."""
    return min(-(-length // BUCKET) * BUCKET, capacity)


def blocked_slots(starts: torch.Tensor, slots: int, window: int | None,
                  padding: list[tuple[int, int, torch.Tensor]]) -> torch.Tensor:
    """[R,1,1,slots] True where a row's query (at slot starts[r]) must not look: past itself,
    outside its window, or padding (`padding`: (first row, last row + 1, key_padding [B, start+1])
    of the sessions that have one). A row always sees its own slot."""
    key = torch.arange(slots, device=starts.device)[None]  # [1,S]
    blocked = key > starts[:, None]  # [R,S]
    if window is not None:
        blocked |= (starts[:, None] - key) >= window
    for a, b, kp in padding:
        blocked[a:b, : kp.shape[1]] |= ~kp.bool()
    if padding:
        blocked.scatter_(1, starts[:, None], False)
    return blocked[:, None, None]


def attend(attn: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
    """The formula: q [R,H,1,hd] over k, v [R,KV,S,hd] with `blocked` [R,1,1,S]; returns [R,H,1,hd]."""
    r = q.shape[0]
    qg = q.reshape(r, attn.num_kv_heads, -1, attn.head_dim)  # [R,KV,H/KV,hd]: head h reads kv head h // (H/KV)
    if qg.dtype != torch.float32:  # half types: scores and softmax in fp32, as SDPA's kernels do
        qg, k, v = qg.float(), k.float(), v.float()
    scores = torch.matmul(qg, k.transpose(-1, -2)).mul_(attn.head_dim ** -0.5)  # [R,KV,H/KV,S]
    scores.masked_fill_(blocked, float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), v).view(r, -1, 1, attn.head_dim).to(q.dtype)


@dataclass
class Group:
    """Sessions attending together in one step (gathered), or one session in place."""

    members: list[int]  # indices of the steps
    span: slice | None  # the members' rows of the slab, when they are one run (always, in place)
    blocked: dict[int | None, torch.Tensor]  # window -> [R,1,1,S]
    rows: torch.Tensor | None = None  # gathered: [R] the members' rows
    starts: torch.Tensor | None = None  # gathered: [R] each row's new slot
    index: torch.Tensor | None = None  # gathered: [R] 0..R-1
    kv: torch.Tensor | None = None  # gathered: [layers, 2, R, KV, S, hd], each layer's new slots written in


def plan_groups(caches: list[KVCache], starts: list[int], offsets: list[int], key_padding: list,
                windows: set[int | None], group_slots: int) -> list[Group]:
    """Who attends how in this step: sessions sharing an S of at most `group_slots` gathered
    (their caches copied now), every other session in place."""
    by_slots: dict[int, list[int]] = {}
    for j, (cache, start) in enumerate(zip(caches, starts)):
        by_slots.setdefault(attention_slots(start + 1, cache.capacity), []).append(j)
    groups = []
    for slots, members in by_slots.items():
        gather = 2 <= len(members) and slots <= group_slots
        for part in [members] if gather else [[j] for j in members]:
            rows = [r for j in part for r in range(offsets[j], offsets[j + 1])]
            dev = caches[part[0]].device
            starts_r = torch.tensor([starts[j] for j in part for _ in range(offsets[j], offsets[j + 1])], device=dev)
            padding, row = [], 0  # (first row, last row + 1, key padding) within the group
            for j in part:
                n = offsets[j + 1] - offsets[j]
                if key_padding[j] is not None:
                    padding.append((row, row + n, key_padding[j]))
                row += n
            span = slice(rows[0], rows[-1] + 1) if rows[-1] - rows[0] == len(rows) - 1 else None
            group = Group(part, span, {w: blocked_slots(starts_r, slots, w, padding) for w in windows})
            if gather:
                group.rows, group.starts = torch.tensor(rows, device=dev), starts_r
                group.index = torch.arange(len(rows), device=dev)
                group.kv = torch.cat([caches[j].prefix(slots) for j in part], 2)
            groups.append(group)
    return groups


def group_attention(attn: Attention, group: Group, caches: list[KVCache], starts: list[int], layer: int,
                    q: torch.Tensor, new_kv: torch.Tensor, window: int | None, out: torch.Tensor) -> None:
    """One layer's attention of a group, written to its rows of `out` [W,H,1,hd]: q [W,H,1,hd]
    and new_kv [2, W, KV, hd] of the whole slab. In place, the new slot goes to the cache now;
    gathered, into the group's copy (the caches get every layer's at once, after the last)."""
    span = group.span
    if group.kv is None:  # in place: the new slot goes to the cache now
        j = group.members[0]
        kv = caches[j].layer_prefix(layer, group.blocked[window].shape[-1])  # [2,B,KV,S,hd], views
        kv[:, :, :, starts[j]] = new_kv[:, span]
    else:
        kv = group.kv[layer]  # [2,R,KV,S,hd]
        new = new_kv[:, span] if span is not None else new_kv.index_select(1, group.rows)  # [2,R,KV,hd]
        kv[:, group.index, :, group.starts] = new.transpose(0, 1)  # each row's new slot
    qg = q[span] if span is not None else q.index_select(0, group.rows)
    y = attend(attn, qg, kv[0], kv[1], group.blocked[window])
    if span is not None:
        out[span] = y
    else:
        out.index_copy_(0, group.rows, y)
