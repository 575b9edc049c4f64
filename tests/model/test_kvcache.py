"""KVCache: one tensor for every layer's keys and values; growth keeps the prefix, the budget
figure is known before the allocation, one slot of every layer is written at once."""

from __future__ import annotations

import pytest
import torch

from umbra.errors import ValidationError
from umbra.model.kvcache import KVCache


def _cache(layers=3):
    return KVCache(layers, num_kv_heads=2, head_dim=4, dtype=torch.float32)


def test_growth_keeps_the_filled_prefix_and_bytes_after_predicts_the_allocation():
    cache = _cache()
    predicted = cache.bytes_after(1, 5)
    cache.reserve(1, 5)
    assert cache.nbytes == predicted and cache.capacity == 128
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    kk, vv = cache.write(1, 0, k, v)
    assert torch.equal(kk, k) and torch.equal(vv, v)
    cache.length = 5
    predicted = cache.bytes_after(1, 200)
    cache.reserve(1, 200)
    assert cache.nbytes == predicted and cache.capacity == 256
    assert torch.equal(cache.prefix(5)[1, 0], k) and torch.equal(cache.prefix(5)[1, 1], v)
    assert cache.bytes_after(1, 100) == cache.nbytes  # fits: nothing more


def test_max_capacity_caps_growth_and_a_new_batch_size_needs_an_empty_cache():
    cache = _cache()
    cache.max_capacity = 64
    cache.reserve(2, 10)
    assert cache.capacity == 64 and cache.batch == 2
    cache.length = 3
    with pytest.raises(ValidationError, match="batch size changed"):
        cache.reserve(1, 10)
    cache.truncate(0)
    cache.reserve(1, 10)
    assert cache.batch == 1


def test_put_slot_writes_one_slot_of_every_layer():
    cache = _cache()
    cache.reserve(1, 8)
    kv = torch.randn(3, 2, 1, 2, 4)  # [layers, 2, B, KV, hd]
    cache.put_slot(6, kv)
    assert torch.equal(cache.prefix(7)[:, :, :, :, 6], kv)
    assert not cache.prefix(6).any()
    with pytest.raises(ValidationError, match="no prefix"):
        cache.prefix(cache.capacity + 1)
