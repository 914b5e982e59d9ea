"""Stage `mix`: exact and near-duplicate removal, decontamination, mix by category, split.

    python -m stages.mix   # writes data/mix/{train,eval}.parquet, data/metrics/mix.json, data/plots/mix.tsv
"""

from collections import Counter
from pathlib import Path

from draftline import mix as mx
from draftline.heldout import eval_order
from draftline.io import read_parquet, write_json, write_parquet, write_tsv

from ._run import main

RAW = Path("data/raw/prompts.parquet")
TRAIN = Path("data/mix/train.parquet")
EVAL = Path("data/mix/eval.parquet")
METRICS = Path("data/metrics/mix.json")
PLOT = Path("data/plots/mix.tsv")


def run(params) -> None:
    p = params.mix
    rows = read_parquet(RAW)
    train = [r for r in rows if r["role"] == "train"]
    evals = [r for r in rows if r["role"] == "eval"]
    before = Counter(r["category"] for r in train)
    by_source_before = Counter(r["source"] for r in train)
    train, dup = mx.dedupe(train)
    evals, _ = mx.dedupe(evals)
    train, near, near_stats = mx.near_dedupe(train, p.near_dedupe, p.seed)
    train, contaminated = mx.decontaminate(train, evals, p.decontaminate_ngram)
    mixed, warnings = mx.mix_by_category(train, p)
    for w in warnings:
        print(f"warning: mix: {w}")
    mixed = mx.split(mixed, p.val_fraction, p.seed)
    mixed, followups = mx.add_followups(mixed, p.followups, p.seed)
    if not any(r["split"] == "train" for r in mixed):
        raise ValueError("mix: no training prompts left (check mix.category_weights and the sources)")
    if p.max_eval_per_source:
        by_src: dict[str, list] = {}
        for r in sorted(evals, key=eval_order):
            by_src.setdefault(r["source"], []).append(r)
        evals = [r for v in by_src.values() for r in v[: p.max_eval_per_source]]
    after = Counter(r["category"] for r in mixed)
    write_parquet(TRAIN, mixed)
    write_parquet(EVAL, evals)
    cats = sorted(set(before) | set(after))
    write_json(METRICS, {
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
    write_tsv(PLOT, ["category", "stage", "prompts"], rows_plot)
    print(f"mix: {len(mixed)} prompts ({dup} duplicates, {sum(near.values())} near-duplicates, "
          f"{sum(contaminated.values())} contaminated removed); "
          f"{len(evals)} eval prompts")


if __name__ == "__main__":
    main(run)
