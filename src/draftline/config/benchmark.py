"""The `benchmark` section: the held-out decoding runs and their baselines."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from .base import PositiveInt, Section


class BenchmarkParams(Section):
    key: ClassVar[str] = "benchmark"

    # Prompts per eval source (HumanEval prompt, MT-Bench question with both turns, ...).
    prompts_per_source: PositiveInt = 8
    max_new_tokens: PositiveInt = 40
    # User turns answered per prompt (MT-Bench has two; the second follows the target's own
    # first answer). 1 = first turns only.
    max_turns: PositiveInt = 2
    # Baselines measured in the same run: an untrained drafter of the same architecture and
    # transformers' n-gram prompt lookup (prompt_lookup_num_tokens = block_size - 1).
    baselines: list[Literal["untrained", "prompt_lookup"]] = ["untrained", "prompt_lookup"]
    # Sampling temperatures: 0 = greedy (output checked token for token against plain
    # greedy decoding); > 0 = speculative sampling with lossless rejection sampling.
    temperatures: list[Annotated[float, Field(ge=0)]] = Field(default_factory=lambda: [0.0], min_length=1)
    # Draft trees from the same drafter pass, greedy only (decode/tree.py): each
    # budget is the number of drafted nodes the target verifies per step (the chain verifies
    # block_size - 1). Reported beside the chain as method `tree_<budget>`.
    tree_budgets: list[PositiveInt] = []
    seed: int = 0

    @model_validator(mode="after")
    def _trees_need_greedy(self) -> "BenchmarkParams":
        if self.tree_budgets and 0.0 not in self.temperatures:
            raise ValueError("tree_budgets: draft trees are greedy only; add 0 to temperatures")
        if len(set(self.tree_budgets)) != len(self.tree_budgets):
            raise ValueError(f"tree_budgets: repeated budget in {self.tree_budgets}")
        return self
