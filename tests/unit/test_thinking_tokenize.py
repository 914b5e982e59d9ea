"""Tokenize on thinking templates: Qwen3's own (npm), a Qwen3.6-style and a Kimi-K2.6-style
one on the real Qwen3.5/3.6 vocabulary. Every sequence supervises exactly what the target
emitted for its turn after the generation prompt (reasoning markers, reasoning, answer, the
template's terminator) and nothing else; history-rewriting templates give a sequence per
turn, with the history as it was when that turn was generated."""

import json

import pytest
import yaml
from chat_tokenizers import kimi26, qwen3, qwen36, save_to, supervised_segments
from conftest import ROOT

from draftline.chat import ChatTemplate
from draftline.config.params import parse_params
from draftline.io import read_parquet, write_parquet
from draftline.sequences import tokenize
from draftline.sequences.loss_mask import encode_turns, turns

QUESTIONS = ["What is 2+3?", "And doubled?", "Say it in words."]
REASONING = ["Adding 2 and 3 gives 5.", "Five doubled:\n2 x 5 = 10.", "10 is ten."]
ANSWERS = ["2+3 = 5.", "It is 10.", "Ten."]

# What the target emits for a turn after its generation prompt, template by template: the
# generation prompt of Qwen3 opens nothing (the model writes `<think>`), Qwen3.6's opens
# `<think>\n`, Kimi's opens `<think>`; with thinking off, each prompt holds an empty block.
EMITTED = {
    ("qwen3", True): "<think>\n{r}\n</think>\n\n{a}<|im_end|>",
    ("qwen36", True): "{r}\n</think>\n\n{a}<|im_end|>",
    ("kimi26", True): "{r}</think>{a}<|im_end|>",
    ("qwen3", False): "{a}<|im_end|>",
    ("qwen36", False): "{a}<|im_end|>",
    ("kimi26", False): "{a}<|im_end|>",
}
DEFAULTS = yaml.safe_load((ROOT / "params.yaml").read_text())
TOKENIZERS = {"qwen3": qwen3, "qwen36": qwen36, "kimi26": kimi26}
KWARG = {"qwen3": "enable_thinking", "qwen36": "enable_thinking", "kimi26": "thinking"}


def _conversation(n: int, thinking: bool):
    msgs, reasoning = [], []
    for k in range(n):
        msgs += [{"role": "user", "content": QUESTIONS[k]}, {"role": "assistant", "content": ANSWERS[k]}]
        reasoning.append(REASONING[k] if thinking else None)
    return msgs, reasoning


def _encode(name, thinking, n, kwargs=None):
    tok = TOKENIZERS[name]()
    tpl = ChatTemplate(tok, {KWARG[name]: thinking, **(kwargs or {})}, KWARG[name])
    msgs, reasoning = _conversation(n, thinking)
    return tok, tpl, msgs, encode_turns(tpl, turns(tpl, msgs, reasoning, ["stop"] * n, None, True), 4096)


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_single_turn_supervises_what_the_target_emitted(name, thinking):
    tok, tpl, msgs, seqs = _encode(name, thinking, 1)
    assert len(seqs) == 1
    s = seqs[0]
    want = EMITTED[name, thinking].format(r=REASONING[0], a=ANSWERS[0])
    assert supervised_segments(tok, s.input_ids, s.loss_mask) == [want]
    # the unsupervised part before it is the prompt exactly as the server rendered it
    first = s.loss_mask.index(1)
    assert tok.decode(s.input_ids[:first]) == tok.apply_chat_template(msgs[:1], tokenize=False,
                                                                      add_generation_prompt=True, **tpl.kwargs)
    assert s.parts.count(1) > 0 if thinking else s.parts.count(1) == 0


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "no-thinking"])
@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_three_turns_each_trained_on_the_history_it_was_generated_after(name, thinking):
    tok, tpl, msgs, seqs = _encode(name, thinking, 3)
    wants = [EMITTED[name, thinking].format(r=REASONING[k], a=ANSWERS[k]) for k in range(3)]
    if name == "kimi26" and not thinking:
        # Kimi renders a finished turn as `<think></think>{answer}<|im_end|>`: with thinking
        # off that is what the target saw, so history is kept and one sequence holds all.
        assert len(seqs) == 1 and supervised_segments(tok, seqs[0].input_ids, seqs[0].loss_mask) == wants
        return
    # Qwen drops earlier reasoning (and its empty think blocks), Kimi empties earlier think
    # blocks: a sequence per turn, supervising only that turn.
    assert [s.turns for s in seqs] == [[0], [1], [2]]
    for k, s in enumerate(seqs):
        assert supervised_segments(tok, s.input_ids, s.loss_mask) == [wants[k]]
        prompt = tok.decode(s.input_ids[:s.loss_mask.index(1)])
        history = msgs[:2 * k + 1]
        assert prompt == tok.apply_chat_template(history, tokenize=False, add_generation_prompt=True, **tpl.kwargs)
        assert all(a in prompt for a in ANSWERS[:k]) and not any(r in prompt for r in REASONING[:k])


