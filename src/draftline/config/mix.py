"""The `mix` section: dedupe, decontamination, category weights, the split and follow-up turns."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from .base import PositiveInt, Section

# Second user turns per category (mix.followups); also written for this project.
FOLLOWUP_TURNS = {
    "coding": ["Add a docstring and type hints to that function.", "Rewrite the function without using any loops.",
               "Now write three unit tests for it.", "Explain the code line by line.",
               "Make it raise a ValueError on invalid input."],
    "math": ["Explain each step in more detail.", "Check your answer in a different way.",
             "Solve the same problem again with every number doubled.",
             "Write the solution as a short Python program."],
    "reasoning": ["Summarize your explanation in three bullet points.", "Explain it to a ten-year-old.",
                  "What is the strongest objection to your answer?"],
    "writing": ["Rewrite it in a more formal tone.", "Make it half as long.", "Rewrite it as a short poem.",
                "Rewrite it so that every sentence is shorter."],
    "chat": ["Can you put that into a numbered list?", "Summarize your answer in two sentences.",
             "Give me a concrete example."],
}


class NearDedupeParams(Section):
    enabled: bool = True
    # Words per shingle, MinHash permutations, LSH bands (permutations / bands rows each)
    # and the estimated Jaccard similarity at or above which two prompts are duplicates.
    shingle: Annotated[int, Field(ge=1, le=32)] = 3
    num_perm: Annotated[int, Field(ge=8, le=1024)] = 128
    bands: PositiveInt = 32
    threshold: Annotated[float, Field(gt=0, le=1)] = 0.7

    @model_validator(mode="after")
    def _bands_divide(self) -> "NearDedupeParams":
        if self.num_perm % self.bands:
            raise ValueError(f"num_perm ({self.num_perm}) must be a multiple of bands ({self.bands})")
        return self


class FollowupParams(Section):
    # Share of single-turn prompts (train and val) that get a second user turn.
    fraction: Annotated[float, Field(ge=0, le=1)] = 0.0
    # Follow-up turns per category; a prompt of a category not listed keeps one turn.
    turns: dict[str, list[Annotated[str, Field(min_length=1)]]] = Field(
        default_factory=lambda: {k: list(v) for k, v in FOLLOWUP_TURNS.items()})


class MixParams(Section):
    key: ClassVar[str] = "mix"

    seed: int = 0
    # Near-duplicate removal (MinHash LSH) after exact dedupe.
    near_dedupe: NearDedupeParams = NearDedupeParams()
    # Relative weight per category; categories not listed are dropped (and counted).
    category_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(min_length=1)
    # Training prompts after mixing; null = the largest total that meets every weight.
    total: PositiveInt | None = None
    # Share of the mixed prompts held out for the drafter's eval loss.
    val_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.05
    # Training prompts sharing an n-gram of this many words with an eval prompt are dropped.
    decontaminate_ngram: PositiveInt = 13
    # Eval prompts kept per eval source (null = all); benchmark takes its subset from these.
    max_eval_per_source: PositiveInt | None = None
    # Second turns for single-turn training prompts (prompts/sampling.py, add_followups).
    followups: FollowupParams = FollowupParams()
