"""Stage `train`: train the DFlash drafter on the target's hidden states, stored by extract
(train.features: offline) or computed by the target during training (online).

    draftline train                                          # one process
    torchrun --nproc_per_node N -m draftline train           # data parallel (NCCL on GPUs, gloo on CPUs)
"""

from __future__ import annotations

import click

from draftline.command import path_option, run_stage
from draftline.config.drafter import DrafterParams
from draftline.config.extract import ExtractParams
from draftline.config.train import TrainParams
from draftline.config.view import Declared
from draftline.devices import compute_device
from draftline.distributed import local_rank
from draftline.drafter.model import DRAFTER_FILES
from draftline.drafter.train import run
from draftline.launch import launches, relaunch

# extract.dtype and state_dtype: online features compute and store-round the states as extract would.
PARAMS = Declared("train", ("drafter", "extract.dtype", "extract.state_dtype", "train"),
                  (DrafterParams, ExtractParams, TrainParams))


@click.command("train")
@path_option("--model", "target_model", "Reads: the target's tokenizer, config, embeddings, LM head and (init: "
                                        "target) the layers the drafter starts from.")
@path_option("--info", "target_info", "Reads: the captured layers and layer count.")
@path_option("--hidden", "hidden", "Reads: the extracted hidden-state shards (train.features: offline).")
@path_option("--tokens", "tokens", "Reads: the tokenized rows, run through the target during training "
                                   "(train.features: online).")
@path_option("--out", "drafter", f"Writes: the drafter folder's {' and '.join(DRAFTER_FILES)} (z-lab's "
                                 "DFlashDraftModel / DFlash2DraftModel format).")
@path_option("--state", "train_state", "Resume checkpoints (kept across runs, never cached).")
@path_option("--metrics", "train_metrics", "Writes: losses, accuracies, held-out tau estimate, speed.")
@path_option("--live", "train_live", "Writes, step by step (DVCLive): metrics.json (the latest values) and "
                                    "plots/metrics/ (loss, lr, grad norm, accuracy per position, steps/s, tokens/s, "
                                    "held-out loss and tau estimate).")
@path_option("--position-plot", "train_position_plot", "Writes: final accuracy per block position (a dvc plot).")
@click.pass_obj
def command(settings, model, info, hidden, tokens, out, state, metrics, live, position_plot):
    """Train the drafter on the target's hidden states (stored, or computed as it trains).

    Params: `train`, `drafter`. train.processes_per_node / nodes > 1: starts torchrun itself (or run it
    under your own torchrun); data parallel; resumes from --state."""
    plots = {"live": live, "position": position_plot}

    def stage(params):
        if launches(params.train):
            relaunch("train", params.train, settings.threads)
        else:
            device = compute_device(settings.device, local_rank())
            run(params, model, info, hidden, tokens, out, state, metrics, plots, device, settings.target_device_map)

    run_stage(settings, PARAMS.load, stage)
