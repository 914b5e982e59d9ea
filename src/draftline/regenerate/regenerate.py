"""Stage `regenerate`: the target answers every mixed prompt, turn by turn.

    draftline regenerate --model DIR --prompts FILE --out DIR --work DIR --logs DIR --metrics FILE

Resumable: finished rows go to shards in the work folder keyed by a content hash; a
rerun after a kill (SIGKILL included) skips them, and a rerun after a params change that
does not touch generation reuses the previous answers. Rows that fail after retries go to
the errors file with their reason; the stage fails when they pass
regenerate.max_error_rate, and its rerun retries only those.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click

from ..command import path_option, run_stage
from ..devices import compute_device
from ..io import read_parquet, write_json, write_parquet
from ..precision import batch_dtype
from ..target.load import load_model, load_tokenizer
from .drive import HFDriver, regenerate
from .store import ShardStore, target_fingerprint

# The stage's output folder holds these files (tokenize reads the first).
ANSWERS, DROPPED, ERRORS = "answers.parquet", "dropped.parquet", "errors.parquet"
ERROR_SCHEMA = ["key", "id", "source", "sample", "kind", "reason", "attempts"]


def _driver(params, model_dir: Path, logs: Path, device, device_map):
    p = params.regenerate
    if p.backend == "openai":
        from .openai_run import OpenAIDriver

        return OpenAIDriver(p, logs)
    from .hf_backend import HFBackend

    model = load_model(model_dir, _hf_dtype(params, device), device, device_map)
    tok = load_tokenizer(model_dir)
    eos = model.generation_config.eos_token_id
    eos_ids = sorted({*(eos if isinstance(eos, list) else [eos]), tok.eos_token_id} - {None})
    return HFDriver(HFBackend(model, tok, p, eos_ids), p.batch_size)


def _hf_dtype(params, device) -> str:
    return batch_dtype(params.regenerate.dtype, params.target.dtype, device)


def _write_errors(path: Path, errors: list[dict]) -> None:
    import pyarrow as pa

    cols = {c: [e[c] for e in errors] for c in ERROR_SCHEMA}
    types = [pa.string()] * 3 + [pa.int64(), pa.string(), pa.string(), pa.int64()]
    write_parquet(path, pa.table({c: pa.array(v, t) for (c, v), t in zip(cols.items(), types)}))


def run(params, model: Path, prompts: Path, out_dir: Path, work: Path, logs: Path, metrics_file: Path,
        device=None, device_map: str | None = None) -> None:
    p = params.regenerate
    device = device or compute_device()
    answers_file, dropped_file, errors_file = out_dir / ANSWERS, out_dir / DROPPED, out_dir / ERRORS
    rows = read_parquet(prompts)
    total = len(rows) * p.samples_per_prompt
    target_fp = target_fingerprint(model, None if p.backend == "openai" else _hf_dtype(params, device))
    out = regenerate(rows, _driver(params, model, logs, device, device_map), p, target_fp, work,
                     finished=[answers_file, dropped_file])
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
        "compute_dtype": _hf_dtype(params, device) if p.backend == "hf" else None,
        "completion_tokens": sum(toks), "prompt_tokens": sum(a["prompt_tokens"] for a in answers),
        "mean_completion_tokens": round(sum(toks) / max(len(toks), 1), 1),
        "truncated_rows": len(truncated), "dropped_truncated": len(answers) - len(kept),
        "truncation_rate": round(finishes.count("length") / max(len(finishes), 1), 4),
        "with_reasoning": sum(1 for a in answers if any(a["reasoning"])),
        "errors": len(errors), "error_rate": round(error_rate, 4), "errors_by_kind": dict(sorted(by_kind.items())),
        **out.stats,
        "endpoints": {str(i): v for i, v in enumerate(endpoints.values())},
    }
    _write_errors(errors_file, errors)
    write_json(metrics_file, metrics)
    for i, url in enumerate(endpoints):
        print(f"regenerate: endpoint {i} {url}: {endpoints[url]}")
    if error_rate > p.max_error_rate:
        raise RuntimeError(
            f"regenerate: {len(errors)} of {total} rows failed ({error_rate:.1%}), above regenerate.max_error_rate "
            f"{p.max_error_rate}; by kind {dict(by_kind)}; reasons in {errors_file}. Finished rows are kept: "
            f"a rerun asks only for the rest")
    write_parquet(answers_file, kept)
    if p.drop_truncated:
        write_parquet(dropped_file, [a for a in answers if "length" in a["finish_reason"]])
    elif dropped_file.exists():
        dropped_file.unlink()
    ShardStore(work).clear()
    print(f"regenerate: {len(kept)} rows, {sum(toks)} tokens ({out.stats['rows_resumed']} resumed, "
          f"{len(errors)} failed, {len(truncated)} truncated)")


@click.command("regenerate")
@path_option("--model", "target_model", "Reads: the target (in-process backend: its weights; servers: its hash).")
@path_option("--prompts", "mix_train", "Reads: the mixed training prompts.")
@path_option("--out", "regen", f"Writes: a folder with {ANSWERS} (every conversation with the target's answers), "
                               f"{ERRORS} (rows that failed, with reasons) and {DROPPED} (with drop_truncated).")
@path_option("--work", "regen_work", "Resume shards of finished rows (kept outside --out, removed when done).")
@path_option("--logs", "regen_logs", "Launched servers' output, secrets masked (not an artifact).")
@path_option("--metrics", "regenerate_metrics", "Writes: rows, tokens, truncation, errors by kind, throughput.")
@click.pass_obj
def command(settings, model, prompts, out, work, logs, metrics):
    """The target answers every training prompt, turn by turn.

    Params: `regenerate`, `target.dtype`. In process (transformers) or on OpenAI-compatible
    servers; resumes exactly after a kill."""
    run_stage(settings, lambda params: run(params, model, prompts, out, work, logs, metrics,
                                           compute_device(settings.device), settings.target_device_map))
