"""Stage `extract`: target hidden states at the drafter's layers, in a few bf16 shards.

    python -m stages.extract   # writes data/hidden/ (shards + index.json), data/metrics/extract.json
"""

from pathlib import Path

from draftline import target as tgt
from draftline.devices import compute_device
from draftline.extract import extract
from draftline.hidden_store import ShardWriter
from draftline.io import atomic_path, read_parquet, write_json
from draftline.precision import batch_dtype

from ._run import main

MODEL = Path("data/target/model")
INFO = Path("data/target/info.json")
TOKENS = Path("data/tokens/train.parquet")
OUT = Path("data/hidden")
METRICS = Path("data/metrics/extract.json")


def run(params) -> None:
    info = tgt.TargetInfo.load(INFO)
    rows = read_parquet(TOKENS)
    device = compute_device()
    dtype = batch_dtype(params.extract.dtype, info.dtype, device)
    model = tgt.load_model(MODEL, dtype, device)
    tok = tgt.load_tokenizer(MODEL)
    pad = tok.pad_token_id if tok.pad_token_id is not None else info.eos_token_ids[0]
    meta = {"target_layer_ids": info.target_layer_ids, "hidden_size": info.hidden_size,
            "final": "post-norm last hidden state", "dtype": "bfloat16"}
    with atomic_path(OUT) as tmp:
        tmp.mkdir(parents=True)
        writer = ShardWriter(tmp, params.extract.shard_tokens, meta)
        stats = extract(model, rows, info.target_layer_ids, writer, params.extract.batch_tokens, pad)
    write_json(METRICS, {**stats, "compute_dtype": dtype, "device": device.type})
    print(f"extract: {stats['tokens']} tokens in {stats['shards']} shard(s), {stats['tokens_per_second']} tok/s")


if __name__ == "__main__":
    main(run)
