"""Stage `regenerate`: the target answers every mixed prompt, turn by turn.

    python -m stages.regenerate   # writes data/regen/{answers,errors}.parquet, data/metrics/regenerate.json

Resumable: finished rows go to shards under data/regen_work/ keyed by a content hash;
a rerun after a kill (SIGKILL included) skips them, and a rerun after a params change
that does not touch generation reuses the previous answers. Rows that fail after retries
go to errors.parquet with their reason; the stage fails when they pass
regenerate.max_error_rate, and its rerun retries only those.
"""

from collections import Counter
from pathlib import Path

from draftline import target as tgt
from draftline.devices import compute_device
from draftline.io import read_parquet, write_json, write_parquet
from draftline.precision import batch_dtype
from draftline.regenerate.run import HFDriver, regenerate
from draftline.regenerate.store import ShardStore, target_fingerprint

from ._run import main

MODEL = Path("data/target/model")
PROMPTS = Path("data/mix/train.parquet")
OUT = Path("data/regen")
ANSWERS = OUT / "answers.parquet"
DROPPED = OUT / "dropped.parquet"  # length-truncated rows, when drop_truncated is set
ERRORS = OUT / "errors.parquet"
# Resume shards live outside the stage's DVC output: `dvc exp run` restores data/regen to
# the baseline's before it runs, which would delete an interrupted experiment's shards.
WORK = Path("data/regen_work")
LOGS = Path("logs/regenerate")  # launched servers' output (secrets masked); not an artifact
METRICS = Path("data/metrics/regenerate.json")
ERROR_SCHEMA = ["key", "id", "source", "sample", "kind", "reason", "attempts"]


def _driver(params):
    p = params.regenerate
    if p.backend == "openai":
        from draftline.regenerate.openai_run import OpenAIDriver

        return OpenAIDriver(p, LOGS)
    from draftline.regenerate.hf_backend import HFBackend

    model = tgt.load_model(MODEL, _hf_dtype(params), compute_device())
    tok = tgt.load_tokenizer(MODEL)
    eos = model.generation_config.eos_token_id
    eos_ids = sorted({*(eos if isinstance(eos, list) else [eos]), tok.eos_token_id} - {None})
    return HFDriver(HFBackend(model, tok, p, eos_ids), p.batch_size)


def _hf_dtype(params) -> str:
    return batch_dtype(params.regenerate.dtype, params.target.dtype, compute_device())


def _write_errors(errors: list[dict]) -> None:
    import pyarrow as pa

    cols = {c: [e[c] for e in errors] for c in ERROR_SCHEMA}
    types = [pa.string()] * 3 + [pa.int64(), pa.string(), pa.string(), pa.int64()]
    write_parquet(ERRORS, pa.table({c: pa.array(v, t) for (c, v), t in zip(cols.items(), types)}))


def run(params) -> None:
    p = params.regenerate
    rows = read_parquet(PROMPTS)
    total = len(rows) * p.samples_per_prompt
    target_fp = target_fingerprint(MODEL, None if p.backend == "openai" else _hf_dtype(params))
    out = regenerate(rows, _driver(params), p, target_fp, WORK, finished=[ANSWERS, DROPPED])
    answers, errors = out.rows, out.errors
    truncated = [a for a in answers if "length" in a["finish_reason"]]
    kept = [a for a in answers if not (p.drop_truncated and "length" in a["finish_reason"])]
    finishes = [f for a in answers for f in a["finish_reason"]]
    toks = [a["completion_tokens"] for a in answers]
    by_kind = Counter(e["kind"] for e in errors)
    error_rate = len(errors) / max(total, 1)
    endpoints = out.stats.pop("endpoints", {})
    metrics = {
        "rows": len(kept), "rows_answered": len(answers), "prompts": len(rows),
        "samples_per_prompt": p.samples_per_prompt,
        "compute_dtype": _hf_dtype(params) if p.backend == "hf" else None,
        "completion_tokens": sum(toks), "prompt_tokens": sum(a["prompt_tokens"] for a in answers),
        "mean_completion_tokens": round(sum(toks) / max(len(toks), 1), 1),
        "truncated_rows": len(truncated), "dropped_truncated": len(answers) - len(kept),
        "truncation_rate": round(finishes.count("length") / max(len(finishes), 1), 4),
        "with_reasoning": sum(1 for a in answers if any(a["reasoning"])),
        "errors": len(errors), "error_rate": round(error_rate, 4), "errors_by_kind": dict(sorted(by_kind.items())),
        **out.stats,
        "endpoints": {str(i): v for i, v in enumerate(endpoints.values())},
    }
    _write_errors(errors)
    write_json(METRICS, metrics)
    for i, url in enumerate(endpoints):
        print(f"regenerate: endpoint {i} {url}: {endpoints[url]}")
    if error_rate > p.max_error_rate:
        raise RuntimeError(
            f"regenerate: {len(errors)} of {total} rows failed ({error_rate:.1%}), above regenerate.max_error_rate "
            f"{p.max_error_rate}; by kind {dict(by_kind)}; reasons in {ERRORS}. Finished rows are kept: "
            f"a rerun asks only for the rest")
    write_parquet(ANSWERS, kept)
    if p.drop_truncated:
        write_parquet(DROPPED, [a for a in answers if "length" in a["finish_reason"]])
    elif DROPPED.exists():
        DROPPED.unlink()
    ShardStore(WORK).clear()
    print(f"regenerate: {len(kept)} rows, {sum(toks)} tokens ({out.stats['rows_resumed']} resumed, "
          f"{len(errors)} failed, {len(truncated)} truncated)")


if __name__ == "__main__":
    main(run)
