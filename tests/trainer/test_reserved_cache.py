"""The eager engine's reserved KV cache (``trainer.engines.prefill.ReservedLayer``):
a decode step writes its keys and values into room reserved after the prompt instead
of concatenating the whole cache, and reads back what a dynamic layer would."""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from trainer.engines.prefill import ReservedLayer, reserve


def kv(b=3, n=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 2, n, 4, generator=g), torch.randn(b, 2, n, 4, generator=g)


def test_it_reads_back_what_a_dynamic_layer_does_without_reallocating():
    k, v = kv()
    dyn = DynamicLayer()
    dyn.update(k, v)
    res = ReservedLayer(k, v, capacity=8)
    buffer = res._k.data_ptr()
    for t in range(3):  # three decode steps fit in the room reserved
        nk, nv = kv(n=1, seed=t + 1)
        a, b = dyn.update(nk, nv), res.update(nk, nv)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert res._k.data_ptr() == buffer  # written in place
    assert res.get_seq_length() == dyn.get_seq_length() == 8


def test_dropping_rows_and_running_out_of_room_keep_the_contents():
    k, v = kv()
    dyn, res = DynamicLayer(), ReservedLayer(k, v, capacity=6)
    dyn.update(k, v)
    keep = torch.tensor([0, 2])
    dyn.batch_select_indices(keep)
    res.batch_select_indices(keep)
    for t in range(4):  # past the 6 reserved: the buffer grows
        nk, nv = kv(b=2, n=1, seed=10 + t)
        a, b = dyn.update(nk, nv), res.update(nk, nv)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert res.keys.shape == (2, 2, 9, 4)


def test_reserve_swaps_the_dynamic_layers_of_a_cache():
    cache = DynamicCache()
    k, v = kv()
    cache.update(k, v, 0)
    cache.update(k + 1, v + 1, 1)
    reserve(cache, 16)
    assert all(isinstance(layer, ReservedLayer) for layer in cache.layers)
    assert cache.get_seq_length() == 5
    keys, _ = cache.update(*kv(n=1, seed=3), 1)
    assert torch.equal(keys[:, :, :5], k + 1) and keys.shape[-2] == 6
