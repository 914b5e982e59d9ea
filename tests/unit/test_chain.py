"""Speculative decoding: lossless at temperature 0 and in distribution when sampling."""

import itertools

import pytest
import torch
from conftest import TINY_VOCAB as V
from scipy.stats import chisquare

from draftline.decode import acceptance as A
from draftline.decode import chain as S

T = 1.5


def _exact(target, prompt: list[int], n: int) -> dict[tuple, float]:
    """The target's own distribution over its first n sampled tokens, by enumeration."""
    out = {}
    for seq in itertools.product(range(V), repeat=n):
        p = 1.0
        for i in range(n):
            logits = target(torch.tensor([prompt + list(seq[:i])])).logits[0, -1]
            p *= float(torch.softmax(logits / T, -1)[seq[i]])
        out[seq] = p
    return out


def _chi2(counts: dict, exact: dict, n: int) -> float:
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


def _sample(target, drafter, prompt, n_tokens, runs):
    counts, accepted, steps = {}, 0, 0
    ids = torch.tensor([prompt])
    for i in range(runs):
        d = S.speculative(drafter, target, ids, n_tokens, [], temperature=T,
                          gen=torch.Generator().manual_seed(i))
        key = tuple(d.tokens)
        counts[key] = counts.get(key, 0) + 1
        accepted += sum(a - 1 for a in d.acceptance_lengths)
        steps += len(d.acceptance_lengths)
    return counts, accepted / max(steps, 1)


def test_sampled_speculative_matches_target_distribution(tiny, monkeypatch):
    target, drafter = tiny
    torch.set_num_threads(1)  # tiny matrices: threads cost more than they give
    prompt, n, runs = [1, 2, 3], 3, 2500
    exact = _exact(target, prompt, n)
    counts, acc_rate = _sample(target, drafter, prompt, n, runs)
    assert 0.1 < acc_rate < 1.0  # the drafter's tokens are sometimes kept, sometimes resampled
    assert _chi2(counts, exact, runs) > 0.001
    # The test has power: keeping every drafted token (no rejection) is caught at once.
    monkeypatch.setattr(S, "rejection_sample", lambda draft, p, q, gen: (draft.shape[0], int(p[-1].argmax())))
    wrong, _ = _sample(target, drafter, prompt, n, runs)
    assert _chi2(wrong, exact, runs) < 1e-6


def test_rejection_sample_single_position_distribution():
    """One drafted position: emitted token ~ p exactly, for a q far from p."""
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.1, 0.1, 0.2, 0.6]])
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    runs = 20000
    for _ in range(runs):
        draft = torch.multinomial(q[0], 1, generator=gen)
        n, nxt = S.rejection_sample(draft, p, q, gen)
        counts[int(draft) if n == 1 else nxt] += 1
    assert counts[3] == 0  # p(3) = 0: never emitted although q proposes it most
    assert chisquare(counts[:3].tolist(), (p[0, :3] * runs).tolist()).pvalue > 0.001


def test_greedy_speculative_equals_plain_greedy(tiny):
    target, drafter = tiny
    for prompt in ([1, 2, 3], [4, 0, 1, 1, 2]):
        ids = torch.tensor([prompt])
        plain = S.plain(target, ids, 12, [])
        spec = S.speculative(drafter, target, ids, 12, [])
        assert spec.tokens == plain.tokens
        assert sum(spec.acceptance_lengths) == len(spec.tokens) - 1


def test_position_acceptance_and_histogram():
    acc = [[1, 3, 4], [2]]  # produced per step, block 4: drafted accepted 0, 2, 3, 1
    assert A.histogram(acc, 4) == [0.0, 0.25, 0.25, 0.25, 0.25]
    # position 1 reached by 4 steps, accepted by 3; position 2: reached 3, accepted 2; 3: 2 -> 1
    assert A.position_acceptance(acc, 4) == [0.75, 2 / 3, 0.5]
    assert A.tau(acc) == pytest.approx(((1 + 3 + 4) / 3 + 2) / 2)
