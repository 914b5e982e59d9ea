"""What a backend returns for one assistant turn, and reasoning-text separation."""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN, _CLOSE = "<think>", "</think>"
_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


@dataclass
class Answer:
    text: str
    reasoning: str | None
    finish_reason: str  # "stop" | "length" | whatever the server said
    prompt_tokens: int
    completion_tokens: int
    served_model: str | None = None
    endpoint: str | None = None
    # The ids the target generated for this turn (after the generation prompt, its stop
    # token included when it emitted one); None when the backend does not say.
    token_ids: list[int] | None = None
    # Asked for rows in the agreement sample (agreement.py), per generated token: the
    # token, its log-prob under the backend's raw distribution (before temperature and
    # top-p), and the backend's own top-1 token. Tokens are named `token_id:N` where the
    # backend gives ids (vLLM's spelling), else by their text (logprobs.py). None when
    # not asked or the backend does not say.
    logprob_tokens: list[str] | None = None
    logprobs: list[float] | None = None
    top1: list[str] | None = None

    def history(self) -> dict:
        """The assistant message sent back before a later user turn: the answer as content,
        its reasoning as `reasoning_content` (templates that drop earlier reasoning drop it,
        ones asked to preserve it render it), so the history is what tokenize renders."""
        msg = {"role": "assistant", "content": self.text}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        return msg


def opens_reasoning(prompt: str) -> bool:
    """Whether a rendered generation prompt leaves a reasoning block open (Qwen3.6 thinking
    ends it with `<think>\\n`): the target's first token is then already reasoning."""
    return prompt.rstrip().endswith(_OPEN)


def split_reasoning(text: str, reasoning: str | None = None, opened: bool = False) -> tuple[str, str | None]:
    """Keep reasoning apart from the answer.

    A server's reasoning field wins (vLLM/SGLang with a reasoning parser). Without a parser
    the text carries it: a leading <think>...</think> block, or, for templates that put
    `<think>` in the generation prompt (`opened`, or Qwen3-2507 thinking models), text up
    to a lone `</think>`. A turn cut inside its reasoning (no `</think>` after an opening
    tag, or none at all after an opened prompt) is all reasoning with an empty answer.
    """
    if reasoning:
        return text, reasoning
    m = _THINK.match(text)
    if m:
        return text[m.end():], m.group(1).strip()
    stripped = text.lstrip()
    if stripped.startswith(_OPEN):
        return "", stripped[len(_OPEN):].strip()
    if _CLOSE in text and _OPEN not in text:
        head, _, tail = text.partition(_CLOSE)
        return tail.lstrip(), head.strip()
    if opened and _CLOSE not in text:
        return "", text.strip() or None
    return text, None


def truncated_in_reasoning(finish_reason: str, answer: str, reasoning: str | None) -> bool:
    """A turn cut by max_new_tokens before its reasoning end marker: reasoning, no answer."""
    return finish_reason == "length" and bool(reasoning) and not answer
