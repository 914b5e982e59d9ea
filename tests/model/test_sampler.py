"""The regeneration sampler draws from transformers' temperature + top-p distribution."""

import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

from draftline.config.regenerate import RegenerateParams
from draftline.regenerate.hf_backend import HFBackend
from draftline.regenerate.sampler import NucleusSampler, nucleus_probs


def _reference(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    warped = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(temperature)(None, logits.clone()))
    return torch.softmax(warped, dim=-1)


def _dense(ids: torch.Tensor, probs: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.zeros(ids.shape[0], vocab).scatter_add_(-1, ids, probs)


@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.95, 1.0])
@pytest.mark.parametrize("candidates", [1024, 3])  # 3: most rows need the whole-vocabulary redo
def test_nucleus_equals_transformers_warpers(top_p, candidates):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(16, 5000, generator=gen) * torch.linspace(0.5, 6, 16)[:, None]  # flat to peaked
    ids, probs = nucleus_probs(logits, 0.7, top_p, candidates)
    assert torch.allclose(_dense(ids, probs, 5000), _reference(logits, 0.7, top_p), atol=1e-6)


def test_draws_follow_the_nucleus_distribution():
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0]]).repeat(20000, 1)
    sampler = NucleusSampler(0.8, 0.9, list(range(20000)), candidates=4)
    scores = sampler(None, logits)
    drawn = scores.argmax(-1)
    assert torch.isfinite(scores).sum(-1).eq(1).all()  # exactly one finite score per row
    expected = _reference(logits[:1], 0.8, 0.9)[0]
    kept = expected > 0
    counts = torch.bincount(drawn, minlength=8).float()
    assert counts[~kept].sum() == 0  # nothing outside the nucleus
    stat = chisquare(counts[kept].numpy(), (expected[kept] * len(drawn)).numpy())
    assert stat.pvalue > 1e-3, stat


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="temperature > 0"):
        NucleusSampler(0.0, 0.9, [0])
    with pytest.raises(ValueError, match="top_p"):
        NucleusSampler(0.7, 0.0, [0])
    with pytest.raises(ValueError, match="1 seeds for a batch of 2"):
        NucleusSampler(0.7, 0.9, [0])(None, torch.zeros(2, 10))


def test_sampled_generation_is_seeded_and_stops_at_eos(target_model, tokenizer):
    p = RegenerateParams(temperature=0.7, top_p=0.95, max_new_tokens=24)
    backend = HFBackend(target_model, tokenizer, p, [tokenizer.eos_token_id])
    convs = [[{"role": "user", "content": "Name three colours."}],
             [{"role": "user", "content": "Write a haiku about rain."}]]
    a, b, c = backend.generate(convs, seed=5), backend.generate(convs, seed=5), backend.generate(convs, seed=6)
    assert [x.text for x in a] == [x.text for x in b]
    assert [x.text for x in a] != [x.text for x in c]
    # A row's sample depends on its own seed, not on the batch it shares.
    mixed = backend.generate(convs, seed=[6, 5])
    alone = backend.generate(convs[1:], seed=[5])
    assert mixed[0].text == c[0].text and mixed[1].text == a[1].text == alone[0].text
    for ans in a:
        assert ans.text.strip()
        assert ans.completion_tokens <= 24 if ans.finish_reason == "stop" else ans.completion_tokens == 24
