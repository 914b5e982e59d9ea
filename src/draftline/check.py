"""What the check stage reports: the whole params.yaml, validated (stages/check.py)."""

from __future__ import annotations

from pydantic import BaseModel


def count_settings(section: BaseModel) -> int:
    """Leaf settings in a validated section (a nested section counts its own leaves)."""
    return sum(count_settings(v) if isinstance(v, BaseModel) else 1
               for v in (getattr(section, k) for k in type(section).model_fields))
