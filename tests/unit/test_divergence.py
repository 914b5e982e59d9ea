"""A training run whose loss turns non-finite stops, naming the step, instead of writing
an all-NaN drafter and reporting success."""

import pytest
import torch
from conftest import train_params

from draftline.config.drafter import DrafterParams
from draftline.drafter.loop import train
from draftline.drafter.model import build_drafter, drafter_config
from draftline.hidden.store import Sequence

VOCAB, MASK = 40, 39


def _setup(nan_in: str | None = None):
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128)
    dp = DrafterParams(num_layers=1, block_size=4)
    torch.manual_seed(0)
    drafter = build_drafter(drafter_config(cfg, dp, [0], MASK), 1)
    gen = torch.Generator().manual_seed(0)
    seqs = []
    for i in range(4):
        ids = torch.randint(0, VOCAB - 2, (24,), generator=gen)
        context = torch.randn(24, 32, generator=gen)
        if nan_in == f"s{i}":
            context[5] = float("nan")  # a damaged hidden state, as a bad extraction could leave
        seqs.append(Sequence(f"s{i}", "train", context, torch.randn(24, 32, generator=gen), ids,
                             (torch.arange(24) >= 6).float()))
    embed, head = torch.randn(VOCAB, 32, generator=gen), torch.randn(VOCAB, 32, generator=gen)
    return drafter, embed, head, seqs, dp


def test_a_nan_hidden_state_stops_training_at_its_step():
    drafter, embed, head, seqs, dp = _setup(nan_in="s2")
    tp = train_params(num_anchors=4, batch_size=1, epochs=1, lr=1e-3, eval_every=1000)
    before = {k: v.clone() for k, v in drafter.state_dict().items()}
    with pytest.raises(RuntimeError, match=r"train: step \d+ \(epoch 0\): loss nan.*diverged"):
        train(drafter, embed, head, seqs, [], dp, tp, MASK)
    # No update was applied from the bad step: every weight is still finite.
    assert all(torch.isfinite(v).all() for v in drafter.state_dict().values())
    assert any(not torch.equal(before[k], v) for k, v in drafter.state_dict().items())


def test_finite_training_is_untouched():
    drafter, embed, head, seqs, dp = _setup()
    tp = train_params(num_anchors=4, batch_size=1, epochs=1, lr=1e-3, eval_every=1000)
    log = train(drafter, embed, head, seqs, [], dp, tp, MASK)
    assert len(log.steps) == 4
