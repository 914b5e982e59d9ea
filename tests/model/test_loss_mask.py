"""The loss mask on the real SmolLM2 chat template: decode the masked tokens back."""

from draftline.sequences.loss_mask import encode


def _masked_segments(tok, ids, mask):
    segs, cur = [], []
    for t, m in zip(ids, mask):
        if m:
            cur.append(t)
        elif cur:
            segs.append(cur)
            cur = []
    if cur:
        segs.append(cur)
    return [tok.decode(s) for s in segs]


def test_single_turn_mask_is_exactly_the_answer(tokenizer):
    msgs = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi! How can I help?"}]
    enc = encode(tokenizer, msgs, ["stop"], 512)
    assert _masked_segments(tokenizer, enc.input_ids, enc.loss_mask) == ["Hi! How can I help?<|im_end|>"]
    assert not enc.truncated


def test_multi_turn_masks_every_answer(tokenizer):
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "One?"}, {"role": "assistant", "content": " 1, with a leading space"},
            {"role": "user", "content": "Two?"}, {"role": "assistant", "content": "```python\nprint(2)\n```"}]
    enc = encode(tokenizer, msgs, ["stop", "stop"], 512)
    assert _masked_segments(tokenizer, enc.input_ids, enc.loss_mask) == [
        " 1, with a leading space<|im_end|>", "```python\nprint(2)\n```<|im_end|>"]


def test_truncated_answer_has_no_end_of_turn(tokenizer):
    msgs = [{"role": "user", "content": "Count."}, {"role": "assistant", "content": "1 2 3 4"}]
    enc = encode(tokenizer, msgs, ["length"], 512)
    assert _masked_segments(tokenizer, enc.input_ids, enc.loss_mask) == ["1 2 3 4"]


def test_max_length_truncates(tokenizer):
    msgs = [{"role": "user", "content": "Go."}, {"role": "assistant", "content": "word " * 200}]
    enc = encode(tokenizer, msgs, ["stop"], 64)
    assert len(enc.input_ids) == len(enc.loss_mask) == 64 and enc.truncated
