"""Training sequences from a regenerated conversation, supervised on what the target emitted.

Each assistant turn is rendered the way the target saw and wrote it: the history as the
chat template renders it with the generation prompt (what the server tokenized), then the
turn: reasoning markers, reasoning, answer and the template's turn terminator, all
supervised. The turn's text is located by character search in the template's rendering of
the conversation up to that turn, never by regexes over special tokens, and each part is
tokenized on its own, as prompt and generation are at inference. When regenerate stored the
generated token ids, those ids are the turn (the mask cannot drift from what was emitted).

Templates that rewrite history (Qwen3.x drops the reasoning of turns before the last user
message; Kimi-K2 empties their think blocks) render a turn's history differently once a later
user turn exists, so such a conversation gives one sequence per assistant turn, each with
the history of its own generation. A template that keeps history gives one sequence for the
whole conversation. A turn the template does not render verbatim raises TemplateError, for
the stage to count and name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..chat import ChatTemplate

NONE, REASONING, ANSWER = 0, 1, 2  # what a token is, for the metrics


class TemplateError(ValueError):
    pass


@dataclass
class Turn:
    history: str  # the rendered conversation before the turn, generation prompt included
    text: str | None  # the turn as emitted: markers, reasoning, answer, terminator (None: ids only)
    tail: str  # what the template renders after the turn when it ends the conversation
    ids: list[int] | None  # the generated ids regenerate stored, if any
    truncated_in_reasoning: bool


@dataclass
class Sequence:
    turns: list[int]  # the assistant turns it supervises
    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    parts: list[int] = field(default_factory=list)  # NONE | REASONING | ANSWER per token
    truncated: bool = False
    ids_differ: int = 0  # turns whose stored ids differ from the re-rendered text's

    def add(self, ids: list[int], parts: list[int]) -> None:
        self.input_ids += ids
        self.parts += parts
        self.loss_mask += [int(p != NONE) for p in parts]

    def add_unsupervised(self, ids: list[int]) -> None:
        self.add(ids, [NONE] * len(ids))


def _with_reasoning(messages: list[dict], reasoning: list, keep: bool) -> list[dict]:
    """The conversation with each assistant turn's reasoning as `reasoning_content`, the field
    Qwen3.x and Kimi-K2 templates read (and regenerate sends back in the history)."""
    out, k = [], 0
    for m in messages:
        m = dict(m)
        if m["role"] == "assistant":
            r = reasoning[k] if k < len(reasoning) else None
            if keep and r:
                m["reasoning_content"] = r
            k += 1
        out.append(m)
    return out


def _insert_reasoning(tpl: ChatTemplate, rest: str, reasoning: str, k: int) -> tuple[str, int]:
    """A template that empties a finished turn's think block (Kimi-K2: `<think></think>`)
    never renders the reasoning the target wrote into it; the target emitted it right before
    the block's end marker, so it goes there. (rest with the reasoning, where it starts)"""
    end = tpl.reasoning_end
    at = rest.find(end) if end else -1
    if at < 0:
        raise TemplateError(f"assistant turn {k}: the chat template does not render its reasoning "
                            "(set tokenize.reasoning: drop for a template without reasoning)")
    return rest[:at] + reasoning + rest[at:], at + len(reasoning) - len(reasoning.lstrip())


def _turn_text(tpl: ChatTemplate, history: str, full: str, content: str, reasoning: str | None,
               finish: str, k: int) -> tuple[str, bool, str]:
    """(the turn as emitted, whether it was cut inside its reasoning, what the template
    renders after it)"""
    if not full.startswith(history):
        raise TemplateError(f"assistant turn {k}: the template renders its history differently once the turn "
                            "is added")
    rest = full[len(history):]
    pos = 0
    if reasoning and reasoning.strip():
        r = rest.find(reasoning.strip())
        if r < 0:
            rest, r = _insert_reasoning(tpl, rest, reasoning, k)
        pos = r + len(reasoning.strip())
    if finish == "length" and not content.strip() and pos:
        return rest[:pos], True, rest[pos:]  # cut inside its reasoning: no end marker, no answer
    if content.strip():
        # Verbatim where the template keeps the text as is (a truncated answer's trailing
        # space was emitted); trimmed where it trims (Qwen3.x, Kimi).
        answer = content if rest.find(content, pos) >= 0 else content.strip()
        a = rest.find(answer, pos)
        if a < 0:
            raise TemplateError(f"assistant turn {k} is not rendered verbatim by the chat template")
        pos = a + len(answer)
    if finish == "length":
        return rest[:pos], False, rest[pos:]  # a truncated answer never emitted the terminator
    term = tpl.terminator
    t = rest.find(term, pos) if term else pos
    if t < 0 or rest[pos:t].strip():
        raise TemplateError(f"assistant turn {k}: no turn terminator {term!r} after the answer")
    return rest[:t + len(term)], False, rest[t + len(term):]


