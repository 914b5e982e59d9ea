"""Stage `tokenize`: chat template + loss mask for every regenerated conversation.

    python -m stages.tokenize   # writes data/tokens/train.parquet, data/metrics/tokenize.json
"""

from pathlib import Path

from draftline import target as tgt
from draftline.copy_turns import CopyTurns
from draftline.io import read_parquet, write_json, write_parquet
from draftline.loss_mask import encode

from ._run import main

MODEL = Path("data/target/model")
ANSWERS = Path("data/regen/answers.parquet")
OUT = Path("data/tokens/train.parquet")
METRICS = Path("data/metrics/tokenize.json")


def sequence_id(row: dict) -> str:
    """One id per training sequence. With regenerate.samples_per_prompt > 1 a prompt has
    several answers; extract, the per-sequence teacher cache and the anchor draws key on
    this id, so extra samples get a suffix (sample 0 keeps the prompt's id)."""
    return f"{row['id']}~{row['sample']}" if row.get("sample") else row["id"]


def run(params) -> None:
    tok = tgt.load_tokenizer(MODEL)
    rows = read_parquet(ANSWERS)
    seen: set[str] = set()
    for r in rows:
        if (sid := sequence_id(r)) in seen:
            raise ValueError(f"tokenize: answer {sid!r} appears twice in {ANSWERS}")
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
    write_parquet(OUT, out)
    lengths = [len(r["input_ids"]) for r in out]
    sup = [sum(r["loss_mask"]) for r in out]
    write_json(METRICS, {"rows": len(out), "copy_turns": copies, "dropped_no_supervised": dropped, "truncated": truncated,
                         "tokens": sum(lengths), "supervised_tokens": sum(sup),
                         "mean_length": round(sum(lengths) / len(lengths), 1)})
    print(f"tokenize: {len(out)} rows ({copies} with a copy turn), {sum(lengths)} tokens "
          f"({sum(sup)} supervised), dropped {dropped}")


if __name__ == "__main__":
    main(run)
