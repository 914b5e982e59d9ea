"""Stage `mix`: exact and near-duplicate removal, decontamination, mix by category, split.

    draftline mix --prompts FILE --train FILE --eval FILE --metrics FILE --plot FILE

Every step is a frame operation (polars) on the prompts and their user text; near-
duplicate removal and decontamination hash the text a chunk at a time.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ..cost import Cost
from ..io import write_json, write_tsv
from . import schema
from .decontaminate import decontaminate
from .dedupe import counts, dedupe, near_dedupe
from .heldout import in_eval_order
from .sampling import add_followups, mix_by_category, split


def cap_per_source(evals: pl.DataFrame, per_source: int | None) -> pl.DataFrame:
    """The first `per_source` eval prompts of each source in eval order, sources in the
    order their first prompt comes in that order."""
    if not per_source:
        return evals
    ordered = in_eval_order(evals).with_row_index("at")
    first = pl.col("at").min().over("source")
    return (ordered.filter(pl.int_range(pl.len()).over("source") < per_source)
            .sort(first, "at").drop("at"))


def run(params, prompts: Path, train_out: Path, eval_out: Path, metrics: Path, plot: Path) -> None:
    p = params.mix
    cost = Cost()
    rows = schema.read(prompts).with_columns(text=schema.user_text())
    train = rows.filter(pl.col("role") == "train")
    evals = rows.filter(pl.col("role") == "eval")
    del rows
    read = train.height + evals.height
    before = counts(train, "category")
    by_source_before = counts(train, "source")
    train, dup = dedupe(train)
    evals, _ = dedupe(evals)
    train, near, near_stats = near_dedupe(train, p.near_dedupe, p.seed)
    train, contaminated = decontaminate(train, evals, p.decontaminate_ngram)
    mixed, warnings = mix_by_category(train.drop("text"), p)
    del train
    for w in warnings:
        print(f"warning: mix: {w}")
    mixed = split(mixed, p.val_fraction, p.seed)
    mixed, followups = add_followups(mixed, p.followups, p.seed)
    n_train = mixed.filter(pl.col("split") == "train").height
    if not n_train:
        raise ValueError("mix: no training prompts left (check mix.category_weights and the sources)")
    evals = cap_per_source(evals.drop("text"), p.max_eval_per_source)
    after = counts(mixed, "category")
    schema.write(train_out, mixed, schema.MIXED)
    schema.write(eval_out, evals, schema.PROMPTS)
    cats = sorted(set(before) | set(after))
    write_json(metrics, {
        "train_before": sum(before.values()), "duplicates_removed": dup,
        "near_duplicates_removed": sum(near.values()), "near_duplicates_by_source": dict(sorted(near.items())),
        "near_dedupe": near_stats,
        "contaminated_removed": sum(contaminated.values()), "contaminated_by_source": dict(sorted(contaminated.items())),
        "by_source_before": dict(sorted(by_source_before.items())),
        "by_source_after": dict(sorted(counts(mixed, "source").items())),
        "train_after": n_train, "val_after": mixed.height - n_train, "eval_prompts": evals.height,
        "followups_added": sum(followups.values()), "followups_by_category": dict(sorted(followups.items())),
        "by_category_before": {c: before.get(c, 0) for c in cats},
        "by_category_after": {c: after.get(c, 0) for c in cats}, "warnings": warnings,
        "cost": cost.report(read),
    })
    # wide, a column per series: dvc.yaml's plot draws before and after side by side
    write_tsv(plot, ["category", "before", "after"], [[c, before.get(c, 0), after.get(c, 0)] for c in cats])
    print(f"mix: {mixed.height} prompts ({dup} duplicates, {sum(near.values())} near-duplicates, "
          f"{sum(contaminated.values())} contaminated removed); "
          f"{evals.height} eval prompts")
