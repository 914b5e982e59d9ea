"""Stored hidden states are the target's own, and lm_head(final) gives its logits."""

import pytest
import torch
from extract_helpers import extract_in_process

from draftline.hidden.plan import PlanError
from draftline.hidden.reader import load_sequences
from draftline.hidden.store import read_index


def test_shards_hold_target_states(tmp_path, target_model, tokenizer):
    texts = ["Hello there, how are you?", "A much longer text " * 8, "Short."]
    rows = []
    for i, t in enumerate(texts):
        ids = tokenizer(t)["input_ids"]
        rows.append({"id": f"r{i}", "split": "train", "input_ids": ids, "loss_mask": [1] * len(ids)})
    layers = [3, 15]
    # 3 x 576 bf16 columns + ids + mask = 3461 bytes a token: 30,000 bytes is 8 tokens a shard
    stats = extract_in_process(target_model, rows, layers, tmp_path, 64, tokenizer.eos_token_id, shard_bytes=30_000)
    assert stats["shards"] >= 2 and stats["tokens"] == sum(len(r["input_ids"]) for r in rows)
    assert read_index(tmp_path)["target_layer_ids"] == layers
    seqs = {s.id: s for s in load_sequences(tmp_path)}
    head = target_model.get_output_embeddings().weight
    for r in rows:
        ids = torch.tensor([r["input_ids"]])
        with torch.no_grad():
            out = target_model(ids, output_hidden_states=True)
        s = seqs[r["id"]]
        assert s.input_ids.tolist() == r["input_ids"]
        want = torch.cat([out.hidden_states[l + 1][0] for l in layers], -1)
        # stored in bf16: compare at bf16 precision
        assert torch.allclose(s.context, want.to(torch.bfloat16).float(), rtol=2e-2, atol=2e-2)
        teacher = s.final @ head.T
        assert (teacher.argmax(-1) == out.logits[0].argmax(-1)).float().mean() > 0.95


def test_teacher_distribution_equals_target_logits(tmp_path, target_dir, target_model, tokenizer):
    """The KL teacher (stored final state -> the target's LM head, as training reads it)
    is the target's own next-token distribution on the same tokens."""
    from draftline.drafter.loss import _teacher_probs
    from draftline.target.weights import load_io_weights

    conv = [{"role": "user", "content": "Write a function that reverses a list."},
            {"role": "assistant", "content": "def reverse(xs):\n    return xs[::-1]"}]
    ids = tokenizer.apply_chat_template(conv, tokenize=True, return_dict=True)["input_ids"]
    rows = [{"id": "c", "split": "train", "input_ids": ids, "loss_mask": [1] * len(ids)}]
    extract_in_process(target_model, rows, [15], tmp_path, 4096, 0)
    (s,) = load_sequences(tmp_path)
    _, head = load_io_weights(target_dir)
    assert torch.equal(head, target_model.get_output_embeddings().weight)
    with torch.no_grad():
        logits = target_model(torch.tensor([ids])).logits[0]
    p, logp = _teacher_probs(s.final @ head.T, 1.0, None)
    ref = torch.log_softmax(logits, -1)
    kl = (p * (logp - ref)).sum(-1)
    assert kl.max() < 0.02  # bf16 storage of the final state is the only difference
    assert (p.argmax(-1) == logits.argmax(-1)).float().mean() >= 0.97


def test_a_repeated_sequence_id_is_refused(tmp_path, target_model):
    rows = [{"id": "a", "split": "train", "input_ids": [1, 2, 3], "loss_mask": [1, 1, 1]}] * 2
    with pytest.raises(PlanError, match="sequence id 'a' appears twice"):
        extract_in_process(target_model, rows, [3], tmp_path, 64, 0)
