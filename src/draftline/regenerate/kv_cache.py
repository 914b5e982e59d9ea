"""A transformers KV cache that grows in place.

transformers' DynamicCache appends each decode step with torch.cat, copying the whole cache
every step: for batched generation on a CPU (64 rows, ~200 positions) that copy took about
a third of each step. This cache keeps a buffer per layer with spare capacity (doubling when
full) and returns views of its filled part, so a step writes only the new positions.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


class GrowingLayer(DynamicLayer):
    MIN_CAPACITY = 64

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._k_buf = self._v_buf = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()  # after a crop this is shorter than what the buffer holds
        m = n + key_states.shape[-2]
        buf = self._k_buf
        if buf is None or m > buf.shape[-2] or buf.shape[:2] != key_states.shape[:2]:
            cap = max(m, 2 * (buf.shape[-2] if buf is not None else 0), self.MIN_CAPACITY)
            k = key_states.new_empty((*key_states.shape[:2], cap, key_states.shape[-1]))
            v = value_states.new_empty((*value_states.shape[:2], cap, value_states.shape[-1]))
            if n:
                k[..., :n, :] = self.keys
                v[..., :n, :] = self.values
            self._k_buf, self._v_buf = k, v
        self._k_buf[..., n:m, :] = key_states
        self._v_buf[..., n:m, :] = value_states
        self.keys, self.values = self._k_buf[..., :m, :], self._v_buf[..., :m, :]
        return self.keys, self.values


def growing_cache(config) -> DynamicCache:
    """A DynamicCache for `config` whose full-attention layers grow in place."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
