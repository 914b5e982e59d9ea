"""The block recipe: anchors, the sparse mask, labels and decay weights."""

import torch

from draftline.drafter import blocks
from draftline.hidden.store import Sequence


def _seq(n, supervised_from):
    ids = torch.arange(100, 100 + n)
    mask = (torch.arange(n) >= supervised_from).float()
    return Sequence("s", "train", torch.randn(n, 6), torch.randn(n, 3), ids, mask)


def test_anchor_candidates_need_two_supervised_tokens():
    mask = torch.tensor([0, 0, 1, 1, 1, 0, 1, 0, 1, 1.0])
    assert blocks.anchor_candidates(mask).tolist() == [2, 3, 8]


def test_block_mask_labels_and_weights():
    s = _seq(10, 4)
    anchors = [torch.tensor([4, 7])]
    b = blocks.build([s], anchors, block_size=4, mask_id=7, gamma=2.0)
    L, Q = 10, 8
    assert b.block_ids[0].tolist() == [104, 7, 7, 7, 107, 7, 7, 7]
    assert b.position_ids[0, L:].tolist() == [4, 5, 6, 7, 7, 8, 9, 10]
    m = b.attention_mask[0, 0]
    assert m.shape == (Q, L + Q)
    # block 0 (anchor 4) sees context 0..3 only, and its own 4 slots only
    assert m[0, :L].nonzero().flatten().tolist() == [0, 1, 2, 3]
    assert m[3, L:].nonzero().flatten().tolist() == [0, 1, 2, 3]
    # block 1 (anchor 7) sees context 0..6
    assert m[5, :L].nonzero().flatten().tolist() == list(range(7))
    assert m[5, L:].nonzero().flatten().tolist() == [4, 5, 6, 7]
    assert b.labels[0, 0].tolist() == [105, 106, 107]
    # anchor 7: slot 3 would be position 10, past the end -> weight 0
    assert b.labels[0, 1, :2].tolist() == [108, 109]
    w = b.weights[0]
    assert torch.allclose(w[0], torch.exp(-torch.arange(3.0) / 2.0))
    assert w[1, 2] == 0
    # teacher for token[a+k] is the state at a+k-1
    assert b.teacher_rows[0, 0].tolist() == [4, 5, 6]


def test_sampling_respects_num_anchors():
    s = _seq(200, 20)
    a = blocks.sample_anchors(s.loss_mask, 16, torch.Generator().manual_seed(0))
    assert a.numel() == 16 and (a >= 20).all() and torch.equal(a, a.sort().values)


def test_prompt_anchors_come_after_and_do_not_move_answer_anchors():
    s = _seq(200, 50)
    plain = blocks.sample_anchors(s.loss_mask, 16, torch.Generator().manual_seed(0))
    both = blocks.sample_anchors(s.loss_mask, 16, torch.Generator().manual_seed(0), prompt_anchors=8)
    prompt = both[both < 50]
    assert prompt.numel() == 8 and (prompt >= 1).all()
    assert torch.equal(both[both >= 50], plain)  # the same answer anchors as without


def test_every_position_supervises_prompt_slots():
    s = _seq(10, 6)
    a = [torch.tensor([2])]
    assert blocks.build([s], a, 4, 7, None).weights[0, 0].tolist() == [0, 0, 0]  # positions 3..5: prompt
    b = blocks.build([s], a, 4, 7, None, every_position=True)
    assert b.weights[0, 0].tolist() == [1, 1, 1]
    assert b.labels[0, 0].tolist() == [103, 104, 105]
