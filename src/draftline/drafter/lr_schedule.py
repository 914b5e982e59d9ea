"""Learning-rate schedule: linear warmup, then cosine decay to lr * min_lr_ratio."""

from __future__ import annotations

import math


def lr_at(step: int, total: int, base: float, warmup_ratio: float, min_ratio: float = 0.0) -> float:
    warm = max(1, int(round(total * warmup_ratio)))
    if step < warm:
        return base * (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, total - warm))
    return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
