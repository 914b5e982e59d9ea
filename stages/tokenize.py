"""Stage `tokenize`: chat template + loss mask for every regenerated conversation.

    draftline tokenize --model DIR --answers FILE --out FILE --metrics FILE
"""

from __future__ import annotations

import click

from draftline.command import path_option, run_stage
from draftline.config.chat import ChatParams
from draftline.config.tokenize import TokenizeParams
from draftline.config.view import Declared
from draftline.sequences.tokenize import run

PARAMS = Declared("tokenize", ("chat", "tokenize"), (ChatParams, TokenizeParams))


@click.command("tokenize")
@path_option("--model", "target_model", "Reads: the target's tokenizer and chat template.")
@path_option("--answers", "regen_answers", "Reads: the regenerated conversations.")
@path_option("--out", "tokens", "Writes: one row per sequence: id, split, input_ids, loss_mask "
                                "(1 on the target's own tokens; `draftline inspect` shows them).")
@path_option("--metrics", "tokenize_metrics", "Writes: rows, tokens, supervised tokens, drops.")
@click.pass_obj
def command(settings, model, answers, out, metrics):
    """Chat template + loss mask on what the target wrote, reasoning included.

    Params: `chat`, `tokenize`."""
    run_stage(settings, PARAMS.load, lambda params: run(params, model, answers, out, metrics))
