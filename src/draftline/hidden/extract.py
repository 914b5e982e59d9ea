"""Stage `extract`: the target's hidden states at the drafter's layers, and its teacher,
in byte-sized shards, planned before any work, resumable after any kill, data parallel.

    draftline extract --model DIR --info FILE --tokens FILE --out DIR --metrics FILE
    torchrun --nproc_per_node 8 -m draftline extract ...    # each rank its share of shards

1. Plan (plan.py): bytes per token, shards, the free space where they go; refuse before
   loading the target when they will not fit.
2. Each rank writes its shards (shard_file.py) and appends each to its ledger (ledger.py);
   shards already in a ledger are skipped, so a rerun recomputes at most one per rank.
3. Rank 0 merges the ledgers into index.json (row -> shard, offset, length) and
   manifest.json (each shard's name, size and xxh3-128 hash).

The shards go into `--out` (versioned with it by DVC), or into `extract.shard_dir` when
they are too large for the DVC cache: `--out` then holds only the index and the manifest.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import click
import torch

from ..command import path_option, run_stage
from ..devices import compute_device
from ..io import write_json
from ..precision import batch_dtype
from ..progress import bar
from ..target.info import TargetInfo
from . import ledger
from .capture import right_padded
from .plan import Plan, PlanError, Record, Shard, batches, check_space, human, plan
from .shard_file import ShardFileWriter
from .store import INDEX, MANIFEST
from .token_rows import TokenRows


def fingerprint(tokens: Path, info_file: Path, params, dtype: str) -> str:
    """Everything that decides a shard's bytes: a folder holding another fingerprint's
    shards is cleared, never resumed from."""
    h = hashlib.sha256()
    for f in (tokens, info_file, *sorted(Path(__file__).parent.glob("*.py"))):
        h.update(f.name.encode() + b"\0" + Path(f).read_bytes())
    keep = params.extract.model_dump(exclude={"shard_dir", "free_space_margin"})
    h.update(repr(sorted(keep.items())).encode() + dtype.encode() + torch.__version__.encode())
    return h.hexdigest()


def record_of(params, info: TargetInfo) -> Record:
    p = params.extract
    return Record(info.hidden_size, len(info.target_layer_ids), p.teacher, p.top_k if p.teacher == "top_k" else 0)


class World:
    """This process's rank under torchrun (gloo: the ranks only wait for each other)."""

    def __init__(self):
        self.size = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        if self.size > 1:
            import torch.distributed as dist

            # Ranks wait at the end for the slowest: hours at scale, not gloo's 30 minutes.
            dist.init_process_group("gloo", timeout=timedelta(days=7))

    def barrier(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.barrier()

    def gather(self, obj) -> list:
        if self.size == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def close(self) -> None:
        if self.size > 1:
            import torch.distributed as dist

            dist.destroy_process_group()


def rank_max_memory(local_rank: int, local_world: int, gpus: int) -> dict:
    """With a device map, rank r of a node's `local_world` ranks spreads the target over its
    own `gpus // local_world` GPUs only (accelerate places nothing where max_memory is 0)."""
    per = gpus // local_world
    if per < 1:
        raise PlanError(f"extract: {local_world} ranks on this node but {gpus} GPU(s): a device map needs "
                        "at least one GPU per rank")
    mine = range(local_rank * per, (local_rank + 1) * per)
    return {i: (torch.cuda.get_device_properties(i).total_memory if i in mine else 0) for i in range(gpus)}


def run(params, model_dir: Path, info_file: Path, tokens: Path, out: Path, metrics: Path, device=None,
        device_map: str | None = None) -> None:
    info = TargetInfo.load(info_file)
    rows = TokenRows.read(tokens)
    world = World()
    try:
        _run(params, world, info, rows, model_dir, info_file, tokens, out, metrics, device, device_map)
    finally:
        world.close()


def _run(params, world, info, rows, model_dir, info_file, tokens, out, metrics, device, device_map):
    p = params.extract
    if params.train.features == "online":
        return _nothing_to_store(p, world, out, metrics, info)
    if p.backend == "vllm" and world.size > 1:
        raise PlanError("extract.backend: vllm runs as one process (vLLM spreads the target over "
                        "extract.vllm_tensor_parallel_size GPUs itself): run it without torchrun")
    device = device or compute_device()
    dtype = batch_dtype(p.dtype, info.dtype, device)
    record = record_of(params, info)
    the_plan = plan(rows.lengths, record, p.shard_bytes)
    location = Path(p.shard_dir) if p.shard_dir else out
    fp = fingerprint(tokens, info_file, params, dtype)
    names = {s.index: s.name for s in the_plan.shards}
    kept = ledger.holds(location, fp)
    done = ledger.done(location, names) if kept else {}
    todo = [s for s in the_plan.shards if s.index not in done]
    # Before anything is written or loaded: a plan that cannot fit stops here.
    free = check_space(sum(the_plan.shard_size(s) for s in todo), location, p.free_space_margin)
    world.barrier()  # every rank has read the ledgers before rank 0 may clear them
    if world.rank == 0 and not kept:
        ledger.reset(location, fp, the_plan.summary())
        for name in (INDEX, MANIFEST):  # another plan's index would describe shards that are gone
            (out / name).unlink(missing_ok=True)
    if world.rank == 0 and p.shard_dir:
        ledger.clear(out)  # shards from before shard_dir was set: DVC would cache them again
    world.barrier()
    summary = {**the_plan.summary(), "free_bytes": free, "resumed_shards": len(done), "ranks": world.size}
    if world.rank == 0:
        print(f"extract: plan {the_plan.tokens:,} tokens x {record.bytes_per_token:,} B/token = "
              f"{human(the_plan.total_bytes)} in {len(the_plan.shards)} shard(s) of <= {human(p.shard_bytes)}; "
              f"{len(done)} done, {len(todo)} to write on {world.size} rank(s); {human(free)} free at {location}",
              file=sys.stderr, flush=True)
    mine = [s for s in the_plan.for_rank(world.rank, world.size) if s.index not in done]
    stats = {"tokens": 0, "padded": 0, "bytes": 0, "seconds": 0.0, "shards": 0}
    if mine:
        produce = _producer(params, info, model_dir, device, device_map, dtype, record)
        stats = write_shards(produce, rows, the_plan, mine, location, info.target_layer_ids, world.rank, world.size)
    all_stats = world.gather(stats)
    world.barrier()
    if world.rank == 0:
        entries = ledger.done(location, names)
        missing = sorted(set(names) - set(entries))
        if missing:
            raise PlanError(f"extract: shard(s) {missing[:5]} have no ledger entry after every rank finished")
        merge(out, p.shard_dir, info.target_layer_ids, record, the_plan, entries)
        tok = sum(s["tokens"] for s in all_stats)
        secs = max(s["seconds"] for s in all_stats)
        padded = sum(s["padded"] for s in all_stats)
        written = sum(s["bytes"] for s in all_stats)
        write_json(metrics, {**summary, "rows": len(rows), "tokens": the_plan.tokens, "tokens_extracted": tok,
                             "shards_written": sum(s["shards"] for s in all_stats),
                             "padding_fraction": round(1 - tok / padded, 4) if padded else 0.0,
                             "seconds": round(secs, 2), "tokens_per_second": round(tok / max(secs, 1e-9), 1),
                             "gb_written": round(written / 1e9, 3), "teacher": p.teacher, "backend": p.backend,
                             "compute_dtype": dtype, "device": device.type})
        print(f"extract: {the_plan.tokens} tokens in {len(the_plan.shards)} shard(s) "
              f"({len(done)} kept from an earlier run), {round(tok / max(secs, 1e-9), 1)} tok/s", file=sys.stderr)


def _nothing_to_store(p, world, out: Path, metrics: Path, info) -> None:
    """train.features: online: the training processes compute the features, so the stage
    stores none. It still writes an index (with no rows) and metrics, and removes an earlier
    offline run's shards, which nothing reads now."""
    if world.rank:
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


def _producer(params, info, model_dir, device, device_map, dtype, record):
    """Per backend: shard rows -> per batch (states [n, C] bf16, top-k ids, top-k logprobs),
    rows unpadded and in order."""
    if params.extract.backend == "vllm":
        from .vllm_backend import VllmProducer

        return VllmProducer(model_dir, info, record, params.extract)
    from ..target.load import load_model, load_tokenizer
    from .capture import Capture

    kw = {}
    if device_map and int(os.environ.get("WORLD_SIZE", "1")) > 1 and device.type == "cuda":
        kw["max_memory"] = rank_max_memory(int(os.environ.get("LOCAL_RANK", "0")),
                                           int(os.environ.get("LOCAL_WORLD_SIZE", "1")), torch.cuda.device_count())
    model = load_model(model_dir, dtype, device, device_map, **kw)
    tok = load_tokenizer(model_dir)
    pad = tok.pad_token_id if tok.pad_token_id is not None else info.eos_token_ids[0]
    return TransformersProducer(Capture(model, info.target_layer_ids, record), params.extract.batch_tokens, pad)


class TransformersProducer:
    def __init__(self, capture, batch_tokens: int, pad_id: int):
        self.capture, self.batch_tokens, self.pad_id = capture, batch_tokens, pad_id
        self.padded = 0

    def __call__(self, shard_rows: list[dict]):
        lengths = [len(r["input_ids"]) for r in shard_rows]
        for b in batches(lengths, self.batch_tokens):
            ids, attn = right_padded([shard_rows[i]["input_ids"] for i in b], self.pad_id)
            self.padded += ids.numel()
            states, k_ids, k_lp = self.capture(ids, attn)
            # One copy per batch off the device, in the stored dtype, without the padding.
            keep = attn.bool().to(states.device)
            yield (states[keep].cpu(), None if k_ids is None else k_ids[keep].cpu(),
                   None if k_lp is None else k_lp[keep].cpu())


def write_shards(produce, rows, the_plan: Plan, mine: list[Shard], location: Path, layer_ids: list[int],
                 rank: int = 0, world_size: int = 1) -> dict:
    """Write shards `mine` of the plan with `produce` (shard rows -> batches of states),
    each followed by its ledger line."""
    record = the_plan.record
    meta = {"target_layer_ids": str(layer_ids), "hidden_size": str(record.hidden),
            "teacher": record.teacher, "top_k": str(record.top_k)}
    total = sum(s.tokens for s in mine)
    pb = bar(total, f"extract (rank {rank})" if world_size > 1 else "extract", unit="tok")
    t0, written, tokens = time.perf_counter(), 0, 0
    for shard in mine:
        ledger.sweep(location, shard.name)
        shard_rows = [rows[i] for i in shard.rows]
        ids = torch.tensor([t for r in shard_rows for t in r["input_ids"]], dtype=torch.int32)
        mask = torch.tensor([m for r in shard_rows for m in r["loss_mask"]], dtype=torch.uint8)
        with ShardFileWriter(location / shard.name, record, ids, mask, meta) as w:
            for states, k_ids, k_lp in produce(shard_rows):
                w.states(states, k_ids, k_lp)
                pb.update(int(states.shape[0]))
                pb.set_postfix_str(f"{(written + w.size) / 1e9:.2f} GB written", refresh=False)
        offset, index_rows = 0, []
        for r in shard_rows:
            n = len(r["input_ids"])
            index_rows.append({"id": r["id"], "split": r["split"], "offset": offset, "length": n,
                               "supervised": int(sum(r["loss_mask"]))})
            offset += n
        ledger.append(location, rank, {"shard": shard.index, "name": shard.name, "bytes": w.size,
                                       "xxh3_128": w.digest, "tokens": shard.tokens, "rows": index_rows})
        written += w.size
        tokens += shard.tokens
    pb.close()
    return {"tokens": tokens, "padded": getattr(produce, "padded", tokens), "bytes": written,
            "seconds": time.perf_counter() - t0, "shards": len(mine)}


def extract_in_process(model, rows: list[dict], layer_ids: list[int], folder: Path, batch_tokens: int = 8192,
                       pad_id: int = 0, shard_bytes: int = 2_000_000_000, teacher: str = "final",
                       top_k: int = 32) -> dict:
    """The stage's work on a loaded model, one process, no params (tests, benchmarks)."""
    from .capture import Capture

    hidden = model.config.get_text_config().hidden_size
    record = Record(hidden, len(layer_ids), teacher, top_k if teacher == "top_k" else 0)
    the_plan = plan([len(r["input_ids"]) for r in rows], record, shard_bytes)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    capture = Capture(model, layer_ids, record)
    try:
        stats = write_shards(TransformersProducer(capture, batch_tokens, pad_id), rows, the_plan,
                             list(the_plan.shards), folder, layer_ids)
    finally:
        capture.close()
    names = {s.index: s.name for s in the_plan.shards}
    merge(folder, None, layer_ids, record, the_plan, ledger.done(folder, names))
    return stats


def merge(out: Path, shard_dir: str | None, layer_ids: list[int], record: Record, the_plan: Plan,
          entries: dict[int, dict]) -> None:
    """index.json and manifest.json from the ledgers, in shard order: the same bytes
    whatever the number of ranks or interruptions."""
    rows, seen, shards = [], set(), []
    for i in range(len(the_plan.shards)):
        e = entries[i]
        for r in e["rows"]:
            if r["id"] in seen:  # readers key sequences by id: a repeat would alias two of them
                raise PlanError(f"extract: sequence id {r['id']!r} appears twice")
            seen.add(r["id"])
            rows.append({**r, "shard": i})
        shards.append({"name": e["name"], "bytes": e["bytes"], "xxh3_128": e["xxh3_128"], "tokens": e["tokens"],
                       "rows": len(e["rows"])})
    meta = {"target_layer_ids": layer_ids, "hidden_size": record.hidden, "teacher": record.teacher,
            "top_k": record.top_k, "state_columns": record.state_columns, "dtype": "bfloat16",
            "final": "post-norm last hidden state" if record.teacher == "final" else None,
            "shard_dir": shard_dir}
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / MANIFEST, {**meta, "bytes_per_token": record.bytes_per_token, "tokens": the_plan.tokens,
                                "total_bytes": sum(s["bytes"] for s in shards), "shards": shards})
    write_json(out / INDEX, {**meta, "shards": [s["name"] for s in shards], "rows": rows})


@click.command("extract")
@path_option("--model", "target_model", "Reads: the target.")
@path_option("--info", "target_info", "Reads: the layers to capture.")
@path_option("--tokens", "tokens", "Reads: the tokenized sequences.")
@path_option("--out", "hidden", "Writes: the shards (unless extract.shard_dir), index.json, manifest.json.")
@path_option("--metrics", "extract_metrics", "Writes: the plan, tokens/s, GB written.")
@click.pass_obj
def command(settings, model, info, tokens, out, metrics):
    """Store the target's hidden states at the drafter's layers, and its teacher.

    Params: `extract`."""
    run_stage(settings, lambda params: run(params, model, info, tokens, out, metrics,
                                           compute_device(settings.device), settings.target_device_map))
