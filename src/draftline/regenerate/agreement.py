"""The agreement check: the in-process target (the one extract runs) against the backend
that wrote the answers, token by token, on a sample of them (`regenerate.check_rows`).

Nothing else compares the two: a server in another dtype or quantisation, with another
chat template, or a stale target folder would otherwise pass silently, and the drafter
would learn answers its target does not give. For each sampled row and assistant turn
the sequence is rebuilt as the hf backend read and wrote it: the generation prompt
rendered with the target's template (a server renders its own: a different template shows
here) and the tokens the backend listed log-probs for (`turn_ids`: by id where it named
ids or returned them, else by their text). The target scores it in one forward pass, in
the hf backend's compute dtype, and for each generated token:

- top-1 agreement: the target's likeliest token is the backend's (`top1`);
- |delta log-prob|: of the emitted token, the target's log-prob against the backend's.

The stage records both in its metrics (`agreement`) and fails when the top-1 agreement is
below `regenerate.min_top1_agreement`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .context import chat_ids
from .logprobs import named_id

if TYPE_CHECKING:  # annotations only: the stage imports the config of the sections it reads
    from ..config.regenerate import RegenerateParams

# Log-probs below this count as this: a token a server rates -inf would make every mean
# infinite, and no token that unlikely is generated or decides anything.
FLOOR = -100.0


@dataclass
class Turn:
    prompt: list[int]  # the generation prompt, rendered with the target's template
    ids: list[int]  # the generated ids compared, one per recorded log-prob
    logprobs: list[float]  # the backend's, of each of `ids`
    top1: list[str]  # the backend's likeliest token at each (logprobs.token_name or text)


class Vocabulary:
    """The target's tokens as a server that names them by text spells them (llama.cpp:
    the token's text, special tokens left out, a partial UTF-8 character dropped where
    transformers writes U+FFFD). Built once, when a turn needs it."""

    def __init__(self, tok):
        self.tok = tok
        self._ids: dict[str, int | None] | None = None

    def spellings(self, token_id: int) -> set[str]:
        full = self.tok.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        bare = self.tok.decode([token_id], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return {full, bare, full.replace("\ufffd", "")}

    def id_of(self, text: str) -> int | None:
        """The one token spelt `text`; None when none or several are (bytes of a character)."""
        if self._ids is None:
            texts = self.tok.batch_decode([[i] for i in range(len(self.tok))], skip_special_tokens=False,
                                          clean_up_tokenization_spaces=False)
            self._ids = {}
            for i, t in enumerate(texts):
                self._ids[t] = None if t in self._ids else i
        return self._ids.get(text)

    def same(self, name: str, token_id: int) -> bool:
        """Whether the token a backend named `name` is `token_id`."""
        named = named_id(name)
        return named == token_id if named is not None else name in self.spellings(token_id)


def turn_ids(names: list[str], ids: list[int] | None, answer: str, reasoning: str | None, finish: str,
             vocab: Vocabulary) -> list[int] | None:
    """The ids of the tokens the backend listed log-probs for, in order; shorter than
    `names` when the last is a stop token the text lacks; None when they cannot be told.
    Best first: the backend named them by id; it returned the generated ids; every name
    spells one token; the answer's text, tokenized, has as many tokens (a server may also
    list the stop token). Not for a turn with reasoning: its text lost the delimiters."""
    n = len(names)
    named = [named_id(x) for x in names]
    if None not in named:
        return named
    if ids is not None and len(ids) >= n:
        return ids[:n]
    spelt = [vocab.id_of(x) for x in names]
    if None not in spelt:
        return spelt
    if reasoning:
        return None
    text = vocab.tok.encode(answer, add_special_tokens=False)
    return text if n == len(text) or (n == len(text) + 1 and finish == "stop") else None


def row_turns(row: dict, vocab: Vocabulary, template_kwargs: dict) -> tuple[list[Turn], int]:
    """The row's assistant turns that carry the backend's log-probs, rebuilt; and how many
    such turns could not be matched with the target's tokens."""
    names = row.get("completion_logprob_tokens") or []
    lps, tops = row.get("completion_logprobs") or [], row.get("completion_top1") or []
    ids_of, reasoning = row.get("completion_ids") or [], row.get("reasoning") or []
    conv: list[dict] = []
    turns, unmatched, t = [], 0, 0
    for m in row["messages"]:
        if m["role"] != "assistant":
            conv.append(m)
            continue
        think = reasoning[t] if t < len(reasoning) else None
        if t < len(lps) and lps[t]:
            ids = turn_ids(names[t], ids_of[t] if t < len(ids_of) else None, str(m.get("content") or ""), think,
                           row["finish_reason"][t], vocab)
            if ids:
                n = len(ids)
                turns.append(Turn(chat_ids(vocab.tok, conv, template_kwargs), ids, lps[t][:n], tops[t][:n]))
            else:
                unmatched += 1
        # later turns were asked with the answer and its reasoning (Answer.history)
        conv.append({**m, "reasoning_content": think} if think else m)
        t += 1
    return turns, unmatched


