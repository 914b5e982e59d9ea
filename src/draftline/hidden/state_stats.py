"""Whether stored hidden states are sound: per captured layer (and the final state), a
shard's RMS and its counts of all-zero and non-finite rows (a row: one token's state at one
layer), counted as the shard is written.

Two faults this stops before days of extraction and training are spent on them: vLLM
versions that stored all-zero hidden states for hybrid Gated-DeltaNet targets, and NaN or
inf from a broken or badly quantized target. write.py refuses a shard holding either
before its ledger line is written, so no run trusts it; the manifest keeps each shard's
statistics, and `draftline inspect --hidden` prints them.

    .venv/bin/python -m pytest tests/model/test_state_stats.py
"""

from __future__ import annotations

import bisect
import math
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

CHUNK_ROWS = 1024  # tokens a pass: 63 MB of bf16 at 27B width (30,720 columns), its float copies <= 4x that
FEW = 5  # bad tokens named in the error, per kind and layer; the counts cover the rest
KINDS = ("all-zero", "non-finite")


class UnsoundStates(ValueError):
    """A shard holds all-zero or non-finite hidden-state rows."""


def state_labels(layer_ids: list[int], teacher: str) -> list[str]:
    """Names of the column groups of a shard's `states`, in order: its layers, then `final`."""
    return [str(i) for i in layer_ids] + (["final"] if teacher == "final" else [])


class StateCheck:
    """with StateCheck(labels, hidden) as check: check.add(states)... then check.stats(),
    check.refuse_unsound(...). The batches are counted in a thread beside the shard writer's,
    so the next batch's forward does not wait for them; at most one batch is pending.

    Every stored row is a real token: the producers drop the padding before a batch is
    written (producers.py; vLLM's files have none), so a zero row is never padding."""

    def __init__(self, group_labels: list[str], hidden: int):
        self.labels, self.hidden = list(group_labels), hidden
        g = len(self.labels)
        self.tokens = 0
        self._sumsq = torch.zeros(g, dtype=torch.float64)  # over finite rows only: a NaN hides nothing else
        self._counts = {k: torch.zeros(g, dtype=torch.int64) for k in KINDS}
        # kind -> per layer, the shard offsets of its first FEW bad tokens
        self._found: dict[str, list[list[int]]] = {k: [[] for _ in range(g)] for k in KINDS}
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="state-check")
        self._pending: Future | None = None

    def add(self, states: torch.Tensor) -> None:
        """The shard's next [n, groups x hidden] rows, in the order they are stored."""
        self._wait()
        self._pending = self._pool.submit(self._count, states, self.tokens)
        self.tokens += int(states.shape[0])

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()  # re-raises the thread's error here
            self._pending = None

    @torch.inference_mode()
    def _count(self, states: torch.Tensor, start: int) -> None:
        for a in range(0, states.shape[0], CHUNK_ROWS):
            v = states[a : a + CHUNK_ROWS].reshape(-1, len(self.labels), self.hidden)
            norm = torch.linalg.vector_norm(v, dim=-1, dtype=torch.float32)  # the one pass a sound chunk costs
            sq = norm.double().square()
            # A norm of 0 or inf only flags a chunk (tiny values square to 0 in float32, huge ones
            # overflow): min and max, exact on bf16 and NaN-propagating, decide, and the squares
            # are taken again in float64.
            if bool(((norm == 0) | ~norm.isfinite()).any()):
                lo, hi = torch.aminmax(v, dim=-1)
                bad = {"all-zero": (lo == 0) & (hi == 0), "non-finite": ~(lo.isfinite() & hi.isfinite())}
                sq = torch.where(bad["non-finite"], 0.0, v.double().square().sum(-1))
                self._note(bad, start + a)
            self._sumsq += sq.sum(0)

    def _note(self, bad: dict[str, torch.Tensor], start: int) -> None:
        """Count a chunk's bad rows ([tokens, layers] masks), and keep the first few per layer."""
        for kind, m in bad.items():
            per_layer = m.sum(0)
            self._counts[kind] += per_layer
            for j in per_layer.nonzero().flatten().tolist():
                found = self._found[kind][j]
                if len(found) < FEW:
                    found += [start + t for t in m[:, j].nonzero().flatten()[: FEW - len(found)].tolist()]

    def __enter__(self) -> "StateCheck":
        return self

    def __exit__(self, kind, err, tb) -> None:
        try:
            if kind is None:
                self._wait()
        finally:
            self._pool.shutdown(wait=True)

    def stats(self) -> dict[str, dict]:
        """label -> {rms, zero_rows, nonfinite_rows}: a shard's entry in the manifest."""
        out = {}
        for j, label in enumerate(self.labels):
            finite = self.tokens - int(self._counts["non-finite"][j])
            rms = math.sqrt(float(self._sumsq[j]) / (finite * self.hidden)) if finite else None
            out[label] = {"rms": None if rms is None else float(f"{rms:.6g}"),
                          "zero_rows": int(self._counts["all-zero"][j]),
                          "nonfinite_rows": int(self._counts["non-finite"][j])}
        return out

    def refuse_unsound(self, path: Path, index_rows: list[dict]) -> None:
        """Raise, in one line naming the shard and, per kind and layer, the count and the
        first bad rows, when any row is all zero or not finite. `index_rows`: the shard's
        rows in order (id, offset), as in index.json."""
        totals = {k: int(c.sum()) for k, c in self._counts.items()}
        if not any(totals.values()):
            return
        parts = []
        for kind in KINDS:
            for j, label in enumerate(self.labels):
                n = int(self._counts[kind][j])
                if n:
                    more = f" and {n - len(self._found[kind][j])} more" if n > len(self._found[kind][j]) else ""
                    where = "the final state" if label == "final" else f"layer {label}"
                    parts.append(f"{kind} at {where} ({n} row(s)): "
                                 f"{_located(self._found[kind][j], index_rows)}{more}")
        raise UnsoundStates(
            f"extract: {path} holds {totals['all-zero']} all-zero and {totals['non-finite']} non-finite hidden-state "
            f"row(s) (a row: one token at one layer): {'; '.join(parts)}. The shard is not recorded as done, so no "
            "run uses it. A target or backend that writes such states (a vLLM version that stored zeros for "
            "Gated-DeltaNet layers, a broken quantization) must be fixed before extracting")


