"""Adapters for the prompt sources drafter teams use: where each lives on the hub, how
its rows map to messages, and how each row gets a category.

Field names and nesting follow each dataset as published; tests run every adapter on a
small file written in that schema. A mapper returns the messages (user and system turns
only) or the reason the row cannot be used; a category function returns the row's own
label, or None for the rule (categories.py), which then runs on the whole frame at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

ROLE_ALIASES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant",
                "bing": "assistant", "bard": "assistant", "model": "assistant", "system": "system"}

Mapped = "list[dict] | str"


def turns(raw: Any, field: str) -> list[dict] | str:
    """[{role|from, content|value}, ...] -> user/system messages (assistant turns dropped:
    the target answers again)."""
    if not isinstance(raw, list):
        return f"field '{field}' is not a list"
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            return f"{field}[{i}] is not an object"
        role = ROLE_ALIASES.get(str(m.get("role", m.get("from"))).lower())
        content = m.get("content", m.get("value"))
        if role is None or not isinstance(content, str):
            return f"{field}[{i}]: bad role/content (role={m.get('role', m.get('from'))!r})"
        if role != "assistant":
            out.append({"role": role, "content": content})
    return out


def _text(row: dict, field: str) -> str | None:
    v = row.get(field)
    return v if isinstance(v, str) else None


def _need(row: dict, *fields: str) -> str | None:
    for f in fields:
        if f not in row or row[f] is None:
            return f"missing field '{f}'"
        if not isinstance(row[f], str):
            return f"field '{f}' is not text"
    return None


def single(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# -- per-source mappers ------------------------------------------------------------------

def _nemotron(row: dict) -> Mapped:
    # v1 (Llama-Nemotron-Post-Training-Dataset): `input` is the conversation so far;
    # later versions (Nemotron-Post-Training-Dataset-v1/v2): `messages`. The
    # "detailed thinking on/off" system prompt is Nemotron's own switch, not a prompt.
    field = "input" if "input" in row else "messages"
    if field not in row:
        return "missing field 'input' or 'messages'"
    msgs = turns(row[field], field)
    if isinstance(msgs, str):
        return msgs
    return [m for m in msgs if not (m["role"] == "system" and m["content"].startswith("detailed thinking"))]


NEMOTRON_CATEGORIES = {"code": "coding", "math": "math", "science": "reasoning", "stem": "reasoning",
                       "chat": "chat", "safety": "safety", "tool_calling": "tool_use", "tool": "tool_use"}


def _nemotron_category(row: dict, msgs: list[dict]) -> str | None:
    cat = str(row.get("category") or "")
    if cat.startswith("multilingual"):
        return "multilingual"
    return NEMOTRON_CATEGORIES.get(cat)


def _conversations(row: dict) -> Mapped:
    if "conversations" not in row:
        return "missing field 'conversations'"
    return turns(row["conversations"], "conversations")


_INFINITY_ABILITIES = [("program", "coding"), ("code", "coding"), ("software", "coding"), ("math", "math"),
                       ("logic", "reasoning"), ("reason", "reasoning"), ("problem solving", "reasoning"),
                       ("creat", "writing"), ("writ", "writing"), ("literary", "writing")]


def _infinity_category(row: dict, msgs: list[dict]) -> str | None:
    # Infinity-Instruct labels: langdetect ("en", "zh-cn", ...) and label.cate_ability_en.
    if row.get("langdetect") not in (None, "en"):
        return "multilingual"
    label = row.get("label") if isinstance(row.get("label"), dict) else {}
    abilities = " ".join(str(a) for a in (label.get("cate_ability_en") or [])).lower()
    for key, cat in _INFINITY_ABILITIES:
        if key in abilities:
            return cat
    return None


def _codealpaca(row: dict) -> Mapped:
    if err := _need(row, "instruction"):
        return err
    extra = row.get("input")
    if extra is not None and not isinstance(extra, str):
        return "field 'input' is not text"
    return single(row["instruction"] + (f"\n\n{extra}" if extra and extra.strip() else ""))


def _ultrachat(row: dict) -> Mapped:
    if "messages" in row:
        return turns(row["messages"], "messages")
    return _need(row, "prompt") or single(row["prompt"])


def _magpie(row: dict) -> Mapped:
    if "conversations" in row:
        return turns(row["conversations"], "conversations")
    return _need(row, "instruction") or single(row["instruction"])


MAGPIE_CATEGORIES = {"coding & debugging": "coding", "math": "math", "reasoning": "reasoning",
                     "data analysis": "reasoning", "creative writing": "writing", "editing": "writing",
                     "planning": "chat", "brainstorming": "chat", "advice seeking": "chat",
                     "information seeking": "chat", "role playing": "chat", "others": "chat"}


def _magpie_category(row: dict, msgs: list[dict]) -> str | None:
    if str(row.get("language") or "EN").upper() not in ("EN", "ENGLISH"):
        return "multilingual"
    return MAGPIE_CATEGORIES.get(str(row.get("task_category") or "").lower())


def _field(name: str) -> Callable[[dict], Mapped]:
    def mapper(row: dict) -> Mapped:
        return _need(row, name) or single(row[name])
    return mapper


def _fixed(category: str) -> Callable[[dict, list[dict]], str | None]:
    return lambda row, msgs: category


def _rule(row: dict, msgs: list[dict]) -> None:
    return None


@dataclass(frozen=True)
class Adapter:
    dataset: str
    config: str | None
    split: str
    messages: Callable[[dict], Mapped]
    category: Callable[[dict, list[dict]], str | None]
    data_files: str | None = None


ADAPTERS: dict[str, Adapter] = {
    "nemotron": Adapter("nvidia/Llama-Nemotron-Post-Training-Dataset", "SFT", "chat", _nemotron, _nemotron_category),
    "infinity_instruct": Adapter("BAAI/Infinity-Instruct", "0625", "train", _conversations, _infinity_category),
    "codealpaca": Adapter("sahil2801/CodeAlpaca-20k", None, "train", _codealpaca, _fixed("coding")),
    "sharegpt": Adapter("anon8231489123/ShareGPT_Vicuna_unfiltered", None, "train", _conversations, _rule,
                        data_files="ShareGPT_V3_unfiltered_cleaned_split.json"),
    "ultrachat": Adapter("HuggingFaceH4/ultrachat_200k", None, "train_sft", _ultrachat, _rule),
    "magpie": Adapter("Magpie-Align/Magpie-Pro-300K-Filtered", None, "train", _magpie, _magpie_category),
    "opencodeinstruct": Adapter("nvidia/OpenCodeInstruct", None, "train", _field("input"), _fixed("coding")),
    "gsm8k": Adapter("openai/gsm8k", "main", "train", _field("question"), _fixed("math")),
    "math": Adapter("EleutherAI/hendrycks_math", "algebra", "train", _field("problem"), _fixed("math")),
}
