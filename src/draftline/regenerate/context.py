"""Prompts measured against the target's context, before any batch is formed.

A prompt that leaves less than `max_new_tokens` of the context cannot be answered: in
process its whole batch is padded to it (one 100,000-character prompt had the stage killed
for memory, naming no row), and a server refuses it. Every (prompt, sample) is measured
once, turn by turn with the earlier answers empty, and one that does not fit is handled by
`regenerate.long_prompts`:

- drop: the row is not answered;
- cut: a first turn that does not fit is cut in the middle of its longest message (the
  instruction at its start and the question at its end stay), and a later turn that does
  not fit ends the conversation before it (the row keeps its earlier turns).

A later turn can also outgrow the context only once the target's own earlier answers are
in it; `PromptLimit.over` catches that as the turn is asked, and the row is dropped or
ended there the same way. Every such row is named in a printed line, counted in the
metrics and listed (`LONG_SCHEMA`) with its turn and length.
"""

from __future__ import annotations

from ..config.chat import ChatParams

from ..config.regenerate import RegenerateParams
from ..io import write_parquet
from .drive import next_turns
from .jobs import Job

LONG_SCHEMA = ["key", "id", "source", "sample", "turn", "prompt_tokens", "limit", "action"]
CUT_MARK = "\n...\n"
PRINTED = 20  # rows named one line each; the rest are counted and listed
_UNSET = 10**9  # transformers sets model_max_length to about 1e30 when the tokenizer does not know it


