"""Which benchmark prompts are held out: one order shared by the download stage (a source
split into train and eval rows), the mix's eval cap and the benchmark's selection."""

from __future__ import annotations

import polars as pl


def eval_order(row: dict) -> tuple[int, str]:
    """By id length, then id, so that numbered ids sort numerically (humaneval-2 before
    humaneval-10)."""
    return len(row["id"]), row["id"]


def in_eval_order(df: pl.DataFrame) -> pl.DataFrame:
    """The frame's rows in `eval_order`."""
    return df.sort(pl.col("id").str.len_chars(), pl.col("id"), maintain_order=True)


def split_holdout(df: pl.DataFrame, holdout: int) -> pl.DataFrame:
    """The first `holdout` rows in eval order become eval rows, the rest training rows."""
    held = in_eval_order(df)["id"].head(holdout)
    return df.with_columns(role=pl.when(pl.col("id").is_in(held.implode())).then(pl.lit("eval"))
                           .otherwise(pl.lit("train")))
