"""Stage `extract`: target hidden states at the drafter's layers, in a few bf16 shards.

    draftline extract --model DIR --info FILE --tokens FILE --out DIR --metrics FILE
"""

from __future__ import annotations

from pathlib import Path

import click

from ..command import path_option, run_stage
from ..devices import compute_device
from ..io import atomic_path, read_parquet, write_json
from ..precision import batch_dtype
from ..target.info import TargetInfo
from ..target.load import load_model, load_tokenizer
from .capture import extract
from .store import ShardWriter


def run(params, model_dir: Path, info_file: Path, tokens: Path, out: Path, metrics: Path, device=None,
        device_map: str | None = None) -> None:
    info = TargetInfo.load(info_file)
    rows = read_parquet(tokens)
    device = device or compute_device()
    dtype = batch_dtype(params.extract.dtype, info.dtype, device)
    model = load_model(model_dir, dtype, device, device_map)
    tok = load_tokenizer(model_dir)
    pad = tok.pad_token_id if tok.pad_token_id is not None else info.eos_token_ids[0]
    meta = {"target_layer_ids": info.target_layer_ids, "hidden_size": info.hidden_size,
            "final": "post-norm last hidden state", "dtype": "bfloat16"}
    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        writer = ShardWriter(tmp, params.extract.shard_tokens, meta)
        stats = extract(model, rows, info.target_layer_ids, writer, params.extract.batch_tokens, pad)
    write_json(metrics, {**stats, "compute_dtype": dtype, "device": model.device.type})
    print(f"extract: {stats['tokens']} tokens in {stats['shards']} shard(s), {stats['tokens_per_second']} tok/s")


@click.command("extract")
@path_option("--model", "target_model", "Reads: the target.")
@path_option("--info", "target_info", "Reads: the layers to capture.")
@path_option("--tokens", "tokens", "Reads: the tokenized sequences.")
@path_option("--out", "hidden", "Writes: a folder of safetensors shards (context features, final state, ids, "
                                "loss mask) and index.json (row -> shard, offset, length).")
@path_option("--metrics", "extract_metrics", "Writes: tokens, shards, padding, tokens/s.")
@click.pass_obj
def command(settings, model, info, tokens, out, metrics):
    """Store the target's hidden states at the drafter's layers.

    Params: `extract`."""
    run_stage(settings, lambda params: run(params, model, info, tokens, out, metrics,
                                           compute_device(settings.device), settings.target_device_map))