def _located(tokens: list[int], index_rows: list[dict]) -> str:
    """Shard token offsets as `sequence 'id' (shard row i) tokens t,u`, by sequence."""
    starts = [r["offset"] for r in index_rows]
    by_row: dict[int, list[int]] = {}
    for t in tokens:
        i = bisect.bisect_right(starts, t) - 1
        by_row.setdefault(i, []).append(t - starts[i])
    return ", ".join(f"sequence {index_rows[i]['id']!r} (shard row {i}) token{'s' if len(ts) > 1 else ''} "
                     + ",".join(map(str, ts)) for i, ts in by_row.items())


def overall(shards: list[dict]) -> dict[str, dict]:
    """label -> {rms, rms_min, rms_max, zero_rows, nonfinite_rows} over the manifest's shards
    or ledger lines (the RMS over every finite row; the min and max of the shards' RMS)."""
    out: dict[str, dict] = {}
    for s in shards:
        for label, st in s["state_stats"].items():
            o = out.setdefault(label, {"sumsq": 0.0, "rows": 0, "shard_rms": [], "zero_rows": 0, "nonfinite_rows": 0})
            finite = s["tokens"] - st["nonfinite_rows"]
            if st["rms"] is not None:
                o["sumsq"] += st["rms"] ** 2 * finite
                o["rows"] += finite
                o["shard_rms"].append(st["rms"])
            o["zero_rows"] += st["zero_rows"]
            o["nonfinite_rows"] += st["nonfinite_rows"]
    return {label: {"rms": float(f"{math.sqrt(o['sumsq'] / o['rows']):.6g}") if o["rows"] else None,
                    "rms_min": min(o["shard_rms"], default=None), "rms_max": max(o["shard_rms"], default=None),
                    "zero_rows": o["zero_rows"], "nonfinite_rows": o["nonfinite_rows"]} for label, o in out.items()}
