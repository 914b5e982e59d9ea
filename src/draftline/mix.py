"""Mix: exact and near-duplicate removal, decontamination against eval prompts, category
weights, split."""

from __future__ import annotations

import hashlib
import math
import random
import unicodedata
from collections import Counter

import numpy as np

from .config import FollowupParams, MixParams, NearDedupeParams
from .near_dedupe import MinHashSettings, near_duplicates
from .shingles import shingle_hashes, words


def normalise(text: str) -> str:
    """Case-, accent-width- and whitespace-insensitive form used for exact dedupe."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(text.split())


def prompt_text(messages: list[dict]) -> str:
    return "\n".join(m["content"] for m in messages if m["role"] == "user")


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


def near_dedupe(rows: list[dict], p: NearDedupeParams, seed: int) -> tuple[list[dict], Counter, dict]:
    """Drop near-duplicates (MinHash LSH, src/draftline/near_dedupe.py); the first of
    each group in input order stays. Counts dropped rows per source."""
    if not p.enabled or not rows:
        return rows, Counter(), {}
    settings = MinHashSettings(shingle=p.shingle, num_perm=p.num_perm, bands=p.bands, threshold=p.threshold,
                               seed=seed)
    drop, stats = near_duplicates([prompt_text(r["messages"]) for r in rows], settings)
    kept = [r for r, d in zip(rows, drop) if not d]
    return kept, Counter(r["source"] for r, d in zip(rows, drop) if d), stats


def decontaminate(train: list[dict], eval_rows: list[dict], n: int) -> tuple[list[dict], Counter]:
    """Drop training prompts sharing any word n-gram with an eval prompt.

    An eval prompt shorter than n words is looked for whole (as a word sequence) inside
    every training prompt, so a short benchmark question copied into training data is
    still caught. Vectorised: both sides are shingled in one batch and compared by hash."""
    if not train or not eval_rows:
        return train, Counter()
    nt = len(train)
    w = words([prompt_text(r["messages"]) for r in train] + [prompt_text(r["messages"]) for r in eval_rows])
    lens = w.lengths
    hit = np.zeros(nt, bool)
    h, doc = shingle_hashes(w, n)
    full = lens[doc] >= n
    banned = np.unique(h[(doc >= nt) & full])
    tr = (doc < nt) & full
    hit[doc[tr][np.isin(h[tr], banned)]] = True
    eval_lens = lens[nt:]
    for length in np.unique(eval_lens[(eval_lens > 0) & (eval_lens < n)]):
        h, doc = shingle_hashes(w, int(length))
        ev = (doc >= nt) & (lens[doc] == length)
        tr = doc < nt
        hit[doc[tr][np.isin(h[tr], h[ev])]] = True
    kept = [r for r, x in zip(train, hit) if not x]
    return kept, Counter(r["source"] for r, x in zip(train, hit) if x)


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
