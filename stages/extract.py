"""Stage `extract`: the target's hidden states at the drafter's layers, and its teacher,
in byte-sized shards, planned before any work, resumable after any kill, data parallel.

    draftline extract --model DIR --info FILE --tokens FILE --out DIR --metrics FILE
    torchrun --nproc_per_node N -m draftline extract         # each rank its share of shards
    draftline extract --plan-only [--tokens-total N --layers L --hidden-size H]   # sizes, no work
"""

from __future__ import annotations

from pathlib import Path

import click

from draftline.command import path_option, run_stage
from draftline.config.extract import ExtractParams
from draftline.config.target import TargetParams
from draftline.config.train import TrainParams
from draftline.config.view import Declared
from draftline.devices import compute_device
from draftline.distributed import local_rank
from draftline.hidden.extract import run
from draftline.hidden.plan_table import plan_table, synthetic_lengths
from draftline.hidden.token_rows import TokenRows
from draftline.target.info import TargetInfo
from draftline.launch import launches, relaunch

# target.trust_remote_code: vLLM loads the target itself (extract.backend: vllm).
PARAMS = Declared("extract", ("extract", "train.features", "target.trust_remote_code"),
                  (ExtractParams, TrainParams, TargetParams))


@click.command("extract")
@path_option("--model", "target_model", "Reads: the target.")
@path_option("--info", "target_info", "Reads: the layers to capture.")
@path_option("--tokens", "tokens", "Reads: the tokenized sequences.")
@path_option("--out", "hidden", "Writes: the shards (unless extract.shard_dir), index.json, manifest.json.")
@path_option("--metrics", "extract_metrics", "Writes: the plan, tokens/s, GB written.")
@click.option("--plan-only", is_flag=True,
              help="Print the plan (bytes per token, total, shards) for every state dtype and teacher, and "
                   "whether the params' one fits; load and write nothing.")
@click.option("--tokens-total", type=click.IntRange(min=1), help="--plan-only: this many tokens, not the tokens file's.")
@click.option("--row-tokens", type=click.IntRange(min=1), default=2000, show_default=True,
              help="--plan-only with --tokens-total: tokens per row.")
@click.option("--layers", type=click.IntRange(min=1), help="--plan-only: captured layers, not --info's.")
@click.option("--hidden-size", type=click.IntRange(min=1), help="--plan-only: the target's width, not --info's.")
@click.pass_obj
def command(settings, model, info, tokens, out, metrics, plan_only, tokens_total, row_tokens, layers, hidden_size):
    """Store the target's hidden states at the drafter's layers, and its teacher.

    Params: `extract`. extract.processes_per_node / nodes > 1: starts torchrun itself (or run it
    under your own torchrun); each rank writes its share of the shards. --plan-only: the sizes
    only, for this project or (--tokens-total, --layers, --hidden-size) a target not yet run."""

    def stage(params):
        if plan_only:
            print_plan(params.extract, info, tokens, out, tokens_total, row_tokens, layers, hidden_size)
        elif launches(params.extract):
            relaunch("extract", params.extract, settings.threads)
        else:
            run(params, model, info, tokens, out, metrics, compute_device(settings.device, local_rank()),
                settings.target_device_map)

    run_stage(settings, PARAMS.load, stage, torch_threads=not plan_only)


def print_plan(p, info: Path, tokens: Path, out: Path, tokens_total: int | None, row_tokens: int,
               layers: int | None, hidden_size: int | None) -> None:
    if layers is None or hidden_size is None:
        target = TargetInfo.load(info)
        layers, hidden_size = layers or len(target.target_layer_ids), hidden_size or target.hidden_size
    lengths = synthetic_lengths(tokens_total, row_tokens) if tokens_total else TokenRows.read(tokens).lengths
    location = Path(p.shard_dir) if p.shard_dir else out
    click.echo("\n".join(plan_table(lengths, layers, hidden_size, p.shard_bytes, p.top_k, (p.state_dtype, p.teacher),
                                    location, p.free_space_margin)))
