"""Decoding on a transformers target: plain, and speculative with a DFlash drafter.

Accounting follows z-lab's `dflash_generate`: the first token comes from the prefill; each
verify step then produces `accepted + 1` tokens (cut at a stop token or at the length
limit) and that count is one acceptance length. tau is their mean per request.

Greedy (temperature 0) accepts the longest drafted prefix equal to the target's argmax, so
the output equals plain greedy decoding token for token. Sampling (temperature > 0) uses
rejection sampling: drafted token x at position k is kept with probability
min(1, p(x) / q(x)) (p the target's, q the drafter's distribution at that position, both
at the temperature); the first rejected position is resampled from max(0, p - q)
renormalised, and a fully accepted block gets a bonus token from p. Every emitted token is
then distributed exactly as the target's own sample, whatever the drafter proposes.
A DFlash2 drafter's selector picks each slot from its top-k given the slot before
(drafter/dflash2.py); q is then the selector's distribution over those candidates.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from .drafter.dflash2 import walk
from .skinny import SkinnyHead, head_logits


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


def _stop_cut(tokens: list[int], stop: set[int]) -> int | None:
    for i, t in enumerate(tokens):
        if t in stop:
            return i
    return None


def probs_at(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.float() / temperature, dim=-1)


def _draw(probs: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    return torch.multinomial(probs, 1, generator=gen)[..., 0]


def choose(logits: torch.Tensor, temperature: float, gen: torch.Generator | None) -> torch.Tensor:
    if temperature == 0:
        return logits.argmax(-1)
    return _draw(probs_at(logits, temperature).cpu(), gen)  # CPU generator: same draws on any device


def rejection_sample(draft: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                     gen: torch.Generator | None) -> tuple[int, int]:
    """draft [k] tokens drawn from q [k, V]; p [k + 1, V] the target's distributions after
    each prefix. Returns (drafted tokens accepted, the token that follows them)."""
    k = draft.shape[0]
    idx = torch.arange(k)
    p_x, q_x = p[idx, draft], q[idx, draft]
    u = torch.rand(k, generator=gen, dtype=p.dtype)
    ok = (u * q_x < p_x).long().cumprod(0)  # u < p/q without dividing by a zero q
    n = int(ok.sum())
    if n == k:
        return n, int(_draw(p[k], gen))
    residual = (p[n] - q[n]).clamp_min(0)
    total = residual.sum()
    # total == 0 only when p == q at that position, where rejection has probability 0.
    residual = residual / total if total > 0 else p[n]
    return n, int(_draw(residual, gen))


@torch.inference_mode()
def plain(target, input_ids: torch.Tensor, max_new_tokens: int, stop_ids: list[int], temperature: float = 0.0,
          gen: torch.Generator | None = None) -> Decoded:
    stop = set(stop_ids)
    cache = DynamicCache(config=target.config)
    logits, _ = target_step(target, input_ids, cache=cache)
    tok = int(choose(logits[-1], temperature, gen))
    tokens = [tok]
    t0 = time.perf_counter()
    n = input_ids.shape[1]
    dev = input_ids.device
    while len(tokens) < max_new_tokens and tok not in stop:
        pos = torch.tensor([[n + len(tokens) - 1]], device=dev)
        logits, _ = target_step(target, torch.tensor([[tok]], device=dev), position_ids=pos, cache=cache)
        tok = int(choose(logits[-1], temperature, gen))
        tokens.append(tok)
    return Decoded(tokens, [], time.perf_counter() - t0)


def greedy(target, input_ids, max_new_tokens, stop_ids) -> Decoded:
    return plain(target, input_ids, max_new_tokens, stop_ids)


@torch.inference_mode()
def speculative(drafter, target, input_ids: torch.Tensor, max_new_tokens: int, stop_ids: list[int],
                block_size: int | None = None, temperature: float = 0.0,
                gen: torch.Generator | None = None) -> Decoded:
    B = block_size or drafter.block_size
    layer_ids = drafter.target_layer_ids
    mask_id = int(drafter.mask_token_id)
    selector = getattr(drafter, "candidate_selector", None)
    embed_w = target.get_input_embeddings().weight
    head = SkinnyHead(target.get_output_embeddings())
    stop = set(stop_ids)
    n_in = input_ids.shape[1]
    max_len = n_in + max_new_tokens
    dev = input_ids.device
    cache = DynamicCache(config=target.config)
    d_cache = DynamicCache(config=drafter.config)  # the drafter's K/V of context features seen so far
    logits, out = target_step(target, input_ids, cache=cache, output_hidden_states=True)
    seq = input_ids[0].tolist() + [int(choose(logits[-1], temperature, gen))]
    ctx = _features(out.hidden_states, layer_ids)  # features not yet in the drafter's cache
    t0 = time.perf_counter()
    start = n_in  # position of the last accepted token, the block's anchor
    accepted_lengths: list[int] = []
    stopped = seq[start] in stop
    while start + 1 < max_len and not stopped:
        size = min(B, max_len - start)
        block = [seq[start]] + [mask_id] * (size - 1)
        q = None
        if size > 1:
            noise = F.embedding(torch.tensor([block], device=dev), embed_w)
            pos = torch.arange(start - ctx.shape[1], start + size, device=dev)[None]
            h = drafter(target_hidden=ctx, noise_embedding=noise, position_ids=pos, past_key_values=d_cache,
                        use_cache=True)[:, 1 - size:, :]
            _keep(d_cache, start)  # keep the context's K/V, drop the block's
            logits = drafter.compute_logits(h[0], head)
            if selector is not None:  # DFlash2: each slot's pick given the one before it
                block[1:], q = walk(selector, h[0], logits, block[0], temperature, gen)
                q = None if q is None else q.cpu()
            elif temperature == 0:
                block[1:] = logits.argmax(-1).tolist()
            else:
                q = probs_at(logits, temperature).cpu()
                block[1:] = _draw(q, gen).tolist()
        verify_pos = torch.arange(start, start + size, device=dev)[None]
        verify = dict(position_ids=verify_pos, cache=cache, output_hidden_states=size > 1)
        if temperature == 0:
            choice, out = verify_greedy(target, torch.tensor([block], device=dev), **verify)
            acc = 0
            while acc < size - 1 and block[acc + 1] == choice[acc]:
                acc += 1
            nxt = choice[acc]
        else:
            logits, out = target_step(target, torch.tensor([block], device=dev), last_only=False, **verify)
            p = probs_at(logits, temperature).cpu()
            if size > 1:
                acc, nxt = rejection_sample(torch.tensor(block[1:]), p, q, gen)
            else:
                acc, nxt = 0, int(_draw(p[-1], gen))
        new = block[1 : acc + 1] + [nxt]
        produced = min(acc + 1, max_len - start - 1)
        cut = _stop_cut(new[:produced], stop)
        if cut is not None:
            produced, stopped = cut + 1, True
        seq = seq[: start + 1] + new[:produced]
        start += produced
        _keep(cache, start)
        accepted_lengths.append(produced)
        if size > 1:
            ctx = _features(out.hidden_states, layer_ids)[:, :produced]
    tokens = seq[n_in : min(start + 1, max_len)]
    return Decoded(tokens, accepted_lengths, time.perf_counter() - t0)


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
    cut = _stop_cut(tokens, set(stop_ids))
    tokens = tokens if cut is None else tokens[: cut + 1]
    steps = max(1, counter.calls - 1)
    # Mean tokens per verify step after the first token, spread evenly (transformers does
    # not report per-step counts); tau() then averages it like the drafter's.
    per = (len(tokens) - 1) / steps
    return Decoded(tokens, [per] * steps if len(tokens) > 1 else [], elapsed)


def tau(per_request: list[list[float]]) -> float:
    """Mean tokens per verify step, averaged per request first (z-lab's definition)."""
    means = [sum(a) / len(a) for a in per_request if a]
    return sum(means) / len(means) if means else float("nan")


def histogram(per_request: list[list[int]], block_size: int) -> list[float]:
    flat = [x for a in per_request for x in a]
    return [flat.count(b) / len(flat) if flat else 0.0 for b in range(block_size + 1)]


def position_acceptance(per_request: list[list[int]], block_size: int) -> list[float]:
    """Share of verify steps that accepted drafted position k, among those that reached it
    (k = 1 .. block_size - 1): the per-position acceptance curve."""
    flat = [x - 1 for a in per_request for x in a]  # drafted tokens accepted per step
    out = []
    for k in range(1, block_size):
        reached = sum(1 for x in flat if x >= k - 1)
        out.append(sum(1 for x in flat if x >= k) / reached if reached else 0.0)
    return out
