"""Which benchmark prompts are held out: one order shared by the download stage (a source
split into train and eval rows), the mix's eval cap and the benchmark's selection."""

from __future__ import annotations


def eval_order(row: dict) -> tuple[int, str]:
    """By id length, then id, so that numbered ids sort numerically (humaneval-2 before
    humaneval-10)."""
    return len(row["id"]), row["id"]


def split_holdout(rows: list[dict], holdout: int) -> list[dict]:
    """The first `holdout` rows in eval order become eval rows, the rest training rows."""
    held = {r["id"] for r in sorted(rows, key=eval_order)[:holdout]}
    return [{**r, "role": "eval" if r["id"] in held else "train"} for r in rows]
