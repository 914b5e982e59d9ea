"""The loss mask on the real SmolLM2 chat template: decode the masked tokens back."""

import json
from pathlib import Path

import pytest
import yaml
from chat_tokenizers import save_to, supervised_segments
from conftest import ROOT

from draftline.chat import ChatTemplate
from draftline.config.params import parse_params
from draftline.io import write_parquet
from draftline.sequences import tokenize
from draftline.sequences.loss_mask import TemplateError, encode, encode_turns, turns

REASONING, ANSWER = "Adding 2 and 3 gives 5.", "2+3 = 5."


def test_single_turn_mask_is_exactly_the_answer(tokenizer):
    msgs = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi! How can I help?"}]
    enc = encode(tokenizer, msgs, ["stop"], 512)
    assert supervised_segments(tokenizer, enc.input_ids, enc.loss_mask) == ["Hi! How can I help?<|im_end|>"]
    assert not enc.truncated


def test_multi_turn_masks_every_answer(tokenizer):
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "One?"}, {"role": "assistant", "content": " 1, with a leading space"},
            {"role": "user", "content": "Two?"}, {"role": "assistant", "content": "```python\nprint(2)\n```"}]
    enc = encode(tokenizer, msgs, ["stop", "stop"], 512)
    assert supervised_segments(tokenizer, enc.input_ids, enc.loss_mask) == [
        " 1, with a leading space<|im_end|>", "```python\nprint(2)\n```<|im_end|>"]


def test_truncated_answer_has_no_end_of_turn(tokenizer):
    msgs = [{"role": "user", "content": "Count."}, {"role": "assistant", "content": "1 2 3 4"}]
    enc = encode(tokenizer, msgs, ["length"], 512)
    assert supervised_segments(tokenizer, enc.input_ids, enc.loss_mask) == ["1 2 3 4"]


def test_max_length_truncates(tokenizer):
    msgs = [{"role": "user", "content": "Go."}, {"role": "assistant", "content": "word " * 200}]
    enc = encode(tokenizer, msgs, ["stop"], 64)
    assert len(enc.input_ids) == len(enc.loss_mask) == 64 and enc.truncated


def test_reasoning_a_template_cannot_render_is_an_error_not_a_silent_drop(tokenizer):
    # SmolLM2's template has no reasoning: keeping reasoning there would train on text the
    # target never saw rendered.
    tpl = ChatTemplate(tokenizer, {})
    msgs, reasoning = [{"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": ANSWER}], [REASONING]
    with pytest.raises(TemplateError, match="does not render its reasoning"):
        turns(tpl, msgs, reasoning, ["stop"], None, True)
    [s] = encode_turns(tpl, turns(tpl, msgs, reasoning, ["stop"], None, False), 4096)  # reasoning: drop
    assert supervised_segments(tokenizer, s.input_ids, s.loss_mask) == [ANSWER + "<|im_end|>"]


def test_unrendered_rows_are_counted_named_and_fail_above_the_threshold(tokenizer, tmp_path):
    model = save_to(tokenizer, tmp_path / "model")
    rows = [{"id": f"r{i}", "split": "train", "sample": 0, "finish_reason": ["stop"], "reasoning": [None],
             "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}]}
            for i in range(9)]
    rows.append({**rows[0], "id": "bad", "reasoning": ["unrenderable"]})
    write_parquet(tmp_path / "answers.parquet", rows)
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    out = (tmp_path / "answers.parquet", tmp_path / "tokens.parquet", tmp_path / "m.json")
    with pytest.raises(ValueError, match=r"1 of 10 rows .* first 'bad': assistant turn 0: the chat template does not"):
        tokenize.run(parse_params(base), model, *out)
    tokenize.run(parse_params({**base, "tokenize": {**base["tokenize"], "max_unrendered": 0.1}}), model, *out)
    m = json.loads(Path(out[2]).read_text())
    assert (m["unrendered"], m["unrendered_ids"], m["rows"]) == (1, "bad", 9)
