"""Stage `regenerate`: the target answers every mixed prompt, turn by turn.

    draftline regenerate --model DIR --prompts FILE --out DIR --work DIR --logs DIR --metrics FILE

Resumable: finished rows go to shards in the work folder keyed by a content hash; a
rerun after a kill (SIGKILL included) skips them, and a rerun after a params change that
does not touch generation reuses the previous answers. Rows that fail after retries go to
the errors file with their reason; the stage fails when they pass
regenerate.max_error_rate, and its rerun retries only those.

Then the in-process target scores a sample of the answers (agreement.py) and the stage
fails when it disagrees with the backend that wrote them: regenerate.min_top1_agreement.
The rows of such a run are set aside, not resumed: they are another model's answers.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

import torch

from .. import secrets
from ..chat import ChatTemplate
from ..devices import compute_device
from ..io import read_parquet, write_json, write_parquet
from ..precision import batch_dtype
from ..target.load import TargetError, load_config, load_model, load_tokenizer
from .agreement import failure, measure
from .answer import truncated_in_reasoning
from .context import PromptLimit, target_context, write_long
from .drive import HFDriver, answer_all
from .store import ShardStore, target_fingerprint

# The stage's output folder holds these files (tokenize reads the first).
ANSWERS, DROPPED, ERRORS = "answers.parquet", "dropped.parquet", "errors.parquet"
LONG = "long_prompts.parquet"  # rows over the target's context, dropped or cut
ERROR_SCHEMA = ["key", "id", "source", "sample", "kind", "reason", "attempts"]
DISAGREED = "disagreed"  # resume shards of a run that failed the agreement check, inside the work folder


def _driver(params, model_dir: Path, logs: Path, device, device_map, tok):
    p = params.regenerate
    if p.backend == "openai":
        from .openai_run import OpenAIDriver

        return OpenAIDriver(p, logs, params.chat, _opened(tok, params.chat))
    from .hf_backend import HFBackend

    model = load_model(model_dir, _hf_dtype(params, device), device, device_map)
    eos = model.generation_config.eos_token_id
    eos_ids = sorted({*(eos if isinstance(eos, list) else [eos]), tok.eos_token_id} - {None})
    return HFDriver(HFBackend(model, tok, p, eos_ids, params.chat), p.batch_size, p.batch_tokens)


def _opened(tok, chat) -> bool:
    """Whether the target's generation prompt leaves a reasoning block open, rendered with
    the target's tokenizer (servers serve the same model); False when it cannot be rendered."""
    if tok is None:
        return False
    try:
        return ChatTemplate(tok, chat.template_kwargs(), chat.thinking_kwarg).opens_reasoning
    except ValueError:  # no chat template in the target folder: the servers have their own
        return False


def _tokenizer(p, model_dir: Path):
    """The target's tokenizer; None for servers when the target folder has none (a folder
    that only fingerprints what they serve)."""
    try:
        return load_tokenizer(model_dir)
    except (OSError, ValueError, TargetError):
        if p.backend == "hf" or p.max_context is not None:
            raise
        return None


def _limit(params, model_dir: Path, tok) -> PromptLimit | None:
    """Prompts measured against the target's context, from its config and tokenizer in the
    target folder (for servers too: they serve the same model). Unknown: in process prompts
    are still measured for batching; for servers they are not, and a server refuses one too
    long (a final http_4xx in the errors file)."""
    p = params.regenerate
    context = None  # no tokenizer: a folder that only fingerprints what the servers serve
    if tok is not None:
        try:
            context = p.max_context or target_context(load_config(model_dir), tok)
        except (OSError, ValueError, TargetError):
            if p.backend == "hf":
                raise
    if context is None:
        print(f"regenerate: the target's context is unknown (no max_position_embeddings in its config, no "
              f"model_max_length in its tokenizer, in {model_dir}), so prompts are not checked against it; "
              f"set regenerate.max_context")
        if p.backend == "openai":
            return None
    return PromptLimit(tok, context, p, params.chat)


def _hf_dtype(params, device) -> str:
    return batch_dtype(params.regenerate.dtype, params.target.dtype, device)


def _check_target(params, driver, model_dir: Path, device, device_map):
    """A thunk for the target the agreement check runs: the hf backend's own model, or for
    servers the target folder's, loaded in the dtype the hf backend would use (after the
    stage's servers have stopped, so their GPUs are free)."""
    if params.regenerate.backend == "hf":
        return lambda: driver.backend.model
    return lambda: load_model(model_dir, _hf_dtype(params, device), device, device_map)


def _set_aside_run(work: Path) -> str:
    """Move the run's resume shards out of the way, so that a rerun (with the server fixed)
    answers afresh instead of resuming another model's answers; they stay for a look, and
    can be moved back should the check have been wrong. What was done, for the message."""
    shards = ShardStore(work).shards()
    if not shards:
        return "no resume shards to set aside"
    dest = work / DISAGREED / time.strftime("%Y%m%dT%H%M%S")
    dest.mkdir(parents=True, exist_ok=True)
    for f in shards:
        shutil.move(str(f), dest / f.name)
    return f"this run's answers are set aside in {dest}, so a rerun answers afresh"


