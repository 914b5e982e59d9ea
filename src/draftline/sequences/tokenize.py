"""Stage `tokenize`: chat template + loss mask for every regenerated conversation.

    draftline tokenize --model DIR --answers FILE --out FILE --metrics FILE
"""

from __future__ import annotations

from pathlib import Path

from ..chat import ChatTemplate
from ..io import read_parquet, write_json, write_parquet
from ..target.load import load_tokenizer
from .copy_turns import CopyTurns
from .ids import sequence_id
from .loss_mask import ANSWER, REASONING, TemplateError, encode_turns, turns

NAMED = 20  # unrendered rows named in the metrics


def run(params, model: Path, answers: Path, out_file: Path, metrics: Path) -> None:
    tpl = ChatTemplate(load_tokenizer(model), params.chat.template_kwargs(), params.chat.thinking_kwarg)
    p = params.tokenize
    rows = read_parquet(answers)
    seen: set[str] = set()
    for r in rows:
        if (sid := sequence_id(r)) in seen:
            raise ValueError(f"tokenize: answer {sid!r} appears twice in {answers}")
        seen.add(sid)
    out, dropped, truncated, copies, split, unrendered = [], 0, 0, 0, 0, []
    with_ids = ids_differ = reasoning_tokens = answer_tokens = 0
    ct = p.copy_turns
    copy_turns = CopyTurns(ct.fraction, ct.requests, ct.seed)
    for r in rows:
        r, copied = copy_turns.apply(r)
        copies += copied
        try:
            ts = turns(tpl, r["messages"], r.get("reasoning") or [], r["finish_reason"], r.get("completion_ids"),
                       p.reasoning == "keep")
        except TemplateError as e:  # counted and named; the stage fails above max_unrendered
            unrendered.append({"id": sequence_id(r), "reason": str(e)})
            continue
        seqs = encode_turns(tpl, ts, p.max_length)
        split += len(seqs) > 1
        with_ids += any(t.ids is not None for t in ts)
        for s in seqs:
            ids_differ += s.ids_differ
            truncated += s.truncated
            # A sequence with < 2 supervised tokens has no anchor for a block: count it, drop it.
            if sum(s.loss_mask) < 2:
                dropped += 1
                continue
            reasoning_tokens += s.parts.count(REASONING)
            answer_tokens += s.parts.count(ANSWER)
            # A conversation the template rewrites gives a sequence per assistant turn:
            # `<id>@<turn>`, stable across runs (extract and train key on ids).
            sid = sequence_id(r) if len(seqs) == 1 else f"{sequence_id(r)}@{s.turns[0]}"
            out.append({"id": sid, "split": r["split"], "input_ids": s.input_ids, "loss_mask": s.loss_mask})
    if len(unrendered) > p.max_unrendered * len(rows):
        first = unrendered[0]
        raise ValueError(f"tokenize: {len(unrendered)} of {len(rows)} rows not rendered verbatim by the chat template "
                         f"(tokenize.max_unrendered {p.max_unrendered}); first {first['id']!r}: {first['reason']}")
    if not out:
        raise ValueError(f"tokenize: every one of {len(rows)} rows has no supervised token")
    write_parquet(out_file, out)
    lengths = [len(r["input_ids"]) for r in out]
    sup = [sum(r["loss_mask"]) for r in out]
    conversations = len(rows) - len(unrendered)
    write_json(metrics, {"rows": len(out), "conversations": conversations,
                         "sequences_per_conversation": round(len(out) / max(conversations, 1), 3),
                         "conversations_split_by_turn": split, "copy_turns": copies,
                         "dropped_no_supervised": dropped, "truncated": truncated, "tokens": sum(lengths),
                         "supervised_tokens": sum(sup), "reasoning_tokens": reasoning_tokens,
                         "answer_tokens": answer_tokens, "rows_with_token_ids": with_ids,
                         "turns_ids_differ_from_text": ids_differ, "unrendered": len(unrendered),
                         "unrendered_ids": " ".join(u["id"] for u in unrendered[:NAMED]),
                         "unrendered_first_reason": unrendered[0]["reason"] if unrendered else "",
                         "mean_length": round(sum(lengths) / len(lengths), 1)})
    print(f"tokenize: {len(out)} sequences from {conversations} conversations ({split} split by turn, {copies} "
          f"with a copy turn), {sum(lengths)} tokens ({sum(sup)} supervised: {reasoning_tokens} reasoning), "
          f"dropped {dropped}, unrendered {len(unrendered)}")
