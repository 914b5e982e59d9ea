"""One id per training sequence: what extract, the per-sequence teacher cache and the
anchor draws key on."""

from __future__ import annotations


def sequence_id(row: dict) -> str:
    """With regenerate.samples_per_prompt > 1 a prompt has several answers; extra samples
    get a suffix (sample 0 keeps the prompt's id, so ids do not change with one sample)."""
    return f"{row['id']}~{row['sample']}" if row.get("sample") else row["id"]