def turns(tpl: ChatTemplate, messages: list[dict], reasoning: list, finish_reasons: list[str],
          completion_ids: list | None, keep: bool) -> list[Turn]:
    msgs = _with_reasoning(messages, reasoning, keep)
    out = []
    for k, i in enumerate(i for i, m in enumerate(msgs) if m["role"] == "assistant"):
        history = tpl.render(msgs[:i], True)
        full = tpl.render(msgs[:i + 1], False)
        finish = finish_reasons[k] if k < len(finish_reasons) else "stop"
        # Stored ids hold the reasoning; with reasoning dropped the text is the turn.
        ids = completion_ids[k] if keep and completion_ids is not None and k < len(completion_ids) else None
        try:
            text, cut, tail = _turn_text(tpl, history, full, str(msgs[i].get("content") or ""),
                                         msgs[i].get("reasoning_content"), finish, k)
        except TemplateError:
            if ids is None:
                raise
            # The ids are what was emitted; the text serves only the drift count.
            text, cut, tail = None, False, ""
        out.append(Turn(history, text, tail, None if ids is None else list(ids), cut))
    return out


def _parts(tpl: ChatTemplate, ids: list[int], turn: Turn) -> list[int]:
    """Reasoning up to and including its end marker, answer after it."""
    if turn.truncated_in_reasoning:
        return [REASONING] * len(ids)
    if tpl.reasoning_end:
        marker = tpl.ids(tpl.reasoning_end)
        for j in range(len(ids) - len(marker) + 1):
            if ids[j:j + len(marker)] == marker:
                return [REASONING] * (j + len(marker)) + [ANSWER] * (len(ids) - j - len(marker))
        if tpl.opens_reasoning:  # no end marker after an opened block: all of it is reasoning
            return [REASONING] * len(ids)
    return [ANSWER] * len(ids)


def _supervised(tpl: ChatTemplate, seq: Sequence, turn: Turn) -> None:
    ids = None if turn.text is None else tpl.ids(turn.text)
    if turn.ids is not None:
        seq.ids_differ += ids != turn.ids
        ids = turn.ids
    seq.add(ids, _parts(tpl, ids, turn))


def encode_turns(tpl: ChatTemplate, ts: list[Turn], max_length: int) -> list[Sequence]:
    keeps_history = all(ts[k].text is not None and ts[k + 1].history.startswith(ts[k].history + ts[k].text)
                        for k in range(len(ts) - 1))
    if keeps_history:
        seq, done = Sequence(list(range(len(ts)))), ""
        for t in ts:
            seq.add_unsupervised(tpl.ids(t.history[len(done):]))
            _supervised(tpl, seq, t)
            done = t.history + (t.text or "")
        seq.add_unsupervised(tpl.ids(ts[-1].tail))
        seqs = [seq]
    else:
        seqs = []
        for k, t in enumerate(ts):
            seq = Sequence([k])
            seq.add_unsupervised(tpl.ids(t.history))
            _supervised(tpl, seq, t)
            seq.add_unsupervised(tpl.ids(t.tail))
            seqs.append(seq)
    for s in seqs:
        s.truncated = len(s.input_ids) > max_length
        s.input_ids, s.loss_mask, s.parts = s.input_ids[:max_length], s.loss_mask[:max_length], s.parts[:max_length]
    return seqs


def encode(tok, messages: list[dict], finish_reasons: list[str], max_length: int,
           template_kwargs: dict | None = None) -> Sequence:
    """The one sequence of a conversation without reasoning on a template that keeps
    history (tests and tools that build sequences by hand)."""
    tpl = ChatTemplate(tok, template_kwargs or {})
    seqs = encode_turns(tpl, turns(tpl, messages, [], finish_reasons, None, True), max_length)
    if len(seqs) != 1:
        raise TemplateError("the chat template rewrites history: one sequence per turn, use encode_turns")
    return seqs[0]
