"""Stage `tokenize`: chat template + loss mask for every regenerated conversation.

    draftline tokenize --model DIR --answers FILE --out FILE --metrics FILE
"""

from __future__ import annotations

from pathlib import Path

import click

from ..command import path_option, run_stage
from ..io import read_parquet, write_json, write_parquet
from ..target.load import load_tokenizer
from .copy_turns import CopyTurns
from .ids import sequence_id
from .loss_mask import encode


def run(params, model: Path, answers: Path, out_file: Path, metrics: Path) -> None:
    tok = load_tokenizer(model)
    rows = read_parquet(answers)
    seen: set[str] = set()
    for r in rows:
        if (sid := sequence_id(r)) in seen:
            raise ValueError(f"tokenize: answer {sid!r} appears twice in {answers}")
        seen.add(sid)
    out, dropped, truncated, copies = [], 0, 0, 0
    ct = params.tokenize.copy_turns
    copy_turns = CopyTurns(ct.fraction, ct.requests, ct.seed)
    for r in rows:
        messages, reasons, copied = copy_turns.apply(r)
        copies += copied
        enc = encode(tok, messages, reasons, params.tokenize.max_length)
        truncated += enc.truncated
        # A row with < 2 supervised tokens has no anchor for a block: count it and drop it.
        if sum(enc.loss_mask) < 2:
            dropped += 1
            continue
        out.append({"id": sequence_id(r), "split": r["split"], "input_ids": enc.input_ids, "loss_mask": enc.loss_mask})
    if not out:
        raise ValueError(f"tokenize: every one of {len(rows)} rows has no supervised token")
    write_parquet(out_file, out)
    lengths = [len(r["input_ids"]) for r in out]
    sup = [sum(r["loss_mask"]) for r in out]
    write_json(metrics, {"rows": len(out), "copy_turns": copies, "dropped_no_supervised": dropped,
                         "truncated": truncated, "tokens": sum(lengths), "supervised_tokens": sum(sup),
                         "mean_length": round(sum(lengths) / len(lengths), 1)})
    print(f"tokenize: {len(out)} rows ({copies} with a copy turn), {sum(lengths)} tokens "
          f"({sum(sup)} supervised), dropped {dropped}")


@click.command("tokenize")
@path_option("--model", "target_model", "Reads: the target's tokenizer and chat template.")
@path_option("--answers", "regen_answers", "Reads: the regenerated conversations.")
@path_option("--out", "tokens", "Writes: one row per sequence: id, split, input_ids, loss_mask "
                                "(1 on the target's own tokens; `draftline inspect` shows them).")
@path_option("--metrics", "tokenize_metrics", "Writes: rows, tokens, supervised tokens, drops.")
@click.pass_obj
def command(settings, model, answers, out, metrics):
    """Chat template + loss mask on what the target wrote.

    Params: `tokenize`."""
    run_stage(settings, lambda params: run(params, model, answers, out, metrics))