def test_preserved_thinking_keeps_one_sequence():
    # Qwen3.6's preserve_thinking: every turn keeps its reasoning in history, so the rendering
    # of a turn's history is a prefix of the next one's.
    tok, tpl, msgs, seqs = _encode("qwen36", True, 3, {"preserve_thinking": True})
    assert len(seqs) == 1
    assert supervised_segments(tok, seqs[0].input_ids, seqs[0].loss_mask) == [
        EMITTED["qwen36", True].format(r=REASONING[k], a=ANSWERS[k]) for k in range(3)]


def test_kimi_terminator_is_not_its_eos():
    tpl = ChatTemplate(kimi26(), {"thinking": True}, "thinking")
    assert kimi26().eos_token == "[EOS]" and tpl.terminator == "<|im_end|>"
    assert tpl.reasoning_end == "</think>" and tpl.opens_reasoning
    assert ChatTemplate(qwen3(), {}, "enable_thinking").opens_reasoning is False


def test_a_trace_cut_inside_its_reasoning_is_all_reasoning():
    tok = qwen36()
    tpl = ChatTemplate(tok, {}, "enable_thinking")
    msgs = [{"role": "user", "content": QUESTIONS[0]}, {"role": "assistant", "content": ""}]
    [s] = encode_turns(tpl, turns(tpl, msgs, ["Adding 2 and 3 gives"], ["length"], None, True), 4096)
    assert supervised_segments(tok, s.input_ids, s.loss_mask) == ["Adding 2 and 3 gives"]
    assert s.parts.count(1) == sum(s.loss_mask) and s.parts.count(2) == 0


def test_stored_ids_are_supervised_exactly():
    tok = qwen36()
    tpl = ChatTemplate(tok, {}, "enable_thinking")
    msgs, reasoning = _conversation(1, True)
    emitted = tok(EMITTED["qwen36", True].format(r=REASONING[0], a=ANSWERS[0]), add_special_tokens=False)["input_ids"]
    # ids the server generated, tokenized differently from a re-rendering ("5." as "5" + ".")
    other = emitted[:-3] + tok(".", add_special_tokens=False)["input_ids"] + emitted[-2:]
    [s] = encode_turns(tpl, turns(tpl, msgs, reasoning, ["stop"], [other], True), 4096)
    assert [t for t, m in zip(s.input_ids, s.loss_mask) if m] == other
    assert s.ids_differ == (other != emitted)
    [same] = encode_turns(tpl, turns(tpl, msgs, reasoning, ["stop"], [emitted], True), 4096)
    assert same.ids_differ == 0 and [t for t, m in zip(same.input_ids, same.loss_mask) if m] == emitted


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_the_stage_tokenizes_every_fixture_row(name, tmp_path):
    tok = TOKENIZERS[name]()
    model = save_to(tok, tmp_path / "model")
    rows = []
    for n in (1, 3):
        msgs, reasoning = _conversation(n, True)
        rows.append({"id": f"c{n}", "split": "train", "sample": 0, "messages": msgs, "reasoning": reasoning,
                     "finish_reason": ["stop"] * n})
    # one cut inside its reasoning, one whose answer the template cannot have rendered
    rows.append({"id": "cut", "split": "train", "sample": 0, "messages": [
        {"role": "user", "content": "Q"}, {"role": "assistant", "content": ""}], "reasoning": ["Thinking about Q and"],
        "finish_reason": ["length"]})
    write_parquet(tmp_path / "answers.parquet", rows)
    params = parse_params({**DEFAULTS, "chat": {"thinking": "on", "thinking_kwarg": KWARG[name]}})
    tokenize.run(params, model, tmp_path / "answers.parquet", tmp_path / "tokens.parquet", tmp_path / "m.json")
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["unrendered"] == 0 and m["conversations"] == 3
    assert m["rows"] == 5 and m["conversations_split_by_turn"] == 1 and m["sequences_per_conversation"] == 1.667
    assert m["reasoning_tokens"] > m["answer_tokens"] > 0
    ids = [r["id"] for r in read_parquet(tmp_path / "tokens.parquet")]
    assert ids == ["c1", "c3@0", "c3@1", "c3@2", "cut"]
