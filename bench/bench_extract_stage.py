"""The extract stage's time on the embedded default, against the stage it replaced, in one
process on the same model and the same tokens.

Whole-stage runs in separate processes swung by 18% here (961-1,136 tok/s for the same
code), more than the difference in question. Here the target is loaded once and both
passes run in turn over every row of `data/tokens/train.parquet`, the order flipped in
each pair:

- stage: the stage's own code (`write_shards` with `TransformersProducer`): hooks on the
  captured layers, padding dropped on the batch, the shard streamed to disk by the writer's
  threads with its hash, fsynced and renamed, the ledger line, the merged index.
- baseline: the stage before sharded extraction (the pipeline's first version, e51b36e and before): the base
  model asked for every layer's states (`output_hidden_states=True`), each row's slices
  kept in memory, one safetensors file written at the end (`save_file`), then the index.

Both use the same batches (rows sorted by length, `extract.batch_tokens` per batch) and
the stage's compute dtype. Needs `dvc repro tokenize` (or `make all`) first.

    .venv/bin/python bench/bench_extract_stage.py              # 3 pairs
    .venv/bin/python bench/bench_extract_stage.py --pairs 1 --rows 64
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path

import torch
from _setup import ROOT, load_info, load_params, path


def _baseline(model, rows, layer_ids, batch_list, lengths, pad, folder: Path) -> None:
    from safetensors.torch import save_file

    from draftline.hidden.capture import right_padded
    from draftline.io import write_json

    base = model.get_decoder()
    buf = {"context": [], "final": [], "input_ids": [], "loss_mask": []}
    index, offset = [], 0
    with torch.inference_mode():
        for b in batch_list:
            ids, attn = right_padded([rows[i]["input_ids"] for i in b], pad)
            out = base(input_ids=ids, attention_mask=attn, output_hidden_states=True, use_cache=False)
            # the all-layers baseline: layer l's output is hidden_states[l + 1]
            ctx = torch.cat([out.hidden_states[i + 1] for i in layer_ids], -1).to("cpu", torch.bfloat16)
            final = out.last_hidden_state.to("cpu", torch.bfloat16)
            for j, i in enumerate(b):
                n = lengths[i]
                buf["context"].append(ctx[j, :n])
                buf["final"].append(final[j, :n])
                buf["input_ids"].append(torch.tensor(rows[i]["input_ids"], dtype=torch.int32))
                buf["loss_mask"].append(torch.tensor(rows[i]["loss_mask"], dtype=torch.uint8))
                index.append({"id": rows[i]["id"], "offset": offset, "length": n})
                offset += n
    save_file({k: torch.cat(v).contiguous() for k, v in buf.items()}, str(folder / "shard-00000.safetensors"))
    write_json(folder / "index.json", {"rows": index})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=0, help="the first N rows of the plan only (0: all)")
    ap.add_argument("--dir", default=str(ROOT / ".bench-extract-stage"))
    args = ap.parse_args()

    from draftline import devices
    from draftline.hidden import ledger
    from draftline.hidden.capture import Capture
    from draftline.hidden.extract import record_of
    from draftline.hidden.merge import merge
    from draftline.hidden.plan import batches, plan
    from draftline.hidden.producers import TransformersProducer
    from draftline.hidden.token_rows import TokenRows
    from draftline.hidden.write import write_shards
    from draftline.precision import batch_dtype
    from draftline.target.load import load_model, load_tokenizer

    params, info = load_params(), load_info()
    p = params.extract
    device = devices.compute_device()
    dtype = batch_dtype(p.dtype, info.dtype, device)
    model = load_model(path("target_model"), dtype, device)
    tok = load_tokenizer(path("target_model"))
    pad = tok.pad_token_id if tok.pad_token_id is not None else info.eos_token_ids[0]
    token_rows = TokenRows.read(path("tokens"))
    record = record_of(params, info)
    if record.teacher != "final":
        raise SystemExit("bench_extract_stage: the baseline stored the final state; run with extract.teacher: final")
    # The first --rows rows of the plan's order (shortest first), re-planned as the stage would.
    chosen = [i for sh in plan(token_rows.lengths, record, p.shard_bytes).shards for i in sh.rows][: args.rows or None]
    stage_rows = [token_rows[i] for i in chosen]
    the_plan = plan([len(r["input_ids"]) for r in stage_rows], record, p.shard_bytes)
    # The baseline sorted every row by length and batched across the whole set.
    rows = [stage_rows[i] for sh in the_plan.shards for i in sh.rows]
    lengths = [len(r["input_ids"]) for r in rows]
    batch_list = batches(lengths, p.batch_tokens)
    layer_ids = info.target_layer_ids
    sub = _Rows(stage_rows)
    folder = Path(args.dir)

    def stage(out: Path) -> None:
        capture = Capture(model, layer_ids, record)
        try:
            write_shards(TransformersProducer(capture, p.batch_tokens, pad), sub, the_plan,
                         list(the_plan.shards), out, layer_ids)
        finally:
            capture.close()
        merge(out, None, layer_ids, record, the_plan, ledger.done(out, {s.index: s.name for s in the_plan.shards}))

    def baseline(out: Path) -> None:
        _baseline(model, rows, layer_ids, batch_list, lengths, pad, out)

    tokens = sum(lengths)
    print(f"{len(rows)} rows, {tokens:,} tokens, {len(batch_list)} batches, {dtype} on {device.type}, "
          f"{torch.get_num_threads()} threads", flush=True)
    results = []
    for k in range(args.pairs):
        pair = {}
        for name, fn in ((("stage", stage), ("baseline", baseline)) if k % 2 == 0 else
                         (("baseline", baseline), ("stage", stage))):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            t0 = time.perf_counter()
            fn(folder)
            pair[name] = time.perf_counter() - t0
        shutil.rmtree(folder, ignore_errors=True)
        results.append(pair)
        print(f"pair {k + 1}: stage {pair['stage']:.1f} s ({tokens / pair['stage']:.1f} tok/s), baseline "
              f"{pair['baseline']:.1f} s ({tokens / pair['baseline']:.1f} tok/s): stage time / baseline time "
              f"{pair['stage'] / pair['baseline']:.3f}", flush=True)
    ratios = [r["stage"] / r["baseline"] for r in results]
    print(json.dumps({"pairs": results, "median_time_ratio": round(statistics.median(ratios), 4),
                      "geomean_time_ratio": round(statistics.geometric_mean(ratios), 4)}))


class _Rows:
    """The plan's rows in the plan's order, indexable as write_shards reads TokenRows."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]

    def __len__(self) -> int:
        return len(self.rows)


if __name__ == "__main__":
    main()
