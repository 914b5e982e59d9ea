"""Rolling back a hybrid target's cache after a rejected draft.

Speculative decoding feeds the target a block and keeps only its accepted prefix. Attention
layers keep past keys per position, so dropping the rejected positions is a crop. A
Gated-DeltaNet linear-attention layer (Qwen3.5/3.6) keeps one recurrent state and a short
convolution window instead, both already advanced past the rejected tokens, and nothing in
them can be cut. So before a verify pass the decoders take a snapshot of those states
(a few KB to MB per layer, independent of the context length), and after a rejection
restore it and replay the accepted tokens: one more target pass over at most a block of
tokens. The other way, recomputing the states from the last accepted position, means
re-reading the whole context; bench/bench_recurrent.py measures both per rejected step.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import LinearAttentionCacheLayerMixin


def is_recurrent(layer) -> bool:
    return isinstance(layer, LinearAttentionCacheLayerMixin)


def has_recurrent(cache) -> bool:
    return any(is_recurrent(layer) for layer in getattr(cache, "layers", []))


class Snapshot:
    """Copies of every linear-attention layer's conv and recurrent states."""

    def __init__(self, cache):
        self.states = [(layer, {i: _clone(s) for i, s in layer.conv_states.items()},
                        {i: _clone(s) for i, s in layer.recurrent_states.items()})
                       for layer in cache.layers if is_recurrent(layer)]

    def restore(self) -> None:
        for layer, conv, rec in self.states:
            for i, s in conv.items():
                _put(layer.conv_states, i, s)
            for i, s in rec.items():
                _put(layer.recurrent_states, i, s)

    def nbytes(self) -> int:
        return sum(s.numel() * s.element_size() for _, conv, rec in self.states
                   for s in [*conv.values(), *rec.values()] if s is not None)


def _clone(s: torch.Tensor | None) -> torch.Tensor | None:
    return None if s is None else s.clone()


def _put(states: dict, i: int, saved: torch.Tensor | None) -> None:
    # In place where the live tensor has the saved shape (transformers marks these buffers
    # static for CUDA graphs); otherwise (batch expanded by a tree verify) replaced.
    live = states.get(i)
    if saved is None or live is None or live.shape != saved.shape:
        states[i] = None if saved is None else saved.clone()
    else:
        live.copy_(saved)


def _map_rows(cache, fn) -> None:
    """Apply `fn` to every per-row tensor of the cache: linear layers' states, other layers'
    keys and values (batch first in all of them)."""
    for layer in cache.layers:
        if is_recurrent(layer):
            for states in (layer.conv_states, layer.recurrent_states):
                for i, s in states.items():
                    if s is not None:
                        states[i] = fn(s)
        elif getattr(layer, "keys", None) is not None and layer.keys.numel():
            layer.keys, layer.values = fn(layer.keys), fn(layer.values)


def expand(cache, rows: int) -> None:
    """Repeat a one-row cache `rows` times along the batch (a tree verified as `rows` paths)."""
    _map_rows(cache, lambda s: s.repeat(rows, *[1] * (s.dim() - 1)))


def select(cache, row: int) -> None:
    """Keep batch row `row` of every layer (the tree path that was accepted)."""
    _map_rows(cache, lambda s: s[row : row + 1].clone())
