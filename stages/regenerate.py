"""Stage `regenerate`: the target answers every mixed prompt, turn by turn.

    python -m stages.regenerate   # writes data/regen/answers.parquet, data/metrics/regenerate.json

Resumable: finished rows go to shards under data/regen/work/ keyed by a content hash;
a rerun after a kill skips them. The shards are removed once answers.parquet is written.
"""

from pathlib import Path

from draftline import target as tgt
from draftline.io import read_parquet, write_json, write_parquet
from draftline.regenerate.run import regenerate
from draftline.regenerate.store import ShardStore, target_fingerprint

from ._run import main

MODEL = Path("data/target/model")
PROMPTS = Path("data/mix/train.parquet")
OUT = Path("data/regen/answers.parquet")
WORK = Path("data/regen/work")
METRICS = Path("data/metrics/regenerate.json")


def _backend(params):
    p = params.regenerate
    if p.backend == "openai":
        from draftline.regenerate.openai_backend import OpenAIBackend

        return OpenAIBackend(p), p.openai.concurrency
    from draftline.regenerate.hf_backend import HFBackend

    model = tgt.load_model(MODEL, params.target.dtype)
    tok = tgt.load_tokenizer(MODEL)
    eos = model.generation_config.eos_token_id
    eos_ids = sorted({*(eos if isinstance(eos, list) else [eos]), tok.eos_token_id} - {None})
    return HFBackend(model, tok, p, eos_ids), p.batch_size


def run(params) -> None:
    rows = read_parquet(PROMPTS)
    backend, batch = _backend(params)
    answers, stats = regenerate(rows, backend, params.regenerate, target_fingerprint(MODEL), WORK, batch)
    write_parquet(OUT, answers)
    ShardStore(WORK).clear()
    finishes = [f for a in answers for f in a["finish_reason"]]
    toks = [a["completion_tokens"] for a in answers]
    write_json(METRICS, {
        "rows": len(answers), "completion_tokens": sum(toks),
        "mean_completion_tokens": round(sum(toks) / max(len(toks), 1), 1),
        "truncation_rate": round(finishes.count("length") / max(len(finishes), 1), 4),
        "with_reasoning": sum(1 for a in answers if any(a["reasoning"])), **stats,
    })
    print(f"regenerate: {len(answers)} rows, {sum(toks)} tokens ({stats['rows_resumed']} resumed)")


if __name__ == "__main__":
    main(run)