@torch.inference_mode()
def target_scores(model, turn: Turn) -> tuple[torch.Tensor, torch.Tensor]:
    """(the target's log-prob of each generated id, its likeliest token at each), from one
    forward pass over the prompt and the answer; logits only where they are compared (a
    long prompt's full logits would be gigabytes at a large vocabulary)."""
    n = len(turn.ids)
    x = torch.tensor([turn.prompt + turn.ids[:-1]], device=model.device)
    try:
        logits = model(input_ids=x, use_cache=False, logits_to_keep=n).logits[0, -n:]
    except TypeError:  # a model class without logits_to_keep: all of them, then the ones compared
        logits = model(input_ids=x, use_cache=False).logits[0, -n:]
    lp = torch.log_softmax(logits.float(), dim=-1)
    return lp.gather(-1, torch.tensor(turn.ids, device=lp.device)[:, None])[:, 0].cpu(), lp.argmax(-1).cpu()


def measure(rows: list[dict], sample: set[str], load_target: Callable[[], object], tok,
            template_kwargs: dict, p: RegenerateParams) -> dict:
    """The agreement metrics over the answered rows of the sample. load_target() -> the
    in-process target (called only when there is something to score; an error it raises
    is the reason the check could not run). `reason` is None when the check ran."""
    out = {"sampled": len(sample), "rows": 0, "turns": 0, "tokens": 0, "top1": None, "mean_abs_dlogprob": None,
           "p99_abs_dlogprob": None, "max_abs_dlogprob": None, "min_top1": p.min_top1_agreement,
           "rows_without_logprobs": 0, "unmatched_turns": 0, "reason": None}
    if not sample:
        return {**out, "reason": "regenerate.check_rows is 0" if p.check_rows == 0 else "no rows to sample"}
    picked = [r for r in rows if r["key"] in sample]
    if not picked:
        return {**out, "reason": "no row of the sample was answered"}
    if tok is None:
        return {**out, "reason": "the target folder has no tokenizer to rebuild the answers' tokens with"}
    vocab = Vocabulary(tok)
    scored = [r for r in picked if r.get("completion_logprobs")]
    out["rows_without_logprobs"] = len(picked) - len(scored)
    if not scored:
        return {**out, "reason": f"the backend returned no log-probs for any of the {len(picked)} sampled rows"}
    per_row = [row_turns(r, vocab, template_kwargs) for r in scored]
    out["unmatched_turns"] = sum(u for _, u in per_row)
    turns = [t for ts, _ in per_row for t in ts]
    if not turns:
        return {**out, "reason": f"none of the {out['unmatched_turns']} recorded turns matched the target's tokens"}
    try:
        model = load_target()
    except Exception as err:  # noqa: BLE001 - any failure to load is the reason the check did not run
        return {**out, "reason": f"the in-process target could not be loaded: {type(err).__name__}: {err}"}
    deltas, agree = [], 0
    for t in turns:
        mine, argmax = target_scores(model, t)
        theirs = torch.tensor(t.logprobs, dtype=torch.float32)
        deltas.append((mine.clamp(min=FLOOR) - theirs.clamp(min=FLOOR)).abs())
        agree += sum(vocab.same(name, i) for name, i in zip(t.top1, argmax.tolist()))
    d = torch.cat(deltas)
    return {**out, "rows": sum(bool(ts) for ts, _ in per_row), "turns": len(turns), "tokens": len(d),
            "top1": round(agree / len(d), 4), "mean_abs_dlogprob": round(d.mean().item(), 4),
            "p99_abs_dlogprob": round(torch.quantile(d, 0.99).item(), 4), "max_abs_dlogprob": round(d.max().item(), 4)}


def failure(m: dict, p: RegenerateParams, backend: str) -> str | None:
    """The stage's one-line failure for these metrics, None when they pass."""
    if m["reason"] is not None:
        if p.check_rows == 0 or not p.check_required:
            return None
        return (f"regenerate: the agreement check could not run: {m['reason']}. It compares the {backend} backend "
                f"with the in-process target on regenerate.check_rows answers; set regenerate.check_required: "
                f"false to go on without it")
    if m["top1"] < p.min_top1_agreement:
        return (f"regenerate: the {backend} backend and the in-process target agree on the top-1 token at "
                f"{m['top1']:.1%} of {m['tokens']} tokens of {m['rows']} rows, below "
                f"regenerate.min_top1_agreement {p.min_top1_agreement} (mean |delta log-prob| "
                f"{m['mean_abs_dlogprob']}, p99 {m['p99_abs_dlogprob']}): the answers were not written by the "
                f"target in the target folder (another model, dtype or quantisation, or another chat template?)")
    return None
