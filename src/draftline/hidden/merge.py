"""The ledgers of every rank, merged into the stage's index.json (row -> shard, offset,
length) and manifest.json (each shard's name, size, xxh3-128 hash and per-layer statistics,
state_stats.py), in shard order: the same bytes whatever the number of ranks or
interruptions. Rank 0 runs it once every rank has finished."""

from __future__ import annotations

from pathlib import Path

from ..io import write_json
from .plan import Plan, PlanError, Record
from .store import INDEX, MANIFEST


def merge(out: Path, shard_dir: str | None, layer_ids: list[int], record: Record, the_plan: Plan,
          entries: dict[int, dict]) -> None:
    """`entries`: shard index -> its ledger line (ledger.done), one for every planned shard."""
    rows, seen, shards = [], set(), []
    for i in range(len(the_plan.shards)):
        e = entries[i]
        for r in e["rows"]:
            if r["id"] in seen:  # readers key sequences by id: a repeat would alias two of them
                raise PlanError(f"extract: sequence id {r['id']!r} appears twice")
            seen.add(r["id"])
            rows.append({**r, "shard": i})
        shards.append({"name": e["name"], "bytes": e["bytes"], "xxh3_128": e["xxh3_128"], "tokens": e["tokens"],
                       "rows": len(e["rows"]), "state_stats": e["state_stats"]})
    meta = {"target_layer_ids": layer_ids, "hidden_size": record.hidden, "teacher": record.teacher,
            "top_k": record.top_k, "state_columns": record.state_columns, "dtype": record.state_dtype,
            "scales": "float32 per token and state" if record.scale_columns else None,
            "final": "post-norm last hidden state" if record.teacher == "final" else None,
            "shard_dir": shard_dir}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / MANIFEST, {**meta, "bytes_per_token": record.bytes_per_token, "tokens": the_plan.tokens,
                                "total_bytes": sum(s["bytes"] for s in shards), "shards": shards})
    write_json(out / INDEX, {**meta, "shards": [s["name"] for s in shards], "rows": rows})
