"""transformers' n-gram prompt lookup decoding, accounted like the drafter (a baseline)."""

from __future__ import annotations

import time

import torch

from .steps import Decoded, stop_cut


class _ForwardCounter:
    def __init__(self, model):
        self.calls = 0
        self._h = model.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1

    def close(self):
        self._h.remove()


@torch.inference_mode()
def prompt_lookup(target, input_ids: torch.Tensor, max_new_tokens: int, stop_ids: list[int],
                  num_tokens: int) -> Decoded:
    """transformers' n-gram prompt lookup decoding (greedy). Each target forward verifies
    one batch of candidates, so tokens per forward is its acceptance length; the first
    forward (the prefill) is excluded as for the drafter."""
    counter = _ForwardCounter(target)
    t0 = time.perf_counter()
    try:
        out = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                              max_new_tokens=max_new_tokens, prompt_lookup_num_tokens=num_tokens,
                              eos_token_id=list(stop_ids), pad_token_id=stop_ids[0])
    finally:
        counter.close()
    elapsed = time.perf_counter() - t0
    tokens = out[0, input_ids.shape[1]:].tolist()
    cut = stop_cut(tokens, set(stop_ids))
    tokens = tokens if cut is None else tokens[: cut + 1]
    steps = max(1, counter.calls - 1)
    # Mean tokens per verify step after the first token, spread evenly (transformers does
    # not report per-step counts); tau() then averages it like the drafter's.
    per = (len(tokens) - 1) / steps
    return Decoded(tokens, [per] * steps if len(tokens) > 1 else [], elapsed)
