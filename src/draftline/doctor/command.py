"""`draftline doctor`: before a long extract or train, prove on one or two rows that a drafter
of the configured shape, trained on this target's features and exported, is fully
accepted as served.

    make doctor                                   # after `dvc repro tokenize`
    draftline doctor --rows 2 --serve-block-size 16   # as vLLM will serve it (num_speculative_tokens 15)
"""

from __future__ import annotations

from pathlib import Path

import click

from ..command import path_option, run_stage
from ..config.drafter import DrafterParams
from ..config.extract import ExtractParams
from ..config.train import TrainParams
from ..config.view import Declared
from ..devices import compute_device

# extract.state_dtype: the rows' states are stored (bf16 or FP8) as the extract stage will.
PARAMS = Declared("doctor", ("drafter", "extract.state_dtype", "train"), (DrafterParams, ExtractParams, TrainParams))


@click.command("doctor")
@path_option("--model", "target_model", "Reads: the target (the target stage's folder).")
@path_option("--info", "target_info", "Reads: its captured layers, dtype and vocabulary.")
@path_option("--tokens", "tokens", "Reads: the tokenized rows whose prompts it uses.")
@click.option("--rows", type=click.IntRange(1, 8), default=2, show_default=True, help="Rows to overfit.")
@click.option("--new-tokens", type=click.IntRange(min=2), help="Greedy tokens of the target per row to draft.  "
                                                               "[default: 8 blocks]")
@click.option("--max-prompt-tokens", type=click.IntRange(min=1), default=256, show_default=True,
              help="Skip rows with longer prompts (minutes on a CPU).")
@click.option("--max-steps", type=click.IntRange(min=1), default=400, show_default=True,
              help="Overfitting steps at most.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=1e-3, show_default=True,
              help="Overfitting learning rate (constant).")
@click.option("--serve-block-size", type=click.IntRange(min=2),
              help="The block size the engine will draft: vLLM num_speculative_tokens + 1, SGLang "
                   "speculative-num-draft-tokens.  [default: the export's]")
@click.option("--keep", type=click.Path(path_type=Path, file_okay=False),
              help="Keep the overfit drafter's export here (config.json, model.safetensors).")
@click.pass_obj
def command(settings, model, info, tokens, rows, new_tokens, max_prompt_tokens, max_steps, lr, serve_block_size,
            keep):
    """The gate before the GPU hours: overfit, export, decode as served.

    Params: `drafter`, `train`, `extract.state_dtype`. On the first rows of the tokenized data it trains a fresh drafter of
    the configured shape until it drafts every block right, exports it, reads the export back as
    the engines do and decodes with the benchmark's decoder and z-lab's dflash_generate. It fails,
    naming the likely cause (layer ids, mask token, block size, rotary, features), unless every
    block is fully accepted and the two decoders agree."""
    from .gate import DoctorFailure, Options, run

    opts = Options(rows, new_tokens, max_prompt_tokens, max_steps, lr, serve_block_size, keep)

    def stage(params):
        try:
            report = run(params, model, info, tokens, opts, compute_device(settings.device))
        except DoctorFailure as failure:
            _show(failure.lines)
            raise
        _show(report.lines)
        print("doctor: pass: every block fully accepted, both decoders agree")

    run_stage(settings, PARAMS.load, stage)


def _show(lines: list[str]) -> None:
    print("\n".join(f"doctor: {line}" for line in lines), flush=True)
