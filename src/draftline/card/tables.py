"""The card's acceptance tables: tau and speedup per eval source, beside the baselines."""

from __future__ import annotations


def fmt(x, spec: str, suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def acceptance_table(metrics: dict) -> list[str]:
    """tau and speedup per eval source (greedy), trained drafter beside the baselines."""
    section = metrics.get("greedy") or {}
    methods = [m for m in ("dflash", "untrained", "prompt_lookup") if any(m in e for e in section.values())]
    methods += sorted({m for e in section.values() for m in e if m.startswith("tree_")})
    names = {"dflash": "this drafter", "untrained": "untrained drafter", "prompt_lookup": "prompt lookup"}
    head = ["eval set", "requests", "target tok/s"] + [f"{names.get(m, m)} tau (speedup)" for m in methods]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for src, e in section.items():
        cells = [f"`{src}`", str(e.get("requests", "-")), fmt(e.get("target_tokens_per_second"), ".1f")]
        for m in methods:
            r = e.get(m) or {}
            cells.append(f"{fmt(r.get('tau'), '.3f')} ({fmt(r.get('speedup'), '.2f', 'x')})")
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def reasoning_table(metrics: dict) -> list[str]:
    """For a thinking target: this drafter's tau on the reasoning and on the answer part of
    the generations, per eval source (greedy). Nothing for a target that does not think."""
    if "reasoning_end" not in metrics:
        return []
    rows = [f"The target thinks before it answers; its reasoning ends at `{metrics['reasoning_end']}`. Each "
            "verify step counts for the part it started in.", "",
            "| eval set | tau | reasoning tau (tokens) | answer tau (tokens) |", "| --- | --- | --- | --- |"]
    for src, e in (metrics.get("greedy") or {}).items():
        r = e.get("dflash") or {}
        rows.append(f"| `{src}` | {fmt(r.get('tau'), '.3f')} | {fmt(r.get('tau_reasoning'), '.3f')} "
                    f"({r.get('reasoning_tokens', '-')}) | {fmt(r.get('tau_answer'), '.3f')} "
                    f"({r.get('answer_tokens', '-')}) |")
    return rows + [""]
