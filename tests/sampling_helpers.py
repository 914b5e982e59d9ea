"""Checks that speculative sampling is in distribution: the target's exact distribution by
enumeration on the tiny vocabulary, sampled counts, and a chi-square test between them."""

from __future__ import annotations

import itertools

import torch
from conftest import TINY_VOCAB
from scipy.stats import chisquare

from draftline.decode import chain

TEMPERATURE = 1.5


def exact_distribution(target, prompt: list[int], n: int) -> dict[tuple, float]:
    """The target's own distribution over its first n sampled tokens, by enumeration."""
    out = {}
    for seq in itertools.product(range(TINY_VOCAB), repeat=n):
        p = 1.0
        for i in range(n):
            logits = target(torch.tensor([prompt + list(seq[:i])])).logits[0, -1]
            p *= float(torch.softmax(logits / TEMPERATURE, -1)[seq[i]])
        out[seq] = p
    return out


def chi2_pvalue(counts: dict, exact: dict, n: int) -> float:
    """p-value of `counts` (n samples) under `exact`."""
    cells = sorted(exact, key=exact.get, reverse=True)
    obs, exp, rest_o, rest_e = [], [], 0, 0.0
    for c in cells:  # pool cells expected < 5 times into one
        if exact[c] * n >= 5:
            obs.append(counts.get(c, 0))
            exp.append(exact[c] * n)
        else:
            rest_o += counts.get(c, 0)
            rest_e += exact[c] * n
    obs.append(rest_o)
    exp.append(rest_e)
    scale = sum(obs) / sum(exp)  # float rounding of the enumerated probabilities
    return float(chisquare(obs, [e * scale for e in exp]).pvalue)


def sample_speculative(target, drafter, prompt, n_tokens, runs) -> tuple[dict, float]:
    """Counts of the token sequences `runs` seeded speculative decodes give, and the rate
    at which drafted tokens were accepted."""
    counts, accepted, steps = {}, 0, 0
    ids = torch.tensor([prompt])
    for i in range(runs):
        d = chain.speculative(drafter, target, ids, n_tokens, [], temperature=TEMPERATURE,
                              gen=torch.Generator().manual_seed(i))
        key = tuple(d.tokens)
        counts[key] = counts.get(key, 0) + 1
        accepted += sum(a - 1 for a in d.acceptance_lengths)
        steps += len(d.acceptance_lengths)
    return counts, accepted / max(steps, 1)
