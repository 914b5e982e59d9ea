"""Mix: exact dedupe, decontamination against eval prompts, category weights, split."""

from __future__ import annotations

import hashlib
import math
import random
import re
import unicodedata
from collections import Counter

from .config import MixParams

_WORD = re.compile(r"\w+", re.UNICODE)


def normalise(text: str) -> str:
    """Case-, accent-width- and whitespace-insensitive form used for exact dedupe."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(text.split())


def prompt_text(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] == "user")


def _ngrams(text: str, n: int) -> set[str]:
    words = _WORD.findall(normalise(text))
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def dedupe(rows: list[dict]) -> tuple[list[dict], int]:
    """Keep the first row of each normalised text (input order is the source order)."""
    seen: set[str] = set()
    kept = []
    for r in rows:
        key = hashlib.sha1(normalise(prompt_text(r["messages"])).encode()).hexdigest()
        if key not in seen:
            seen.add(key)
            kept.append(r)
    return kept, len(rows) - len(kept)


def decontaminate(train: list[dict], eval_rows: list[dict], n: int) -> tuple[list[dict], Counter]:
    """Drop training prompts sharing any word n-gram with an eval prompt.

    A prompt shorter than n words is compared whole, so a short benchmark question copied
    verbatim into training data is still caught."""
    banned: set[str] = set()
    short: set[str] = set()
    for r in eval_rows:
        text = prompt_text(r["messages"])
        grams = _ngrams(text, n)
        banned |= grams
        if not grams:
            short.add(" ".join(_WORD.findall(normalise(text))))
    kept, dropped = [], Counter()
    for r in train:
        text = prompt_text(r["messages"])
        words = " ".join(_WORD.findall(normalise(text)))
        if _ngrams(text, n) & banned or (short and any(s and s in words for s in short)):
            dropped[r["source"]] += 1
        else:
            kept.append(r)
    return kept, dropped


def mix_by_category(rows: list[dict], params: MixParams) -> tuple[list[dict], list[str]]:
    """Sample without replacement to match the category weights; return rows and warnings."""
    by_cat: dict[str, list[dict]] = {}
    for r in rows:
        by_cat.setdefault(r["category"], []).append(r)
    weights = {c: w for c, w in params.category_weights.items() if w > 0}
    total_w = sum(weights.values())
    warnings = []
    if not weights:
        return [], ["every category weight is zero"]
    if params.total is None:
        # The largest mix that meets every weight exactly.
        total = min(len(by_cat.get(c, [])) / (w / total_w) for c, w in weights.items())
        total = int(math.floor(total + 1e-9))
    else:
        total = params.total
    rng = random.Random(params.seed)
    out = []
    for cat in sorted(weights):
        pool = sorted(by_cat.get(cat, []), key=lambda r: r["id"])
        want = round(total * weights[cat] / total_w)
        if want > len(pool):
            warnings.append(f"category '{cat}' has {len(pool)} prompts, weight asks for {want}")
            want = len(pool)
        out.extend(rng.sample(pool, want))
    out.sort(key=lambda r: r["id"])
    return out, warnings


def split(rows: list[dict], val_fraction: float, seed: int) -> list[dict]:
    """Assign split=train|val deterministically by hashing (seed, id): stable under
    additions, so adding prompts does not reshuffle the validation set."""
    out = []
    for r in rows:
        h = int(hashlib.sha1(f"{seed}:{r['id']}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        out.append({**r, "split": "val" if h < val_fraction else "train"})
    return out
