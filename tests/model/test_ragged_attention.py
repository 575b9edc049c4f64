"""Attention in a decode slab, gathered or in place: a session gets the same bits alone or in any
company and either way, close to the plain path (SDPA) up to rounding; what a cache holds past
its length never counts; who is gathered."""

from __future__ import annotations

import copy

import pytest
import torch

from tiny_models import FAMILIES
from umbra.model.batch_decode import DecodeStep, decode_slab
from umbra.model.loader import load_middle
from umbra.model.ragged_attention import BUCKET, attention_slots, plan_groups

GROUP = 32  # sessions attending over up to 32 slots are gathered, longer ones attend in place


def _sessions(middle, lengths, seed: int, padded: bool):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, t in enumerate(lengths):
        cache = middle.stack.new_cache()
        kp = None
        if padded:
            kp = torch.ones(1, t, dtype=torch.bool)
            kp[0, : i % 4] = False
        middle(torch.randn(1, t, middle.spec.hidden_size, generator=g), torch.arange(t)[None], cache, kp)
        out.append([cache, kp])
    return out


def _steps(middle, sessions, seed: int):
    g = torch.Generator().manual_seed(seed)
    steps = []
    for session in sessions:
        cache, kp = session
        if kp is not None:
            kp = session[1] = torch.cat([kp, torch.ones(1, 1, dtype=torch.bool)], 1)
        x = torch.randn(1, 1, middle.spec.hidden_size, generator=g)
        steps.append(DecodeStep(x, torch.tensor([[cache.length]]), cache, kp))
    return steps


def test_attended_slots_round_up_to_the_bucket_within_the_capacity():
    assert attention_slots(1, 128) == BUCKET and attention_slots(BUCKET, 128) == BUCKET
    assert attention_slots(BUCKET + 1, 128) == 2 * BUCKET
    assert attention_slots(120, 121) == 121  # never past the cache


def test_sessions_sharing_a_short_attention_are_gathered_and_the_rest_attend_in_place(tiny_model_dirs):
    middle = load_middle(tiny_model_dirs["qwen2-tied"])
    lengths = [3, 9, 20, 40, 41]  # attend over 16, 16, 32, 48, 48 slots
    caches = [cache for cache, _ in _sessions(middle, lengths, 0, padded=False)]
    for cache in caches:
        cache.reserve(1, cache.length + 1)
    groups = plan_groups(caches, lengths, list(range(6)), [None] * 5, {None}, GROUP)
    gathered = sorted(g.members for g in groups if g.kv is not None)
    in_place = sorted(g.members for g in groups if g.kv is None)
    assert gathered == [[0, 1]] and in_place == [[2], [3], [4]]  # alone at 32; past GROUP at 48
    group = next(g for g in groups if g.kv is not None)
    assert group.kv.shape == (len(middle.stack.layers), 2, 2, middle.spec.num_kv_heads, 16, middle.spec.head_dim)
    assert torch.equal(group.kv[:, :, 1, :, :9], caches[1].prefix(9)[:, :, 0])


@pytest.mark.parametrize("family", FAMILIES)
def test_a_session_has_the_same_bits_alone_gathered_or_in_place(family, tiny_model_dirs):
    """Sessions on both sides of the group limit (several lengths per bucket, several buckets),
    three steps each: alone in a slab of their own (in place) vs all together in reversed order
    (gathered up to the limit) vs all together never gathered; and close to the plain path."""
    middle = load_middle(tiny_model_dirs[family])
    lengths = [3, 9, 14, 20, 31, 33, 47, 60]  # rounded: 16, 16, 16, 32, 32 | 48, 48, 64 (in place)
    padded = family in ("llama", "qwen2-sliding")
    alone_s, together_s, in_place_s, plain_s = (_sessions(middle, lengths, 0, padded) for _ in range(4))
    for step in range(3):
        alone = [decode_slab(middle.stack, [s], 16, GROUP)[0] for s in _steps(middle, alone_s, 10 + step)]
        together = decode_slab(middle.stack, _steps(middle, together_s, 10 + step)[::-1], 16, GROUP)[::-1]
        in_place = decode_slab(middle.stack, _steps(middle, in_place_s, 10 + step), 16, 0)
        for i, (a, b, c) in enumerate(zip(alone, together, in_place)):
            assert torch.equal(a, b) and torch.equal(a, c), (family, step, i)
        # the plain path (SDPA over the cache, a GEMV for one row) agrees up to rounding
        for (cache, _), s, want in zip(plain_s, _steps(middle, plain_s, 10 + step), alone):
            assert (middle(s.x, s.positions, cache, s.key_padding) - want).abs().max() <= 1e-5


def test_sessions_of_several_rows_with_their_own_padding_alone_gathered_or_in_place(tiny_model_dirs):
    """Two-row sessions (each row its own key padding): the same bits every way."""
    middle = load_middle(tiny_model_dirs["llama"])
    g = torch.Generator().manual_seed(4)
    c = middle.spec.hidden_size

    def sessions():
        out = []
        for t in (6, 7, 21):  # 16, 16 (gathered together), 32 (in place)
            cache = middle.stack.new_cache()
            kp = torch.ones(2, t, dtype=torch.bool)
            kp[1, :3] = False
            middle(torch.randn(2, t, c, generator=torch.Generator().manual_seed(t)), torch.arange(t).expand(2, t),
                   cache, kp)
            out.append((cache, torch.cat([kp, torch.ones(2, 1, dtype=torch.bool)], 1)))
        return out

    xs = [torch.randn(2, 1, c, generator=g) for _ in range(3)]

    def run(slab_of, group_slots):
        steps = [DecodeStep(x, torch.full((2, 1), cache.length), cache, kp) for x, (cache, kp) in zip(xs, sessions())]
        return [y for part in slab_of(steps) for y in decode_slab(middle.stack, part, 16, group_slots)]

    alone = run(lambda steps: [[s] for s in steps], GROUP)
    assert all(map(torch.equal, alone, run(lambda steps: [steps], GROUP)))
    assert all(map(torch.equal, alone, run(lambda steps: [steps], 0)))


def test_what_a_cache_holds_past_its_length_never_counts(tiny_model_dirs):
    """Stale slots (as after a rollback or prefix reuse) filled with large values: same bits."""
    middle = load_middle(tiny_model_dirs["qwen2-tied"])
    sessions = _sessions(middle, [5, 12, 21], 1, padded=False)
    poisoned = copy.deepcopy(sessions)
    g = torch.Generator().manual_seed(2)
    for cache, _ in poisoned:
        tail = cache.prefix(cache.capacity)[:, :, :, :, cache.length:]
        tail.copy_(1e4 * torch.randn(tail.shape, generator=g))
    clean = decode_slab(middle.stack, _steps(middle, sessions, 3), 16, GROUP)
    dirty = decode_slab(middle.stack, _steps(middle, poisoned, 3), 16, GROUP)
    assert all(map(torch.equal, clean, dirty))
    assert all(bool(torch.isfinite(y).all()) for y in dirty)
