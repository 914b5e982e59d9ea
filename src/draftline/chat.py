"""The target's chat template, called one way, and what it renders around an assistant turn.

Every stage that renders a conversation (regenerate's requests, tokenize's training text,
benchmark's prompts) passes the same `chat` kwargs (thinking switch and the rest), so the
three see the same text. What a template puts around a turn is found by rendering probes,
never assumed: the turn terminator of Kimi-style templates (`<|im_end|>`) is not the
tokenizer's `eos_token` (`[EOS]`), and a thinking template's generation prompt may already
open the reasoning block.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

# Probe texts: strings no template adds or rewrites, so their positions in a rendering
# mark where the template put the turn's parts.
_Q, _R, _A = "Q9f2", "R7c1", "A3e8"


@dataclass
class ChatTemplate:
    tok: object
    kwargs: dict
    thinking_kwarg: str | None = None  # chat.thinking_kwarg: how the template's thinking switches

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                            **self.kwargs)

    def ids(self, text: str) -> list[int]:
        return self.tok(text, add_special_tokens=False)["input_ids"]

    @cached_property
    def terminator(self) -> str:
        """The text the template closes an assistant turn with (`<|im_end|>`, `<|eot_id|>`):
        what follows the answer in a rendered turn, trailing whitespace left out (a model
        stops at the terminator; the newline after it is the template's, not the model's)."""
        turn = self.render([{"role": "user", "content": _Q}, {"role": "assistant", "content": _A}], False)
        at = turn.rfind(_A)
        if at < 0:
            raise ValueError("chat template does not render an assistant answer")
        return turn[at + len(_A):].rstrip()

    @cached_property
    def reasoning_end(self) -> str | None:
        """The marker between reasoning and answer (`</think>`), or None for a template
        without reasoning. Found where the template shows a finished turn's reasoning
        (Qwen3.x), else from what switching thinking off adds to the generation prompt: Kimi
        templates show no reasoning in a finished conversation, but close the think block
        they open (`<think>` -> `<think></think>`)."""
        turn = self.render([{"role": "user", "content": _Q},
                            {"role": "assistant", "content": _A, "reasoning_content": _R}], False)
        r, a = turn.find(_R), turn.rfind(_A)
        if 0 <= r < a and turn[r + len(_R):a].strip():
            return turn[r + len(_R):a].split()[-1]
        prompt = self.render([{"role": "user", "content": _Q}], True)
        if turn.startswith(prompt) and a > len(prompt):
            # What a finished turn puts between the generation prompt and the answer closes
            # the block that prompt opened (Kimi: `...<think>` then `</think>A`).
            closer = turn[len(prompt):a].strip()
            if closer and opening(closer) != closer and prompt.rstrip().endswith(opening(closer)):
                return closer
        if not self.thinking_kwarg:
            return None
        on, off = (self.tok.apply_chat_template([{"role": "user", "content": _Q}], tokenize=False,
                                                add_generation_prompt=True, **{**self.kwargs, self.thinking_kwarg: v})
                   for v in (True, False))
        added = off[len(on):] if off.startswith(on) and len(off) > len(on) else ""
        return added.split()[-1] if added.strip() else None

    @cached_property
    def opens_reasoning(self) -> bool:
        """Whether the generation prompt itself opens the reasoning block (Qwen3.6 thinking):
        then the target's first token is already reasoning."""
        if self.reasoning_end is None:
            return False
        prompt = self.render([{"role": "user", "content": _Q}], True)
        tail = prompt[prompt.find(_Q) + len(_Q):]
        return opening(self.reasoning_end) in tail and self.reasoning_end not in tail


def opening(end: str) -> str:
    """The marker that opens the block `end` closes."""
    return end.replace("/", "", 1)  # `</think>` -> `<think>`
