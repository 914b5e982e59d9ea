"""The benchmark's reasoning end marker, probed from real thinking targets' tokenizers and
templates (tests/chat_tokenizers.py), and located in their generations."""

import pytest
from chat_tokenizers import kimi26, qwen3, qwen36

from draftline.config.chat import ChatParams
from draftline.decode.reasoning import reasoning_split

# (tokenizer, thinking kwarg, generation prompt opens <think>, a generation after that prompt)
TARGETS = {
    "qwen3": (qwen3, "enable_thinking", False, "<think>\nOne, two.\n</think>\n\nThree.<|im_end|>"),
    "qwen3_6": (qwen36, "enable_thinking", True, "One, two.\n</think>\n\nThree.<|im_end|>"),
    "kimi_k2_6": (kimi26, "thinking", True, "One, two.</think>Three.<|im_end|>"),
}


@pytest.mark.parametrize("name", list(TARGETS))
def test_marker_and_parts_of_a_real_thinking_target(name):
    make, kwarg, opens, generated = TARGETS[name]
    tok = make()
    split = reasoning_split(tok, ChatParams(thinking="on", thinking_kwarg=kwarg).template_kwargs())
    assert (split.end, split.opened) == ("</think>", opens)
    ids = tok.encode(generated, add_special_tokens=False)
    n = split.reasoning_tokens(ids)
    assert tok.convert_ids_to_tokens(ids[n - 1]) == "</think>"  # one token in these vocabularies
    assert split.history(ids) == {"role": "assistant", "content": "Three.", "reasoning_content": "One, two."}


def test_thinking_off_leaves_generations_all_answer():
    split = reasoning_split(qwen3(), ChatParams(thinking="off").template_kwargs())
    ids = qwen3().encode("Three.<|im_end|>", add_special_tokens=False)
    assert split.reasoning_tokens(ids) == 0
    # Kimi-K2's template, with thinking off, renders no reasoning at all: no split.
    assert reasoning_split(kimi26(), ChatParams(thinking="off", thinking_kwarg="thinking").template_kwargs()) is None
