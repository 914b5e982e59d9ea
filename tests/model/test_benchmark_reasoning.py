"""A thinking target's benchmark: the reasoning end marker read from the chat template, tau
split at it, second turns sent back with their reasoning, and a non-thinking target's
metrics exactly as before.

The thinking template is the published Qwen3 one (tokenizer_config.json of Qwen/Qwen3-*),
its tool-calling branches left out; set on the embedded SmolLM2 tokenizer, where `</think>`
is several tokens, the harder case for locating it in a generation."""

import pytest

from draftline.config.benchmark import BenchmarkParams

from draftline.config.chat import ChatParams

from draftline.config.drafter import DrafterParams
from draftline.decode.chain import plain
from draftline.decode.measure import _summary, run_benchmark
from draftline.decode.reasoning import reasoning_split, split_steps
from draftline.decode.requests import build_requests, encode_prompt
from draftline.decode.verify import Decoded
from draftline.drafter.model import build_drafter, drafter_config
from draftline.target.load import load_tokenizer

QWEN3 = r"""{%- if messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""

# Qwen3.6 thinking: the generation prompt itself opens the reasoning block.
OPENING = QWEN3.replace("""        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}""", """        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- else %}
        {{- '<think>\\n' }}
    {%- endif %}""")

PROMPTS = [{"source": "mtbench", "id": "q1", "messages": [
    {"role": "user", "content": "Name a prime number."},
    {"role": "user", "content": "Now name a bigger one."}]}]


def _tok(target_dir, template):
    tok = load_tokenizer(target_dir)  # a fresh one: the session's tokenizer keeps its own template
    tok.chat_template = template
    return tok


def _drafters(target_model, tokenizer):
    cfg = drafter_config(target_model.config, DrafterParams(num_layers=1, block_size=4), [1, 27],
                         tokenizer.convert_tokens_to_ids("<empty_output>"))
    return {"dflash": build_drafter(cfg, 0).eval()}


def test_the_marker_is_read_from_the_template(target_dir, tokenizer):
    assert reasoning_split(tokenizer, {}) is None  # SmolLM2's template has no reasoning
    qwen3 = _tok(target_dir, QWEN3)
    for thinking in ("default", "on", "off"):
        split = reasoning_split(qwen3, ChatParams(thinking=thinking).template_kwargs())
        assert (split.end, split.opened) == ("</think>", False)  # the model opens <think> itself
    opening = _tok(target_dir, OPENING)
    assert reasoning_split(opening, {}).opened
    assert not reasoning_split(opening, ChatParams(thinking="off").template_kwargs()).opened


def test_steps_count_for_the_part_they_start_in(target_dir):
    tok = _tok(target_dir, QWEN3)
    split = reasoning_split(tok, {})
    reasoning = tok.encode("<think>\nOne, two.\n</think>", add_special_tokens=False)
    tokens = reasoning + tok.encode("\n\nThree.", add_special_tokens=False) + [tok.eos_token_id]
    n = split.reasoning_tokens(tokens)
    assert n == len(reasoning) and len(tok.encode("</think>", add_special_tokens=False)) > 1
    # Steps start after the prefill's token: at 1, then 1 + the lengths before them. One
    # starts on the marker's last token (reasoning), one right after it (answer).
    first = n - 2
    acceptance = [first, 1, 2, len(tokens) - n - 2]
    assert split_steps(acceptance, n) == ([first, 1], [2, len(tokens) - n - 2])
    dec = Decoded(tokens, acceptance, 1.0)
    out = _summary([dec, Decoded(tokens[:3], [2], 1.0)], [dec], 4, True, [n, 3])
    assert out["tau_reasoning"] == ((first + 1) / 2 + 2) / 2 and out["tau_answer"] == (len(tokens) - n) / 2
    assert (out["reasoning_tokens"], out["answer_tokens"]) == (n + 3, len(tokens) - n)
    assert out["tau"] == (sum(acceptance) / 4 + 2) / 2
    # A generation without the marker: all reasoning when it started in it, else all answer.
    assert split.reasoning_tokens(reasoning[:-3]) == len(reasoning) - 3
    assert split.reasoning_tokens(tokens[n:]) == 0
    assert reasoning_split(_tok(target_dir, OPENING), {}).reasoning_tokens(tokens[3:n - 3]) == n - 6


def test_history_carries_the_reasoning_apart_from_the_answer(target_dir):
    split = reasoning_split(_tok(target_dir, QWEN3), {})
    tok = split.tok
    tokens = tok.encode("<think>\nOne, two.\n</think>\n\nThree.", add_special_tokens=False) + [tok.eos_token_id]
    assert split.history(tokens) == {"role": "assistant", "content": "Three.", "reasoning_content": "One, two."}
    plain_answer = tok.encode("Three.", add_special_tokens=False) + [tok.eos_token_id]
    assert split.history(plain_answer) == {"role": "assistant", "content": "Three."}


def test_a_thinking_target_reports_tau_per_part(target_dir, target_model, tokenizer):
    # The embedded target never writes </think>: behind an opening prompt all it writes is
    # reasoning, with thinking off all of it is answer.
    tok = _tok(target_dir, OPENING)
    bp = BenchmarkParams(prompts_per_source=1, max_new_tokens=6, baselines=["prompt_lookup"])
    stop = [tok.eos_token_id]
    for thinking, part, other in (("on", "reasoning", "answer"), ("off", "answer", "reasoning")):
        kw = ChatParams(thinking=thinking).template_kwargs()
        metrics, rows = run_benchmark(target_model, tok, _drafters(target_model, tokenizer), PROMPTS, bp, stop, 4,
                                      kw)
        assert metrics["mismatches"] == 0 and metrics["reasoning_end"] == "</think>"
        d = metrics["greedy"]["all"]["dflash"]
        tokens = sum(r["tokens"] for r in rows if r["method"] == "dflash")
        assert d[f"tau_{part}"] == d["tau"] and d[f"tau_{other}"] is None
        assert (d[f"{part}_tokens"], d[f"{other}_tokens"]) == (tokens, 0)
        assert metrics[f"tau_{part}"] == d["tau"] and metrics[f"tau_{other}"] is None
        assert "tau_reasoning" not in metrics["greedy"]["all"]["prompt_lookup"]  # its steps are not real
        assert all(r["reasoning_tokens"] == (r["tokens"] if part == "reasoning" else 0) for r in rows)
    # Turn two follows turn one's answer, sent back as reasoning since it never left it.
    first, second = build_requests(target_model, tok, PROMPTS, bp, stop, {})
    assert first.answer.tokens == plain(target_model, first.input_ids, 6, stop).tokens
    assert second.messages[1] == {"role": "assistant", "content": "",
                                  "reasoning_content": tok.decode(first.answer.tokens,
                                                                  skip_special_tokens=True).strip()}


def test_a_target_that_does_not_think_keeps_its_metrics(target_model, tokenizer):
    bp = BenchmarkParams(prompts_per_source=1, max_new_tokens=6, baselines=["untrained", "prompt_lookup"])
    drafters = _drafters(target_model, tokenizer)
    drafters["untrained"] = build_drafter(drafters["dflash"].config, 1).eval()
    metrics, rows = run_benchmark(target_model, tokenizer, drafters, PROMPTS, bp, [tokenizer.eos_token_id], 4,
                                  ChatParams().template_kwargs())
    assert list(metrics) == ["requests", "prompts", "block_size", "max_new_tokens", "mismatches", "greedy", "tau",
                             "speedup"]
    entry = metrics["greedy"]["all"]
    assert list(entry) == ["requests", "target_tokens_per_second", "dflash", "untrained", "prompt_lookup"]
    for m in ("dflash", "untrained"):
        assert list(entry[m]) == ["tau", "tokens_per_second", "speedup", "histogram", "position_acceptance"]
    assert list(entry["prompt_lookup"]) == ["tau", "tokens_per_second", "speedup"]
    assert {k for r in rows for k in r} == {"source", "id", "turn", "temperature", "method", "prompt_tokens", "tokens",
                                            "steps", "seconds", "acceptance", "text", "equal_to_target"}


@pytest.mark.parametrize("template", [None, QWEN3])
def test_prompts_render_with_the_chat_kwargs(target_dir, template):
    tok = _tok(target_dir, template) if template else load_tokenizer(target_dir)
    msgs = [{"role": "user", "content": "Hi"}]
    off = ChatParams(thinking="off").template_kwargs()
    text = tok.decode(encode_prompt(tok, msgs, off)[0])
    assert text.endswith("<think>\n\n</think>\n\n") == bool(template)
