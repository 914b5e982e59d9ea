"""`draftline extract --plan-only`: what an extraction will store, for every state dtype and
teacher, before anything runs: bytes per token, total size, shards, and whether it fits.

    draftline extract --plan-only                                  # this project's tokens and target
    draftline extract --plan-only --tokens-total 200000000 --layers 5 --hidden-size 5120
                                                                   # Qwen3.6-27B before tokenizing

With a token count instead of the tokens file, the rows are taken as `--row-tokens` each
(the plan packs whole rows into shards, so a row's size moves the shard count a little).
"""

from __future__ import annotations

from pathlib import Path

from .plan import TEACHERS, Record, free_bytes, human, plan
from .state_dtype import STATE_DTYPES


def synthetic_lengths(total: int, row_tokens: int) -> list[int]:
    """`total` tokens as rows of `row_tokens`, the last one shorter."""
    full, rest = divmod(total, row_tokens)
    return [row_tokens] * full + ([rest] if rest else [])


def plan_table(lengths: list[int], layers: int, hidden: int, shard_bytes: int, top_k: int,
               configured: tuple[str, str], location: Path, margin: float) -> list[str]:
    """Lines: the plan of each state dtype x teacher over rows of `lengths`, the configured one
    (state_dtype, teacher) marked, then whether it fits where its shards go."""
    lines = [f"extract plan: {sum(lengths):,} tokens in {len(lengths):,} rows, {layers} layers x {hidden} "
             f"(+ the final state when it is the teacher), shards of <= {human(shard_bytes)}",
             f"  {'state dtype':<14} {'teacher':<8} {'B/token':>9} {'total':>9} {'shards':>8}"]
    mine = None
    for state_dtype in STATE_DTYPES:
        for teacher in TEACHERS:
            record = Record(hidden, layers, teacher, top_k if teacher == "top_k" else 0, state_dtype)
            p = plan(lengths, record, shard_bytes)
            here = (state_dtype, teacher) == configured
            mine = p if here else mine
            lines.append(f"{'*' if here else ' '} {state_dtype:<14} {teacher:<8} {record.bytes_per_token:>9,} "
                         f"{human(p.total_bytes):>9} {len(p.shards):>8,}")
    free = free_bytes(location)
    need = mine.total_bytes * (1 + margin)
    verdict = "fits" if need <= free else "does NOT fit"
    lines.append(f"* params: {human(mine.total_bytes)} (+{margin:.0%} margin) {verdict} in the {human(free)} free "
                 f"at {location}")
    return lines
