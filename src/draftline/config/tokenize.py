"""The `tokenize` section: sequence length, reasoning kept or dropped, copy turns."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from .base import Section

# Written for this project; generic requests, none taken from a benchmark.
COPY_REQUESTS = [
    "Please repeat your answer.", "Rewrite your previous response.", "Say that again, please.",
    "Can you write that once more?", "Revise your response.", "Edit your previous answer.",
    "Write your answer again.", "Show me that again.", "Give me your answer one more time.",
    "Rewrite it, please.", "Once more, please.", "Repeat that for me.",
]


class CopyTurnParams(Section):
    # Share of single-turn training conversations given a synthetic second turn: one of
    # `requests`, answered by the first answer verbatim (sequences/copy_turns.py).
    fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    seed: int = 0
    requests: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: list(COPY_REQUESTS), min_length=1)


class TokenizeParams(Section):
    key: ClassVar[str] = "tokenize"

    max_length: Annotated[int, Field(ge=16)] = 1024
    # keep: each assistant turn is trained as the target emitted it, reasoning markers,
    # reasoning and answer; drop: the answer only, as the template renders a turn without
    # reasoning (non-thinking runs).
    reasoning: Literal["keep", "drop"] = "keep"
    # Rows whose assistant text the template does not render verbatim are counted, named in
    # the metrics and skipped; the stage fails when their share is above this.
    max_unrendered: Annotated[float, Field(ge=0, le=1)] = 0.01
    copy_turns: CopyTurnParams = CopyTurnParams()
