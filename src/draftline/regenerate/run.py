"""Drive a backend over all prompts: chunked, turn by turn, resumable.

The caller writes the final file and only then clears the shards, so a kill at any point
leaves either the shards or the finished file.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..config import RegenerateParams
from ..progress import bar
from .answer import Answer
from .store import ShardStore, row_key


def settings_of(p: RegenerateParams) -> dict:
    """The settings that change an answer (and so belong in the row key)."""
    s = {"backend": p.backend, "max_new_tokens": p.max_new_tokens, "temperature": p.temperature,
         "top_p": p.top_p, "seed": p.seed}
    if p.backend == "openai":
        s["model"] = p.openai.model
    return s


def converse(backend, prompts: list[list[dict]], seed: int) -> list[tuple[list[dict], list[Answer]]]:
    """Answer each conversation one user turn at a time, feeding back the target's own
    previous answers: the history the target sees at inference, not someone else's."""
    convs: list[list[dict]] = [[] for _ in prompts]
    answers: list[list[Answer]] = [[] for _ in prompts]
    cursor = [0] * len(prompts)
    while True:
        active = []
        for i, msgs in enumerate(prompts):
            j = cursor[i]
            # Move system turns and the next user turn into the conversation.
            while j < len(msgs) and msgs[j]["role"] != "user":
                convs[i].append(msgs[j]); j += 1
            if j < len(msgs):
                convs[i].append(msgs[j]); cursor[i] = j + 1
                active.append(i)
        if not active:
            break
        got = backend.generate([convs[i] for i in active], seed)
        for i, a in zip(active, got):
            convs[i].append({"role": "assistant", "content": a.text})
            answers[i].append(a)
    return list(zip(convs, answers))


def regenerate(rows: list[dict], backend, params: RegenerateParams, target_fp: str, work: Path,
               batch_size: int) -> tuple[list[dict], dict]:
    settings = settings_of(params)
    keyed = [(row_key(r["messages"], 0, settings, target_fp), r) for r in rows]
    store = ShardStore(work)
    done = store.load({k for k, _ in keyed})
    todo = [(k, r) for k, r in keyed if k not in done]
    # Similar lengths together: less padding per batch.
    todo.sort(key=lambda kr: sum(len(m["content"]) for m in kr[1]["messages"]))
    pb = bar(len(keyed), "regenerate", unit="row")
    pb.update(len(done))
    t0, new_tokens = time.perf_counter(), 0
    for start in range(0, len(todo), params.shard_rows):
        chunk = todo[start : start + params.shard_rows]
        out_rows = []
        for b in range(0, len(chunk), batch_size):
            part = chunk[b : b + batch_size]
            results = converse(backend, [r["messages"] for _, r in part], params.seed + start + b)
            for (k, r), (conv, answers) in zip(part, results):
                last = answers[-1]
                out_rows.append({
                    "key": k, "id": r["id"], "source": r["source"], "category": r["category"],
                    "split": r["split"], "sample": 0, "messages": conv,
                    "completion": last.text, "reasoning": [a.reasoning for a in answers],
                    "finish_reason": [a.finish_reason for a in answers],
                    "prompt_tokens": sum(a.prompt_tokens for a in answers),
                    "completion_tokens": sum(a.completion_tokens for a in answers),
                    "served_model": last.served_model, **{f"gen_{k2}": v for k2, v in settings.items()},
                })
                new_tokens += out_rows[-1]["completion_tokens"]
            pb.update(len(part))
            pb.set_postfix(tok_s=f"{new_tokens / max(time.perf_counter() - t0, 1e-9):.0f}")
        store.append(out_rows)
        for row in out_rows:
            done[row["key"]] = row
    pb.close()
    elapsed = time.perf_counter() - t0
    final = [done[k] for k, _ in keyed]
    stats = {"rows_resumed": len(keyed) - len(todo), "rows_generated": len(todo),
             "generated_tokens": new_tokens, "generate_seconds": round(elapsed, 2),
             "tokens_per_second": round(new_tokens / elapsed, 2) if elapsed > 0 and todo else None}
    return final, stats
