"""The mix stage's seeded samples: prompts by category weight, the train/val split and
follow-up turns (mix.py runs them in order).

Each choice is a pure function of the seed and the prompts' ids, so adding prompts does
not reshuffle the choices made for the others.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from typing import TYPE_CHECKING

import polars as pl

from .dedupe import counts

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.mix import FollowupParams, MixParams


def mix_by_category(df: pl.DataFrame, params: MixParams) -> tuple[pl.DataFrame, list[str]]:
    """Sample without replacement to match the category weights; return rows and warnings."""
    have = counts(df, "category")
    weights = {c: w for c, w in params.category_weights.items() if w > 0}
    warnings = []
    if not weights:
        return df.clear(), ["every category weight is zero"]
    # A weighted category no source supplies (a source left out of download.sources) is
    # left out with a warning; counting it would size the whole mix to zero.
    for c in sorted(c for c in weights if not have.get(c)):
        warnings.append(f"category '{c}' has no prompts; left out of the mix")
        del weights[c]
    if not weights:
        return df.clear(), warnings
    total_w = sum(weights.values())
    if params.total is None:
        # The largest mix that meets every weight exactly.
        total = min(have.get(c, 0) / (w / total_w) for c, w in weights.items())
        total = int(math.floor(total + 1e-9))
    else:
        total = params.total
    rng = random.Random(params.seed)
    parts = []
    for cat in sorted(weights):
        pool = df.filter(pl.col("category") == cat).sort("id", maintain_order=True)
        want = round(total * weights[cat] / total_w)
        if want > pool.height:
            warnings.append(f"category '{cat}' has {pool.height} prompts, weight asks for {want}")
            want = pool.height
        # The positions random.sample would pick from the pool as a list.
        parts.append(pool[rng.sample(range(pool.height), want)])
    return pl.concat(parts).sort("id", maintain_order=True), warnings


def _unit(key: str, h: bytes | None = None) -> float:
    h = h or hashlib.sha1(key.encode()).digest()
    return int.from_bytes(h[:4], "big") / 0xFFFFFFFF


def split(df: pl.DataFrame, val_fraction: float, seed: int) -> pl.DataFrame:
    """Assign split=train|val deterministically by hashing (seed, id): stable under
    additions, so adding prompts does not reshuffle the validation set."""
    val = [_unit(f"{seed}:{i}") < val_fraction for i in df["id"].to_list()]
    return df.with_columns(split=pl.when(pl.Series(val, dtype=pl.Boolean)).then(pl.lit("val"))
                           .otherwise(pl.lit("train")))


def add_followups(df: pl.DataFrame, p: FollowupParams, seed: int) -> tuple[pl.DataFrame, Counter]:
    """Give a share of the single-turn prompts a second user turn (rewrite, explain, test...).

    The target then answers turn 1 and, with its own answer in view, turn 2: the MT-Bench
    second-turn situation, where much of the answer restates the first. A drafter learns to
    copy from context only if its data has such turns. Which prompts, and which follow-up,
    is a pure function of (seed, id), so adding prompts changes no earlier choice."""
    if not p.fraction or not df.height:
        return df, Counter()
    users = df.select(pl.col("messages").list.eval(pl.element().struct.field("role") == "user").list.sum())
    turns, added = [], Counter()
    for rid, cat, n_users in zip(df["id"].to_list(), df["category"].to_list(), users.to_series().to_list()):
        options = p.turns.get(cat, [])
        h = hashlib.sha1(f"followup:{seed}:{rid}".encode()).digest()
        if n_users == 1 and options and _unit("", h) < p.fraction:
            turns.append(options[int.from_bytes(h[4:8], "big") % len(options)])
            added[cat] += 1
        else:
            turns.append(None)
    turn = pl.Series("turn", turns, dtype=pl.String)
    second = pl.concat_list(pl.struct(pl.lit("user").alias("role"), turn.alias("content")))
    out = df.with_columns(messages=pl.when(turn.is_not_null()).then(pl.col("messages").list.concat(second))
                          .otherwise(pl.col("messages")))
    return out, added
