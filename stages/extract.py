"""Stage `extract`: the target's hidden states at the drafter's layers, and its teacher,
in byte-sized shards, planned before any work, resumable after any kill, data parallel.

    draftline extract --model DIR --info FILE --tokens FILE --out DIR --metrics FILE
    torchrun --nproc_per_node N -m draftline extract         # each rank its share of shards
"""

from __future__ import annotations

import click

from draftline.command import path_option, run_stage
from draftline.config.extract import ExtractParams
from draftline.config.target import TargetParams
from draftline.config.train import TrainParams
from draftline.config.view import Declared
from draftline.devices import compute_device
from draftline.distributed import local_rank
from draftline.hidden.extract import run
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
@click.pass_obj
def command(settings, model, info, tokens, out, metrics):
    """Store the target's hidden states at the drafter's layers, and its teacher.

    Params: `extract`. extract.processes_per_node / nodes > 1: starts torchrun itself (or run it
    under your own torchrun); each rank writes its share of the shards."""

    def stage(params):
        if launches(params.extract):
            relaunch("extract", params.extract, settings.threads)
        else:
            run(params, model, info, tokens, out, metrics, compute_device(settings.device, local_rank()),
                settings.target_device_map)

    run_stage(settings, PARAMS.load, stage)
