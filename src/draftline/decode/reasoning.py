"""A thinking target's generation in two parts, reasoning then answer, for the benchmark.

A drafter may accept far more of the reasoning than of the answer (or the reverse), and a
thinking target spends most of its tokens reasoning, so one tau hides what matters. The
marker between the parts (`</think>`) is read from the target's own chat template
(chat.ChatTemplate's probes), never assumed; a template without reasoning has no split, and
the benchmark reports exactly what it reports for any other target.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..chat import ChatTemplate, opening



@dataclass(frozen=True)
class ReasoningSplit:
    tok: object
    end: str  # the marker that closes the reasoning, as the template renders it (`</think>`)
    opened: bool  # the generation prompt opens the reasoning block: generation starts in it

    @property
    def opening(self) -> str:
        return opening(self.end)

    def _text(self, tokens: list[int]) -> str:
        # Special tokens kept: the marker may be one (Kimi), and it must stay visible.
        return self.tok.decode(tokens, skip_special_tokens=False)

    def reasoning_tokens(self, tokens: list[int]) -> int:
        """How many leading generated tokens are reasoning, the end marker included.

        Located in the decoded text rather than by the marker's ids: on a tokenizer without
        the marker as one token it is split differently in context than alone. A generation
        without the marker is all reasoning when it started in the reasoning block (cut by
        max_new_tokens), else all answer (thinking off, or a target that did not think)."""
        whole = self._text(tokens)
        if self.end not in whole:
            started = self.opened or whole.lstrip().startswith(self.opening)
            return len(tokens) if started else 0
        lo, hi = 1, len(tokens)  # the shortest prefix whose text holds the marker: its first occurrence
        while lo < hi:
            mid = (lo + hi) // 2
            if self.end in self._text(tokens[:mid]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def history(self, tokens: list[int]) -> dict:
        """The assistant message a chat client sends back after this generation: the answer
        as content, the reasoning as `reasoning_content` (the field Qwen3.x and Kimi-K2.x
        templates read; those that drop earlier reasoning drop it, as they would for a client)."""
        n = self.reasoning_tokens(tokens)
        content = self.tok.decode(tokens[n:], skip_special_tokens=True)
        if not n:
            return {"role": "assistant", "content": content}
        reasoning = self.tok.decode(tokens[:n], skip_special_tokens=True)
        reasoning = reasoning.rpartition(self.end)[0] if self.end in reasoning else reasoning
        reasoning = reasoning.strip()
        if reasoning.startswith(self.opening):
            reasoning = reasoning[len(self.opening):].strip()
        msg = {"role": "assistant", "content": content.lstrip()}
        if reasoning:
            msg["reasoning_content"] = reasoning
        return msg


def reasoning_split(tok, template_kwargs: dict) -> ReasoningSplit | None:
    """The template's reasoning end marker and whether its generation prompt opens the
    block (chat.ChatTemplate's probes); None when it renders no reasoning."""
    tpl = ChatTemplate(tok, template_kwargs)
    return ReasoningSplit(tok, tpl.reasoning_end, tpl.opens_reasoning) if tpl.reasoning_end else None


def split_steps(acceptance: list, reasoning_tokens: int) -> tuple[list, list]:
    """Acceptance lengths of the steps that start in the reasoning, and of those that start
    in the answer. The first token comes from the prefill, so step k starts at token
    1 + sum(acceptance[:k]); a step that crosses the marker counts where it started."""
    reasoning, answer = [], []
    at = 1
    for a in acceptance:
        (reasoning if at < reasoning_tokens else answer).append(a)
        at += a
    return reasoning, answer