def target_context(config, tokenizer) -> int | None:
    """The target's context in tokens: its config's max_position_embeddings, else the
    tokenizer's model_max_length when that is set; None when neither says."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(text, "max_position_embeddings", None)
    if n is None:
        m = getattr(tokenizer, "model_max_length", None)
        n = m if isinstance(m, int) and 0 < m < _UNSET else None
    return None if n is None else int(n)


def chat_ids(tok, conv: list[dict], template_kwargs: dict) -> list[int]:
    """The ids the target reads for `conv`, with the generation prompt."""
    ids = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=True, **template_kwargs)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return list(ids)


def turns_asked(messages: list[dict]) -> list[list[dict]]:
    """The conversation as each user turn is asked, the earlier answers left empty."""
    convs, cursor, out = [[]], [0], []
    while next_turns([messages], convs, cursor):
        out.append(list(convs[0]))
        convs[0].append({"role": "assistant", "content": ""})
    return out


class PromptLimit:
    """Measures prompts against `context` less the answer budget; records each row over it."""

    def __init__(self, tokenizer, context: int | None, params: RegenerateParams, chat: ChatParams | None = None):
        self.tok, self.p, self.context = tokenizer, params, context
        self.template_kwargs = (chat or ChatParams()).template_kwargs()
        self.limit = None if context is None else context - params.max_new_tokens
        if self.limit is not None and self.limit <= 0:
            raise ValueError(f"regenerate.max_new_tokens {params.max_new_tokens} leaves no room for a prompt in the "
                             f"target's {context}-token context (regenerate.max_context)")
        self.events: list[dict] = []

    def count(self, conv: list[dict]) -> int:
        return len(chat_ids(self.tok, conv, self.template_kwargs))

    def over(self, conv: list[dict]) -> int | None:
        """conv's length when it leaves no room for an answer, else None."""
        if self.limit is None:
            return None
        n = self.count(conv)
        return n if n > self.limit else None

    def check(self, jobs: list[Job]) -> list[Job]:
        """The jobs to ask, each measured (`Job.tokens`) and cut to fit; dropped ones left out."""
        return [k for j in jobs if (k := self._check(j)) is not None]

    def _check(self, job: Job) -> Job | None:
        row, first = job.row, None
        while True:
            asked = turns_asked(row["messages"])
            n_last = self.count(asked[-1]) if asked else 0
            if self.limit is None or n_last <= self.limit:
                break
            lengths = [self.count(c) for c in asked[:-1]] + [n_last]
            t = next(i for i, n in enumerate(lengths) if n > self.limit)
            first = first or (t + 1, lengths[t])
            if self.p.long_prompts == "drop":
                self._record(job, *first, "dropped")
                return None
            if t == 0:
                if (row := self._cut_first(row, lengths[0])) is None:
                    self._record(job, *first, "dropped")
                    return None
                continue  # later turns are measured again on the cut row
            row = {**row, "messages": _before_turn(row["messages"], t)}
        if first is not None:
            self._record(job, *first, "cut")
        turns = max(len(asked), 1)
        return Job(job.key, row, job.sample, n_last + turns * self.p.max_new_tokens)

    def _cut_first(self, row: dict, n: int) -> dict | None:
        """row with the longest message of its first turn cut in the middle until that turn
        fits; None when even an empty message would not."""
        msgs = row["messages"]
        first = len(turns_asked(msgs)[0])
        i = max(range(first), key=lambda k: len(str(msgs[k].get("content") or "")))
        text = str(msgs[i].get("content") or "")
        enc = self.tok(text, add_special_tokens=False, return_offsets_mapping=True)
        spans = enc["offset_mapping"]
        keep = len(spans) - (n - self.limit) - len(self.tok.encode(CUT_MARK, add_special_tokens=False))
        while keep > 0:
            head, tail = keep - keep // 2, keep // 2
            cut = text[: spans[head - 1][1]] + CUT_MARK + (text[spans[len(spans) - tail][0]:] if tail else "")
            new = [*msgs[:i], {**msgs[i], "content": cut}, *msgs[i + 1:]]
            m = self.count(turns_asked(new)[0])
            if m <= self.limit:
                return {**row, "messages": new}
            keep -= m - self.limit  # merges at the cut can differ from the original's
        return None

    def later(self, job: Job, turn: int, tokens: int) -> dict:
        """A later turn outgrew the context once the earlier answers were in it: recorded,
        and the row is dropped or ended before that turn as `long_prompts` says."""
        return self._record(job, turn, tokens, "dropped" if self.p.long_prompts == "drop" else "cut")

    def resumed(self, job: Job, row: dict) -> None:
        """A row an earlier run ended before a later turn (its answers are fewer than the
        prompt's turns): listed again, its length unknown here."""
        asked = len(turns_asked(job.row["messages"]))
        if len(row["finish_reason"]) < asked and not any(e["key"] == job.key for e in self.events):
            self._record(job, len(row["finish_reason"]) + 1, None, "cut")

    def _record(self, job: Job, turn: int, tokens: int | None, action: str) -> dict:
        r = job.row
        e = {"key": job.key, "id": r["id"], "source": r["source"], "sample": job.sample, "turn": turn,
             "prompt_tokens": tokens, "limit": self.limit, "action": action}
        self.events.append(e)
        if len(self.events) <= PRINTED:
            size = f"{tokens} tokens" if tokens is not None else "too long"
            print(f"regenerate: row {r['id']} ({r['source']}, sample {job.sample}) turn {turn}: {size}, over the "
                  f"{self.limit} the context leaves ({self.context} less max_new_tokens "
                  f"{self.p.max_new_tokens}): {action}")
        return e


def _before_turn(messages: list[dict], t: int) -> list[dict]:
    """messages up to (not including) the user turn with index t."""
    seen = -1
    for k, m in enumerate(messages):
        if m["role"] == "user":
            seen += 1
            if seen == t:
                return messages[:k]
    return messages


def write_long(path, events: list[dict]) -> None:
    """The rows over the context, one line each (an empty file when there are none)."""
    import pyarrow as pa

    types = [pa.string()] * 3 + [pa.int64()] * 4 + [pa.string()]
    write_parquet(path, pa.table({c: pa.array([e[c] for e in events], t) for c, t in zip(LONG_SCHEMA, types)}))
