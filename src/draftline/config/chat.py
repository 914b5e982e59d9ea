"""The `chat` section: how the chat template is called, alike by regenerate, tokenize and benchmark."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import field_validator

from .base import Section


class ChatParams(Section):
    key: ClassVar[str] = "chat"

    """How the target's chat template is called: the same by regenerate (the requests),
    tokenize (the training text) and benchmark (the prompts), so the three render alike."""

    # Thinking mode of a reasoning target: passed as template kwargs
    # {<thinking_kwarg>: true/false}; "default" passes nothing and lets the template decide.
    thinking: Literal["default", "on", "off"] = "default"
    # Template variable that switches thinking: Qwen3.x `enable_thinking`, Kimi K2.x `thinking`.
    thinking_kwarg: str = "enable_thinking"
    # Any other template variables (e.g. `preserve_thinking: true`), passed as they are.
    chat_template_kwargs: dict[str, Any] = {}

    @field_validator("thinking", mode="before")
    @classmethod
    def _yaml_on_off(cls, v: object) -> object:
        # YAML 1.1 reads a bare `on` / `off` as a boolean: take it as meant.
        return {True: "on", False: "off"}.get(v, v) if isinstance(v, bool) else v

    def template_kwargs(self) -> dict[str, Any]:
        kw = dict(self.chat_template_kwargs)
        if self.thinking != "default":
            kw[self.thinking_kwarg] = self.thinking == "on"
        return kw
