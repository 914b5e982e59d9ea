"""Temperature + top-p sampling for batched in-process generation, over a few candidates.

transformers' sampling path sorts the whole vocabulary for top-p and then draws with
`torch.multinomial` over all of it, every step, for every row. On the embedded target's
49K vocabulary at batch 64 that is about 370 ms a step on 2 cores, as much as the forward
pass itself (bench/bench_regen_sampling.py). The nucleus of a trained model at the usual
temperatures lies among its few hundred likeliest tokens, so `NucleusSampler` looks for it
in the `candidates` likeliest (exact: a row whose candidates hold less than `top_p` of the
mass is redone over the whole vocabulary), draws among them, and hands generate scores
whose only finite entry is the drawn token; generate then runs its greedy path, whose
argmax emits that token. The distribution is transformers' TemperatureLogitsWarper +
TopPLogitsWarper: a token is kept when the mass of the tokens above it is below `top_p`.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor


def nucleus_probs(logits: torch.Tensor, temperature: float, top_p: float,
                  candidates: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids [B, k], their renormalised probabilities [B, k]) of each row's nucleus."""
    scaled = logits.float() / temperature
    vocab = scaled.shape[-1]
    if top_p >= 1:  # no nucleus: the whole vocabulary, no sort needed
        ids = torch.arange(vocab, device=scaled.device).expand_as(scaled)
        return ids, torch.softmax(scaled, dim=-1)
    lse = torch.logsumexp(scaled, dim=-1, keepdim=True)  # full-vocabulary normaliser

    def over(k: int, rows: torch.Tensor):
        top, ids = scaled[rows].topk(k, dim=-1)  # sorted, likeliest first
        p = (top - lse[rows]).exp()
        above = p.cumsum(-1) - p  # mass of the tokens ranked above each one
        return ids, p * (above < top_p), p.sum(-1)

    k = min(candidates, vocab)
    every = torch.arange(scaled.shape[0], device=scaled.device)
    ids, w, held = over(k, every)
    short = held < top_p
    if k < vocab and bool(short.any()):
        rows = every[short]
        full_ids, full_w, _ = over(vocab, rows)  # the nucleus reaches past the candidates
        ids = torch.cat([ids, ids.new_zeros(len(every), vocab - k)], dim=1)
        w = torch.cat([w, w.new_zeros(len(every), vocab - k)], dim=1)
        ids[rows], w[rows] = full_ids, full_w
    return ids, w / w.sum(-1, keepdim=True)


class NucleusSampler(LogitsProcessor):
    """Draws each row's next token; pass with `do_sample=False` (see the module doc).

    One seed per row: a row's draws depend on its own seed and logits only, not on which
    rows share its batch, so a resumed run (whose batches differ) samples as an
    uninterrupted one would."""

    def __init__(self, temperature: float, top_p: float, seeds: list[int], candidates: int = 1024):
        if not temperature > 0:
            raise ValueError(f"NucleusSampler needs temperature > 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ValueError(f"NucleusSampler needs 0 < top_p <= 1, got {top_p}")
        self.temperature, self.top_p, self.candidates = temperature, top_p, candidates
        # CPU generators: a seed draws the same tokens on any device.
        self.gens = [torch.Generator().manual_seed(s) for s in seeds]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if scores.shape[0] != len(self.gens):
            raise ValueError(f"NucleusSampler has {len(self.gens)} seeds for a batch of {scores.shape[0]}")
        ids, probs = nucleus_probs(scores, self.temperature, self.top_p, self.candidates)
        probs = probs.cpu()
        pick = torch.stack([torch.multinomial(probs[r], 1, generator=g) for r, g in enumerate(self.gens)])
        token = ids.gather(-1, pick.to(ids.device))
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, token, 0.0)
