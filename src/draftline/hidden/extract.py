"""Stage `extract`: the target's hidden states at the drafter's layers, and its teacher,
in byte-sized shards, planned before any work, resumable after any kill, data parallel.

    draftline extract --model DIR --info FILE --tokens FILE --out DIR --metrics FILE
    torchrun --nproc_per_node 8 -m draftline extract ...    # each rank its share of shards
    draftline extract ...    # the same with extract.processes_per_node: 8 (launch.py)

1. Plan (plan.py): bytes per token, shards, the free space where they go; refuse before
   loading the target when they will not fit.
2. Each rank writes its shards (write.py, from producers.py's batches) and appends each to
   its ledger (ledger.py); shards already in a ledger are skipped, so a rerun recomputes
   at most one per rank. A shard with an all-zero or non-finite state stops the stage
   before its ledger line (state_stats.py).
3. Rank 0 merges the ledgers into index.json and manifest.json (merge.py), and writes the
   metrics, with each layer's RMS over every shard.

The shards go into `--out` (versioned with it by DVC), or into `extract.shard_dir` when
they are too large for the DVC cache: `--out` then holds only the index and the manifest.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch

from .. import distributed
from ..devices import compute_device
from ..distributed import World
from ..io import write_json
from ..precision import batch_dtype
from ..target.info import TargetInfo
from . import ledger
from .merge import merge
from .plan import Plan, PlanError, Record, check_space, human, plan
from .producers import producer
from .state_stats import overall
from .store import INDEX, MANIFEST
from .token_rows import TokenRows
from .write import write_shards

# Ranks wait at the end for the slowest: hours at scale, not the backends' default minutes.
WAIT_FOR_RANKS = timedelta(days=7)
# Params that decide how the work is spread, never a shard's bytes: a change resumes.
NOT_IN_BYTES = {"shard_dir", "free_space_margin", "processes_per_node", "nodes", "master"}


def fingerprint(tokens: Path, info_file: Path, params, dtype: str) -> str:
    """Everything that decides a shard's bytes: a folder holding another fingerprint's
    shards is cleared, never resumed from."""
    h = hashlib.sha256()
    for f in (tokens, info_file, *sorted(Path(__file__).parent.glob("*.py"))):
        h.update(f.name.encode() + b"\0" + Path(f).read_bytes())
    keep = params.extract.model_dump(exclude=NOT_IN_BYTES)
    h.update(repr(sorted(keep.items())).encode() + dtype.encode() + torch.__version__.encode())
    return h.hexdigest()


def record_of(params, info: TargetInfo) -> Record:
    p = params.extract
    return Record(info.hidden_size, len(info.target_layer_ids), p.teacher, p.top_k if p.teacher == "top_k" else 0,
                  p.state_dtype)


@dataclass(frozen=True)
class Todo:
    """The plan, and what of it an earlier run has done (from the ledgers)."""

    plan: Plan
    location: Path  # where the shards go: --out or extract.shard_dir
    names: dict[int, str]  # shard index -> file name, every planned shard
    done: dict[int, dict]  # shard index -> ledger line, shards kept from an earlier run
    free: int  # bytes free at `location` before this run


def run(params, model_dir: Path, info_file: Path, tokens: Path, out: Path, metrics: Path, device=None,
        device_map: str | None = None) -> None:
    info = TargetInfo.load(info_file)
    rows = TokenRows.read(tokens)
    device = device or compute_device(local_rank=distributed.local_rank())
    world = distributed.init(device, WAIT_FOR_RANKS)
    try:
        if params.train.features == "online":
            _nothing_to_store(params.extract, world, out, metrics, info)
            return
        if params.extract.backend == "vllm":
            if world.size > 1:
                raise PlanError("extract.backend: vllm runs as one process (vLLM spreads the target over "
                                "extract.vllm_tensor_parallel_size GPUs itself): run it without torchrun")
            from .vllm_backend import check_target

            check_target(info)  # before planning: a refusal must not clear another backend's shards
        dtype = batch_dtype(params.extract.dtype, info.dtype, device)
        record = record_of(params, info)
        todo = _resume(params.extract, world, rows, record, out, fingerprint(tokens, info_file, params, dtype))
        mine = [s for s in todo.plan.for_rank(world.rank, world.size) if s.index not in todo.done]
        stats = {"tokens": 0, "padded": 0, "bytes": 0, "seconds": 0.0, "shards": 0}
        if mine:
            longest = max(rows.lengths[i] for s in mine for i in s.rows)
            produce = producer(params, info, model_dir, device, device_map, dtype, record, world, longest)
            stats = write_shards(produce, rows, todo.plan, mine, todo.location, info.target_layer_ids, world.rank,
                                 world.size)
        every = distributed.gather(world, stats)
        distributed.barrier(world)
        if world.main:
            _finish(params.extract, todo, every, len(rows), info, out, metrics, world.size, dtype, device)
    finally:
        distributed.close(world)


def _resume(p, world: World, rows: TokenRows, record: Record, out: Path, fp: str) -> Todo:
    """Plan, read the ledgers, refuse a plan that cannot fit, and clear another plan's
    shards (rank 0, once every rank has read the ledgers)."""
    the_plan = plan(rows.lengths, record, p.shard_bytes)
    location = Path(p.shard_dir) if p.shard_dir else out
    names = {s.index: s.name for s in the_plan.shards}
    kept = ledger.holds(location, fp)
    done = ledger.done(location, names) if kept else {}
    todo = [s for s in the_plan.shards if s.index not in done]
    # Before anything is written or loaded: a plan that cannot fit stops here.
    free = check_space(sum(the_plan.shard_size(s) for s in todo), location, p.free_space_margin)
    distributed.barrier(world)  # every rank has read the ledgers before rank 0 may clear them
    if world.main and not kept:
        ledger.reset(location, fp, the_plan.summary())
        for name in (INDEX, MANIFEST):  # another plan's index would describe shards that are gone
            (out / name).unlink(missing_ok=True)
    if world.main and p.shard_dir:
        ledger.clear(out)  # shards from before shard_dir was set: DVC would cache them again
    distributed.barrier(world)
    if world.main:
        print(f"extract: plan {the_plan.tokens:,} tokens x {record.bytes_per_token:,} B/token "
              f"({record.state_dtype} states) = "
              f"{human(the_plan.total_bytes)} in {len(the_plan.shards)} shard(s) of <= {human(p.shard_bytes)}; "
              f"{len(done)} done, {len(todo)} to write on {world.size} rank(s); {human(free)} free at {location}",
              file=sys.stderr, flush=True)
    return Todo(the_plan, location, names, done, free)


def _finish(p, todo: Todo, every: list[dict], n_rows: int, info: TargetInfo, out: Path, metrics: Path,
            ranks: int, dtype: str, device: torch.device) -> None:
    """Rank 0, after every rank: the index and manifest from the ledgers, and the metrics
    from every rank's counts (`every`)."""
    the_plan = todo.plan
    entries = ledger.done(todo.location, todo.names)
    missing = sorted(set(todo.names) - set(entries))
    if missing:
        raise PlanError(f"extract: shard(s) {missing[:5]} have no ledger entry after every rank finished")
    merge(out, p.shard_dir, info.target_layer_ids, the_plan.record, the_plan, entries)
    tok = sum(s["tokens"] for s in every)
    secs = max(s["seconds"] for s in every)
    padded = sum(s["padded"] for s in every)
    written = sum(s["bytes"] for s in every)
    states = overall([entries[i] for i in sorted(entries)])
    write_json(metrics, {**the_plan.summary(), "free_bytes": todo.free, "resumed_shards": len(todo.done),
                         "ranks": ranks, "rows": n_rows, "tokens": the_plan.tokens, "tokens_extracted": tok,
                         "shards_written": sum(s["shards"] for s in every),
                         "padding_fraction": round(1 - tok / padded, 4) if padded else 0.0,
                         "seconds": round(secs, 2), "tokens_per_second": round(tok / max(secs, 1e-9), 1),
                         "gb_written": round(written / 1e9, 3), "teacher": p.teacher, "backend": p.backend,
                         "compute_dtype": dtype, "device": device.type,
                         "state_rms": {label: st["rms"] for label, st in states.items()},
                         "zero_rows": sum(st["zero_rows"] for st in states.values()),
                         "nonfinite_rows": sum(st["nonfinite_rows"] for st in states.values())})
    print(f"extract: {the_plan.tokens} tokens in {len(the_plan.shards)} shard(s) "
          f"({len(todo.done)} kept from an earlier run), {round(tok / max(secs, 1e-9), 1)} tok/s", file=sys.stderr)


def _nothing_to_store(p, world: World, out: Path, metrics: Path, info: TargetInfo) -> None:
    """train.features: online: the training processes compute the features, so the stage
    stores none. It still writes an index (with no rows) and metrics, and removes an earlier
    offline run's shards, which nothing reads now."""
    if not world.main:
        return
    for folder in {out, Path(p.shard_dir)} if p.shard_dir else {out}:
        ledger.clear(folder)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"target_layer_ids": info.target_layer_ids, "hidden_size": info.hidden_size, "features": "online",
            "teacher": None, "shard_dir": p.shard_dir}
    write_json(out / MANIFEST, {**meta, "tokens": 0, "total_bytes": 0, "shards": []})
    write_json(out / INDEX, {**meta, "shards": [], "rows": []})
    write_json(metrics, {"features": "online", "tokens": 0, "shards": 0, "gb_written": 0.0})
    print("extract: train.features is online: nothing to store", file=sys.stderr)
