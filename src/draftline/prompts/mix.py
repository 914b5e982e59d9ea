"""Stage `mix`: exact and near-duplicate removal, decontamination, mix by category, split.

    draftline mix --prompts FILE --train FILE --eval FILE --metrics FILE --plot FILE
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click

from ..command import path_option, run_stage
from ..io import read_parquet, write_json, write_parquet, write_tsv
from .decontaminate import decontaminate
from .dedupe import dedupe, near_dedupe
from .heldout import eval_order
from .mixture import add_followups, mix_by_category, split


def run(params, prompts: Path, train_out: Path, eval_out: Path, metrics: Path, plot: Path) -> None:
    p = params.mix
    rows = read_parquet(prompts)
    train = [r for r in rows if r["role"] == "train"]
    evals = [r for r in rows if r["role"] == "eval"]
    before = Counter(r["category"] for r in train)
    by_source_before = Counter(r["source"] for r in train)
    train, dup = dedupe(train)
    evals, _ = dedupe(evals)
    train, near, near_stats = near_dedupe(train, p.near_dedupe, p.seed)
    train, contaminated = decontaminate(train, evals, p.decontaminate_ngram)
    mixed, warnings = mix_by_category(train, p)
    for w in warnings:
        print(f"warning: mix: {w}")
    mixed = split(mixed, p.val_fraction, p.seed)
    mixed, followups = add_followups(mixed, p.followups, p.seed)
    if not any(r["split"] == "train" for r in mixed):
        raise ValueError("mix: no training prompts left (check mix.category_weights and the sources)")
    if p.max_eval_per_source:
        by_src: dict[str, list] = {}
        for r in sorted(evals, key=eval_order):
            by_src.setdefault(r["source"], []).append(r)
        evals = [r for v in by_src.values() for r in v[: p.max_eval_per_source]]
    after = Counter(r["category"] for r in mixed)
    write_parquet(train_out, mixed)
    write_parquet(eval_out, evals)
    cats = sorted(set(before) | set(after))
    write_json(metrics, {
        "train_before": sum(before.values()), "duplicates_removed": dup,
        "near_duplicates_removed": sum(near.values()), "near_duplicates_by_source": dict(sorted(near.items())),
        "near_dedupe": near_stats,
        "contaminated_removed": sum(contaminated.values()), "contaminated_by_source": dict(sorted(contaminated.items())),
        "by_source_before": dict(sorted(by_source_before.items())),
        "by_source_after": dict(sorted(Counter(r["source"] for r in mixed).items())),
        "train_after": sum(1 for r in mixed if r["split"] == "train"),
        "val_after": sum(1 for r in mixed if r["split"] == "val"), "eval_prompts": len(evals),
        "followups_added": sum(followups.values()), "followups_by_category": dict(sorted(followups.items())),
        "by_category_before": {c: before.get(c, 0) for c in cats},
        "by_category_after": {c: after.get(c, 0) for c in cats}, "warnings": warnings,
    })
    rows_plot = [[c, "before", before.get(c, 0)] for c in cats] + [[c, "after", after.get(c, 0)] for c in cats]
    write_tsv(plot, ["category", "stage", "prompts"], rows_plot)
    print(f"mix: {len(mixed)} prompts ({dup} duplicates, {sum(near.values())} near-duplicates, "
          f"{sum(contaminated.values())} contaminated removed); "
          f"{len(evals)} eval prompts")


@click.command("mix")
@path_option("--prompts", "prompts", "Reads: the downloaded prompts.")
@path_option("--train", "mix_train", "Writes: the mixed training prompts, each with split train or val.")
@path_option("--eval", "mix_eval", "Writes: the held-out benchmark prompts.")
@path_option("--metrics", "mix_metrics", "Writes: counts removed and kept, by source and category.")
@path_option("--plot", "mix_plot", "Writes: prompts per category before and after (a dvc plot).")
@click.pass_obj
def command(settings, prompts, train, eval, metrics, plot):
    """Dedupe, decontaminate, weight by category, split.

    Params: `mix`. Byte-identical outputs for the same inputs and params."""
    run_stage(settings, lambda params: run(params, prompts, train, eval, metrics, plot))
