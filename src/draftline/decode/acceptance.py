"""Acceptance statistics over requests: tau, the tokens-per-step histogram, and the
acceptance rate per drafted position."""

from __future__ import annotations


def tau(per_request: list[list[float]]) -> float:
    """Mean tokens per verify step, averaged per request first (z-lab's definition)."""
    means = [sum(a) / len(a) for a in per_request if a]
    return sum(means) / len(means) if means else float("nan")


def histogram(per_request: list[list[int]], block_size: int) -> list[float]:
    flat = [x for a in per_request for x in a]
    return [flat.count(b) / len(flat) if flat else 0.0 for b in range(block_size + 1)]


def position_acceptance(per_request: list[list[int]], block_size: int) -> list[float]:
    """Share of verify steps that accepted drafted position k, among those that reached it
    (k = 1 .. block_size - 1): the per-position acceptance curve."""
    flat = [x - 1 for a in per_request for x in a]  # drafted tokens accepted per step
    out = []
    for k in range(1, block_size):
        reached = sum(1 for x in flat if x >= k - 1)
        out.append(sum(1 for x in flat if x >= k) / reached if reached else 0.0)
    return out
