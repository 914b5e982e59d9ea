"""Speculative decoding: lossless at temperature 0 and in distribution when sampling."""

import pytest
import torch
from sampling_helpers import chi2_pvalue, exact_distribution, sample_speculative
from scipy.stats import chisquare

from draftline.decode import acceptance as A
from draftline.decode import chain as S

def test_sampled_speculative_matches_target_distribution(tiny, monkeypatch):
    target, drafter = tiny
    torch.set_num_threads(1)  # tiny matrices: threads cost more than they give
    prompt, n, runs = [1, 2, 3], 3, 2500
    exact = exact_distribution(target, prompt, n)
    counts, acc_rate = sample_speculative(target, drafter, prompt, n, runs)
    assert 0.1 < acc_rate < 1.0  # the drafter's tokens are sometimes kept, sometimes resampled
    assert chi2_pvalue(counts, exact, runs) > 0.001
    # The test has power: keeping every drafted token (no rejection) is caught at once.
    monkeypatch.setattr(S, "rejection_sample", lambda draft, p, q, gen: (draft.shape[0], int(p[-1].argmax())))
    wrong, _ = sample_speculative(target, drafter, prompt, n, runs)
    assert chi2_pvalue(wrong, exact, runs) < 1e-6


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
