"""What a backend returns for one assistant turn, and reasoning-text separation."""

from __future__ import annotations

import re
from dataclasses import dataclass

_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


@dataclass
class Answer:
    text: str
    reasoning: str | None
    finish_reason: str  # "stop" | "length" | whatever the server said
    prompt_tokens: int
    completion_tokens: int
    served_model: str | None = None


def split_reasoning(text: str, reasoning: str | None = None) -> tuple[str, str | None]:
    """Keep reasoning apart from the answer: a server's `reasoning_content` wins, else a
    leading <think>...</think> block in the text."""
    if reasoning:
        return text, reasoning
    m = _THINK.match(text)
    if m:
        return text[m.end():], m.group(1).strip()
    return text, None
