"""Greedy decoding, plain and speculative (target + DFlash drafter), on a transformers target.

Accounting follows z-lab's `dflash_generate`: the first token comes from the prefill; each
verify step then produces `accepted + 1` tokens (cut at a stop token or at the length
limit) and that count is one acceptance length. tau is their mean per request.
The drafter runs without a KV cache of its own: it re-reads the full context features
each step, which costs little for a few-layer drafter and keeps this loop easy to check.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache


@dataclass
class Decoded:
    tokens: list[int]  # generated tokens (prompt excluded)
    acceptance_lengths: list[int]
    decode_seconds: float  # after the prefill, as z-lab times it


def _features(hidden_states, layer_ids):
    return torch.cat([hidden_states[l + 1] for l in layer_ids], dim=-1)


def _keep(cache: DynamicCache, length: int) -> None:
    """Drop cached positions >= length (the rejected part of the block)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)  # transformers 5 takes the number of tokens to remove, negated


def _stop_cut(tokens: list[int], stop: set[int]) -> int | None:
    for i, t in enumerate(tokens):
        if t in stop:
            return i
    return None


@torch.inference_mode()
def greedy(target, input_ids: torch.Tensor, max_new_tokens: int, stop_ids: list[int]) -> Decoded:
    stop = set(stop_ids)
    cache = DynamicCache(config=target.config)
    out = target(input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    tok = int(out.logits[0, -1].argmax())
    tokens = [tok]
    t0 = time.perf_counter()
    n = input_ids.shape[1]
    while len(tokens) < max_new_tokens and tok not in stop:
        out = target(torch.tensor([[tok]]), position_ids=torch.tensor([[n + len(tokens) - 1]]),
                     past_key_values=cache, use_cache=True)
        tok = int(out.logits[0, -1].argmax())
        tokens.append(tok)
    return Decoded(tokens, [], time.perf_counter() - t0)


@torch.inference_mode()
def speculative(drafter, target, input_ids: torch.Tensor, max_new_tokens: int, stop_ids: list[int],
                block_size: int | None = None) -> Decoded:
    B = block_size or drafter.block_size
    layer_ids = drafter.target_layer_ids
    mask_id = int(drafter.mask_token_id)
    embed_w = target.get_input_embeddings().weight
    head = target.get_output_embeddings()
    stop = set(stop_ids)
    n_in = input_ids.shape[1]
    max_len = n_in + max_new_tokens
    cache = DynamicCache(config=target.config)
    out = target(input_ids, past_key_values=cache, use_cache=True, logits_to_keep=1, output_hidden_states=True)
    seq = input_ids[0].tolist() + [int(out.logits[0, -1].argmax())]
    ctx = _features(out.hidden_states, layer_ids)  # features of positions < start
    t0 = time.perf_counter()
    start = n_in  # position of the last accepted token, the block's anchor
    accepted_lengths: list[int] = []
    stopped = seq[start] in stop
    while start + 1 < max_len and not stopped:
        size = min(B, max_len - start)
        block = [seq[start]] + [mask_id] * (size - 1)
        if size > 1:
            noise = F.embedding(torch.tensor([block]), embed_w)
            pos = torch.arange(start + size)[None]
            h = drafter(target_hidden=ctx, noise_embedding=noise, position_ids=pos)[:, 1:, :]
            block[1:] = drafter.compute_logits(h, head)[0].argmax(-1).tolist()
        out = target(torch.tensor([block]), position_ids=torch.arange(start, start + size)[None],
                     past_key_values=cache, use_cache=True, output_hidden_states=size > 1)
        choice = out.logits[0].argmax(-1).tolist()
        acc = 0
        while acc < size - 1 and block[acc + 1] == choice[acc]:
            acc += 1
        new = block[1 : acc + 1] + [choice[acc]]
        produced = min(acc + 1, max_len - start - 1)
        cut = _stop_cut(new[:produced], stop)
        if cut is not None:
            produced, stopped = cut + 1, True
        seq = seq[: start + 1] + new[:produced]
        start += produced
        _keep(cache, start)
        accepted_lengths.append(produced)
        if size > 1:
            ctx = torch.cat([ctx, _features(out.hidden_states, layer_ids)[:, :produced]], dim=1)
    tokens = seq[n_in : min(start + 1, max_len)]
    return Decoded(tokens, accepted_lengths, time.perf_counter() - t0)


def tau(per_request: list[list[int]]) -> float:
    """Mean tokens per verify step, averaged per request first (z-lab's definition)."""
    means = [sum(a) / len(a) for a in per_request if a]
    return sum(means) / len(means) if means else float("nan")


def histogram(per_request: list[list[int]], block_size: int) -> list[float]:
    flat = [x for a in per_request for x in a]
    return [flat.count(b) / len(flat) if flat else 0.0 for b in range(block_size + 1)]
