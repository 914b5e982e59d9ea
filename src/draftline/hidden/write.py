"""One rank's share of the shards, written: each shard streamed to its file (shard_file.py)
from a producer's batches (producers.py), its states checked as they go by (state_stats.py),
then recorded in the rank's ledger (ledger.py), so a shard counts as done only once both are
on disk, and never when it holds an all-zero or non-finite row.

    python bench/bench_extract.py     # this writer at a 27B target's width
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from ..progress import bar
from . import ledger
from .plan import Plan, Shard
from .shard_file import ShardFileWriter
from .state_stats import StateCheck, state_labels


def write_shards(produce, rows, the_plan: Plan, mine: list[Shard], location: Path, layer_ids: list[int],
                 rank: int = 0, world_size: int = 1) -> dict:
    """Write shards `mine` of the plan with `produce` (shard rows -> batches of states),
    each followed by its ledger line (with its per-layer statistics); returns this rank's
    counts (tokens, padded, bytes, seconds, shards). Raises state_stats.UnsoundStates at the
    first shard holding an all-zero or non-finite row."""
    record = the_plan.record
    groups = state_labels(layer_ids, record.teacher)
    meta = {"target_layer_ids": str(layer_ids), "hidden_size": str(record.hidden),
            "teacher": record.teacher, "top_k": str(record.top_k), "state_dtype": record.state_dtype}
    total = sum(s.tokens for s in mine)
    pb = bar(total, f"extract (rank {rank})" if world_size > 1 else "extract", unit="tok")
    t0, written, tokens = time.perf_counter(), 0, 0
    for shard in mine:
        ledger.sweep(location, shard.name)
        shard_rows = [rows[i] for i in shard.rows]
        ids = torch.tensor([t for r in shard_rows for t in r["input_ids"]], dtype=torch.int32)
        mask = torch.tensor([m for r in shard_rows for m in r["loss_mask"]], dtype=torch.uint8)
        with (ShardFileWriter(location / shard.name, record, ids, mask, meta) as w,
              StateCheck(groups, record.hidden) as check):
            for states, k_ids, k_lp in produce(shard_rows):
                w.states(states, k_ids, k_lp)
                check.add(states)
                pb.update(int(states.shape[0]))
                pb.set_postfix_str(f"{(written + w.size) / 1e9:.2f} GB written", refresh=False)
        index_rows = _index_rows(shard_rows)
        # Before the ledger line: the file stays for a look, but no run counts it as done.
        check.refuse_unsound(location / shard.name, index_rows)
        ledger.append(location, rank, {"shard": shard.index, "name": shard.name, "bytes": w.size,
                                       "xxh3_128": w.digest, "tokens": shard.tokens, "rows": index_rows,
                                       "state_stats": check.stats()})
        written += w.size
        tokens += shard.tokens
    pb.close()
    return {"tokens": tokens, "padded": getattr(produce, "padded", tokens), "bytes": written,
            "seconds": time.perf_counter() - t0, "shards": len(mine)}


def _index_rows(shard_rows: list[dict]) -> list[dict]:
    """Each row's place in its shard: its part of index.json, kept in the ledger line."""
    offset, out = 0, []
    for r in shard_rows:
        n = len(r["input_ids"])
        out.append({"id": r["id"], "split": r["split"], "offset": offset, "length": n,
                    "supervised": int(sum(r["loss_mask"]))})
        offset += n
    return out
