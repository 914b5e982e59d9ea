"""The mixture: category weights, the train/val split and follow-up turns.

Each choice is a pure function of the seed and the prompts' ids, so adding prompts does
not reshuffle the choices made for the others.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter

from ..config import FollowupParams, MixParams


def mix_by_category(rows: list[dict], params: MixParams) -> tuple[list[dict], list[str]]:
    """Sample without replacement to match the category weights; return rows and warnings."""
    by_cat: dict[str, list[dict]] = {}
    for r in rows:
        by_cat.setdefault(r["category"], []).append(r)
    weights = {c: w for c, w in params.category_weights.items() if w > 0}
    warnings = []
    if not weights:
        return [], ["every category weight is zero"]
    # A weighted category no source supplies (a source left out of download.sources) is
    # left out with a warning; counting it would size the whole mix to zero.
    for c in sorted(c for c in weights if not by_cat.get(c)):
        warnings.append(f"category '{c}' has no prompts; left out of the mix")
        del weights[c]
    if not weights:
        return [], warnings
    total_w = sum(weights.values())
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


def add_followups(rows: list[dict], p: FollowupParams, seed: int) -> tuple[list[dict], Counter]:
    """Give a share of the single-turn prompts a second user turn (rewrite, explain, test...).

    The target then answers turn 1 and, with its own answer in view, turn 2: the MT-Bench
    second-turn situation, where much of the answer restates the first. A drafter learns to
    copy from context only if its data has such turns. Which prompts, and which follow-up,
    is a pure function of (seed, id), so adding prompts changes no earlier choice."""
    out, added = [], Counter()
    for r in rows:
        users = [m for m in r["messages"] if m["role"] == "user"]
        options = p.turns.get(r["category"], [])
        h = hashlib.sha1(f"followup:{seed}:{r['id']}".encode()).digest()
        if len(users) == 1 and options and int.from_bytes(h[:4], "big") / 0xFFFFFFFF < p.fraction:
            turn = options[int.from_bytes(h[4:8], "big") % len(options)]
            r = {**r, "messages": list(r["messages"]) + [{"role": "user", "content": turn}]}
            added[r["category"]] += 1
        out.append(r)
    return out, added
