"""Render a conversation with the target's chat template and mark the assistant's tokens.

The mask is found from character spans, not regexes over rendered text: for each
assistant turn we render the history with the generation prompt (where the answer starts)
and locate the answer plus the end-of-turn token after it, then map spans to tokens with
the tokenizer's offsets. Any template whose rendering of a prefix is a prefix of the whole
works; one that is not (it rewrites history) fails loudly instead of masking wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass


class TemplateError(ValueError):
    pass


@dataclass
class Encoded:
    input_ids: list[int]
    loss_mask: list[int]
    truncated: bool


def _render(tok, messages, add_generation_prompt: bool) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def assistant_spans(tok, messages: list[dict], finish_reasons: list[str]) -> tuple[str, list[tuple[int, int]]]:
    full = _render(tok, messages, False)
    eos = tok.eos_token
    spans = []
    turn = 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prefix = _render(tok, messages[:i], True)
        if not full.startswith(prefix):
            raise TemplateError("chat template output for a prefix is not a prefix of the whole conversation")
        start = len(prefix)
        if not full.startswith(m["content"], start):
            raise TemplateError(f"assistant turn {turn} is not rendered verbatim by the chat template")
        end = start + len(m["content"])
        # A finished answer is supervised through its end-of-turn token: the drafter must
        # learn to propose it. A length-truncated answer never produced one.
        fr = finish_reasons[turn] if turn < len(finish_reasons) else "stop"
        if fr != "length" and eos and full.startswith(eos, end):
            end += len(eos)
        spans.append((start, end))
        turn += 1
    return full, spans


def encode(tok, messages: list[dict], finish_reasons: list[str], max_length: int) -> Encoded:
    text, spans = assistant_spans(tok, messages, finish_reasons)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    mask = [0] * len(ids)
    s = 0
    for t, (a, b) in enumerate(offsets):
        while s < len(spans) and spans[s][1] <= a:
            s += 1
        # A token is supervised when it lies inside an assistant span.
        if s < len(spans) and a >= spans[s][0] and b <= spans[s][1] and b > a:
            mask[t] = 1
    truncated = len(ids) > max_length
    return Encoded(ids[:max_length], mask[:max_length], truncated)
