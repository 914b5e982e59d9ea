"""Decoding on a transformers target: plain, and speculative with a DFlash drafter's chain
(the drafter's one pick per block position).

Accounting follows z-lab's `dflash_generate` (verify.py); tau is the mean acceptance
length per request (acceptance.py).

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

import torch
import torch.nn.functional as F

from ..drafter.dflash2 import walk
from ..hidden.capture import LayerOutputs
from .recurrent import Snapshot, has_recurrent
from .skinny import SkinnyHead
from .verify import Decoded, keep_cache, new_cache, replay, stop_cut, target_step, verify_greedy


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
    cache = new_cache(target.config)
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
    with LayerOutputs(target, drafter.target_layer_ids) as states:  # the drafter's layers only
        return _speculative(drafter, target, states, input_ids, max_new_tokens, stop_ids, block_size,
                            temperature, gen)


def _speculative(drafter, target, states: LayerOutputs, input_ids: torch.Tensor, max_new_tokens: int,
                 stop_ids: list[int], block_size: int | None, temperature: float,
                 gen: torch.Generator | None) -> Decoded:
    B = block_size or drafter.block_size
    mask_id = int(drafter.mask_token_id)
    selector = getattr(drafter, "candidate_selector", None)
    embed_w = target.get_input_embeddings().weight
    head = SkinnyHead(target.get_output_embeddings())
    stop = set(stop_ids)
    n_in = input_ids.shape[1]
    max_len = n_in + max_new_tokens
    dev = input_ids.device
    cache = new_cache(target.config)
    d_cache = new_cache(drafter.config)  # the drafter's K/V of context features seen so far
    logits, _ = target_step(target, input_ids, cache=cache)
    recurrent = has_recurrent(cache)
    seq = input_ids[0].tolist() + [int(choose(logits[-1], temperature, gen))]
    ctx = states.features()  # features not yet in the drafter's cache
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
            keep_cache(d_cache, start)  # keep the context's K/V, drop the block's
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
        verify = dict(position_ids=verify_pos, cache=cache)
        snapshot = Snapshot(cache) if recurrent else None
        if temperature == 0:
            choice, _ = verify_greedy(target, torch.tensor([block], device=dev), **verify)
            acc = 0
            while acc < size - 1 and block[acc + 1] == choice[acc]:
                acc += 1
            nxt = choice[acc]
        else:
            logits, _ = target_step(target, torch.tensor([block], device=dev), last_only=False, **verify)
            p = probs_at(logits, temperature).cpu()
            if size > 1:
                acc, nxt = rejection_sample(torch.tensor(block[1:]), p, q, gen)
            else:
                acc, nxt = 0, int(_draw(p[-1], gen))
        block_ctx = states.features()  # the verify pass's, taken before a replay runs the layers again
        new = block[1 : acc + 1] + [nxt]
        produced = min(acc + 1, max_len - start - 1)
        cut = stop_cut(new[:produced], stop)
        if cut is not None:
            produced, stopped = cut + 1, True
        seq = seq[: start + 1] + new[:produced]
        if snapshot is not None and produced < size:
            replay(target, cache, snapshot, block[:produced], start)
        start += produced
        keep_cache(cache, start)
        accepted_lengths.append(produced)
        if size > 1:
            ctx = block_ctx[:, :produced]
    tokens = seq[n_in : min(start + 1, max_len)]
    return Decoded(tokens, accepted_lengths, time.perf_counter() - t0)
