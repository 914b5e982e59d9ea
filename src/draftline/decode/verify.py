"""What every decoder shares: one target pass, the greedy choice read on demand, cache
trimming, stop tokens, and the result type.

Accounting follows z-lab's `dflash_generate`: the first token comes from the prefill; each
verify step then produces `accepted + 1` tokens (cut at a stop token or at the length
limit) and that count is one acceptance length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from .recurrent import is_recurrent
from .skinny import head_logits


@dataclass
class Decoded:
    tokens: list[int]  # generated tokens (prompt excluded)
    acceptance_lengths: list[int]
    decode_seconds: float  # after the prefill, as z-lab times it


def keep_cache(cache: DynamicCache, length: int) -> None:
    """Drop cached positions >= length (the rejected part of the block) from every layer
    that keeps positions. Linear-attention layers keep a state, not positions: the decoders
    restore theirs from a snapshot instead (recurrent.py)."""
    for layer in cache.layers:
        if is_recurrent(layer):
            continue
        extra = layer.get_seq_length() - length
        if extra > 0:
            layer.crop(-extra)  # transformers 5 takes the number of tokens to remove, negated


def new_cache(config) -> DynamicCache:
    """A cache whose sliding-window layers (a drafter's sliding_attention, a target's) record
    enough past to be cropped back after a rejected block, as z-lab's dflash_generate sets
    them up. Linear-attention layers are left as they are: their rollback is a snapshot."""
    cache = DynamicCache(config=config)
    for layer in cache.layers:
        if not is_recurrent(layer) and hasattr(layer, "activate_past_recording"):
            layer.activate_past_recording()
    return cache


def replay(target, cache, snapshot, accepted: list[int], start: int) -> None:
    """Put a hybrid target's cache where it stands after `accepted` (the block's first tokens,
    from position `start`): linear-attention states back to the snapshot taken before the
    verify pass, attention layers cropped to `start`, then the accepted tokens run again."""
    snapshot.restore()
    keep_cache(cache, start)
    dev = target.device
    target.base_model(torch.tensor([accepted], device=dev), cache=cache, use_cache=True,
                      position_ids=torch.arange(start, start + len(accepted), device=dev)[None])


class LazyArgmax:
    """The target's greedy choice after each verify row, running the LM head only on the
    rows asked for. Greedy verification reads rows up to the first rejection, about 1.3 of a
    block's 4 at CPU acceptance rates, and on a CPU the head over 4 rows costs twice one
    row (skinny fp32 GEMMs), so this takes ~5 ms off every step (bench/RESULTS.md). One row
    at a time, as `plain` decodes: both round the same state alike."""

    def __init__(self, head, hidden: torch.Tensor):
        self.weight, self.hidden, self.done = head.weight, hidden, {}

    def __getitem__(self, i: int) -> int:
        if i not in self.done:
            self.done[i] = int(head_logits(self.weight, self.hidden[i : i + 1]).argmax(-1))
        return self.done[i]


def verify_greedy(target, ids: torch.Tensor, **kw):
    """One target pass over the verify rows without the LM head: (lazy argmax, outputs)."""
    out = target.base_model(ids, use_cache=True, **kw)
    return LazyArgmax(target.get_output_embeddings(), out.last_hidden_state[0]), out


def target_step(target, ids: torch.Tensor, last_only: bool = True, **kw):
    """A target pass whose logits come from `head_logits` (the last row's, or every row's):
    (logits [rows, V], outputs)."""
    out = target.base_model(ids, use_cache=True, **kw)
    h = out.last_hidden_state[0]
    return head_logits(target.get_output_embeddings().weight, h[-1:] if last_only else h), out


def stop_cut(tokens: list[int], stop: set[int]) -> int | None:
    for i, t in enumerate(tokens):
        if t in stop:
            return i
    return None
