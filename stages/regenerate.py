"""Stage `regenerate`: the target answers every mixed prompt, turn by turn.

    draftline regenerate --model DIR --prompts FILE --out DIR --work DIR --logs DIR --metrics FILE

Resumable: a rerun after a kill skips finished rows (regenerate/stage.py).
"""

from __future__ import annotations

import click

from draftline.command import path_option, run_stage
from draftline.config.chat import ChatParams
from draftline.config.regenerate import RegenerateParams
from draftline.config.target import TargetParams
from draftline.config.view import Declared
from draftline.devices import compute_device
from draftline.regenerate.stage import ANSWERS, DROPPED, ERRORS, LONG, run

PARAMS = Declared("regenerate", ("target.dtype", "chat", "regenerate"), (TargetParams, ChatParams, RegenerateParams))


@click.command("regenerate")
@path_option("--model", "target_model", "Reads: the target (its context and tokenizer; in process its weights, "
                                       "for servers its hash).")
@path_option("--prompts", "mix_train", "Reads: the mixed training prompts.")
@path_option("--out", "regen", f"Writes: a folder with {ANSWERS} (every conversation with the target's answers), "
                               f"{ERRORS} (rows that failed, with reasons), {LONG} (rows over the target's "
                               f"context, dropped or cut) and {DROPPED} (with drop_truncated).")
@path_option("--work", "regen_work", "Resume shards of finished rows (kept outside --out, removed when done).")
@path_option("--logs", "regen_logs", "Launched servers' output, secrets masked (not an artifact).")
@path_option("--metrics", "regenerate_metrics", "Writes: rows, tokens, truncation, errors by kind, throughput, "
                                               "and the backend's agreement with the in-process target.")
@click.pass_obj
def command(settings, model, prompts, out, work, logs, metrics):
    """The target answers every training prompt, turn by turn.

    Params: `regenerate`, `chat`, `target.dtype`. In process (transformers) or on OpenAI-compatible
    servers; resumes exactly after a kill; fails when the in-process target disagrees with the
    backend on a sample of the answers (regenerate.min_top1_agreement)."""
    run_stage(settings, PARAMS.load, lambda params: run(params, model, prompts, out, work, logs, metrics,
                                           compute_device(settings.device), settings.target_device_map))