def _write_errors(path: Path, errors: list[dict]) -> None:
    import pyarrow as pa

    cols = {c: [e[c] for e in errors] for c in ERROR_SCHEMA}
    # Reasons quote server bodies, which may echo the request's key; this file is cached and pushed.
    cols["reason"] = [secrets.mask(r) for r in cols["reason"]]
    types = [pa.string()] * 3 + [pa.int64(), pa.string(), pa.string(), pa.int64()]
    write_parquet(path, pa.table({c: pa.array(v, t) for (c, v), t in zip(cols.items(), types)}))


def _turns(row: dict) -> list[tuple[str, str, str | None]]:
    """(finish reason, answer, reasoning) of each assistant turn of a stored row."""
    answers = [str(m.get("content") or "") for m in row["messages"] if m["role"] == "assistant"]
    return list(zip(row["finish_reason"], answers, row["reasoning"] or []))


def _agreement_line(m: dict) -> str:
    if m["reason"] is not None:
        return f"not measured ({m['reason']})"
    return (f"top-1 {m['top1']:.2%}, mean |delta log-prob| {m['mean_abs_dlogprob']}, p99 {m['p99_abs_dlogprob']} "
            f"over {m['tokens']} tokens of {m['rows']} rows (regenerate.min_top1_agreement {m['min_top1']})")


def _masked(value):
    """Every string in a metrics tree masked: some come from the servers (the model they serve)."""
    if isinstance(value, str):
        return secrets.mask(value)
    if isinstance(value, dict):
        return {_masked(k): _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return value


def run(params, model: Path, prompts: Path, out_dir: Path, work: Path, logs: Path, metrics_file: Path,
        device=None, device_map: str | None = None) -> None:
    p = params.regenerate
    device = torch.device(device) if device is not None else compute_device()
    answers_file, dropped_file, errors_file = out_dir / ANSWERS, out_dir / DROPPED, out_dir / ERRORS
    rows = read_parquet(prompts)
    total = len(rows) * p.samples_per_prompt
    target_fp = target_fingerprint(model, None if p.backend == "openai" else _hf_dtype(params, device))
    tok = _tokenizer(p, model)
    limit = _limit(params, model, tok)
    driver = _driver(params, model, logs, device, device_map, tok)
    out = answer_all(rows, driver, p, target_fp, work, finished=[answers_file, dropped_file], limit=limit)
    answers, errors = out.rows, out.errors
    agreement = measure(answers, out.sample, _check_target(params, driver, model, device, device_map), tok,
                        params.chat.template_kwargs(), p)
    agreement["answered_again"] = out.stats.pop("check_rows_answered_again")
    agreement["dtype"] = _hf_dtype(params, device)
    truncated = [a for a in answers if "length" in a["finish_reason"]]
    cut_turns = [(f, a, r) for row in answers for f, a, r in _turns(row) if f == "length"]
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
        # answers (assistant turns) cut by max_new_tokens, and those cut inside their
        # reasoning: kept or dropped (drop_truncated), they are counted here either way
        "truncated": len(cut_turns), "truncated_in_reasoning": sum(truncated_in_reasoning(*t) for t in cut_turns),
        "with_reasoning": sum(1 for a in answers if any(a["reasoning"])),
        "errors": len(errors), "error_rate": round(error_rate, 4), "errors_by_kind": dict(sorted(by_kind.items())),
        "context": limit.context if limit is not None else None,
        "long_prompts_dropped": sum(e["action"] == "dropped" for e in out.long),
        "long_prompts_cut": sum(e["action"] == "cut" for e in out.long),
        **out.stats,
        "endpoints": {str(i): v for i, v in enumerate(endpoints.values())},
        # the backend against the in-process target, on the answers of `sampled` rows
        "agreement": agreement,
    }
    _write_errors(errors_file, errors)
    write_long(out_dir / LONG, out.long)
    if out.long:
        print(f"regenerate: {len(out.long)} rows over the target's context ({metrics['long_prompts_dropped']} "
              f"dropped, {metrics['long_prompts_cut']} cut: regenerate.long_prompts), listed in {out_dir / LONG}")
    write_json(metrics_file, _masked(metrics))
    for i, url in enumerate(endpoints):
        print(secrets.mask(f"regenerate: endpoint {i} {url}: {endpoints[url]}"))
    if error_rate > p.max_error_rate:
        raise RuntimeError(
            f"regenerate: {len(errors)} of {total} rows failed ({error_rate:.1%}), above regenerate.max_error_rate "
            f"{p.max_error_rate}; by kind {dict(by_kind)}; reasons in {errors_file}. Finished rows are kept: "
            f"a rerun asks only for the rest")
    print(f"regenerate: agreement with the in-process target: {_agreement_line(agreement)}")
    if (why := failure(agreement, p, p.backend)) is not None:
        if agreement["reason"] is None:
            why += f"; {_set_aside_run(work)}"
        raise RuntimeError(why)
    write_parquet(answers_file, kept)
    if p.drop_truncated:
        write_parquet(dropped_file, [a for a in answers if "length" in a["finish_reason"]])
    elif dropped_file.exists():
        dropped_file.unlink()
    ShardStore(work).clear()
    print(f"regenerate: {len(kept)} rows, {sum(toks)} tokens ({out.stats['rows_resumed']} resumed, "
          f"{len(errors)} failed, {len(truncated)} truncated)")
