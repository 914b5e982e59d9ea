"""n-gram prompt lookup decoding, accounted like the drafter (a baseline).

transformers' implementation (`prompt_lookup_num_tokens`) where it runs; it refuses
stateful models (Gated-DeltaNet hybrids), which get the same method in our own loop: the
same candidate search (the earliest match of the last 2-gram, else 1-gram, and the tokens
after it), verified like the chain, with the recurrent state rolled back on rejection."""

from __future__ import annotations

import time

import torch

from .recurrent import Snapshot, has_recurrent
from .verify import Decoded, keep_cache, new_cache, replay, stop_cut, verify_greedy

MAX_NGRAM = 2  # transformers' default max_matching_ngram_size


class _ForwardCounter:
    def __init__(self, model):
        self.calls = 0
        self._h = model.register_forward_pre_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1

    def close(self):
        self._h.remove()


def candidates(seq: list[int], num_tokens: int, max_ngram: int = MAX_NGRAM) -> list[int]:
    """The tokens that followed the earliest earlier occurrence of the sequence's last n-gram
    (n = max_ngram down to 1), at most num_tokens; none when nothing matches."""
    n_seq = len(seq)
    for n in range(min(max_ngram, n_seq - 1), 0, -1):
        tail = seq[-n:]
        for i in range(n_seq - n):
            if seq[i : i + n] == tail:
                follow = seq[i + n : min(i + n + num_tokens, n_seq)]
                if follow:
                    return follow
    return []


@torch.inference_mode()
def lookup_loop(target, input_ids: torch.Tensor, max_new_tokens: int, stop_ids: list[int],
                num_tokens: int) -> Decoded:
    """Prompt lookup as a chain decoder: candidates from the sequence itself, one target pass
    verifies them, the longest prefix equal to the target's argmax is kept plus its bonus."""
    stop, dev, n_in = set(stop_ids), input_ids.device, input_ids.shape[1]
    max_len = n_in + max_new_tokens
    cache = new_cache(target.config)
    recurrent = has_recurrent(cache)
    choice, _ = verify_greedy(target, input_ids, cache=cache)
    seq = input_ids[0].tolist() + [choice[n_in - 1]]
    t0 = time.perf_counter()
    start, lengths = n_in, []
    stopped = seq[start] in stop
    while start + 1 < max_len and not stopped:
        block = [seq[start], *candidates(seq, num_tokens)][: max_len - start]
        snapshot = Snapshot(cache) if recurrent else None
        choice, _ = verify_greedy(target, torch.tensor([block], device=dev), cache=cache,
                                  position_ids=torch.arange(start, start + len(block), device=dev)[None])
        acc = 0
        while acc < len(block) - 1 and block[acc + 1] == choice[acc]:
            acc += 1
        new = block[1 : acc + 1] + [choice[acc]]
        produced = min(acc + 1, max_len - start - 1)
        cut = stop_cut(new[:produced], stop)
        if cut is not None:
            produced, stopped = cut + 1, True
        seq = seq[: start + 1] + new[:produced]
        if snapshot is not None and produced < len(block):
            replay(target, cache, snapshot, block[:produced], start)
        start += produced
        keep_cache(cache, start)
        lengths.append(produced)
    return Decoded(seq[n_in : min(start + 1, max_len)], lengths, time.perf_counter() - t0)


@torch.inference_mode()
def prompt_lookup(target, input_ids: torch.Tensor, max_new_tokens: int, stop_ids: list[int],
                  num_tokens: int) -> Decoded:
    """transformers' n-gram prompt lookup decoding (greedy), or `lookup_loop` for a stateful
    target that transformers refuses. Each target forward verifies
    one batch of candidates, so tokens per forward is its acceptance length; the first
    forward (the prefill) is excluded as for the drafter."""
    if has_recurrent(new_cache(target.config)):
        return lookup_loop(target, input_ids, max_new_tokens, stop_ids, num_tokens)
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
