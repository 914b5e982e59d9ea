"""What a backend returns for one assistant turn, and reasoning-text separation."""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)
_CLOSE = "</think>"


@dataclass
class Answer:
    text: str
    reasoning: str | None
    finish_reason: str  # "stop" | "length" | whatever the server said
    prompt_tokens: int
    completion_tokens: int
    served_model: str | None = None
    endpoint: str | None = None


def split_reasoning(text: str, reasoning: str | None = None) -> tuple[str, str | None]:
    """Keep reasoning apart from the answer.

    A server's reasoning field wins (vLLM/SGLang with a reasoning parser). Without a parser
    the text carries it: a leading <think>...</think> block, or, for templates that put
    `<think>` in the generation prompt (Qwen3-2507 thinking models), text up to a lone
    `</think>`. A truncated answer still inside <think> is all reasoning.
    """
    if reasoning:
        return text, reasoning
    m = _THINK.match(text)
    if m:
        return text[m.end():], m.group(1).strip()
    stripped = text.lstrip()
    if stripped.startswith("<think>"):
        return "", stripped[len("<think>"):].strip()
    if _CLOSE in text and "<think>" not in text:
        head, _, tail = text.partition(_CLOSE)
        return tail.lstrip(), head.strip()
    return text, None
