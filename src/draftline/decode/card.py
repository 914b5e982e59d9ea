"""`draftline card`: the drafter folder's model card, so the folder is ready to publish.

    draftline card      # after the benchmark stage, which also runs it

The card says what the drafter is for (the target, its layers, block size and mask token),
how well it drafts (the benchmark's tau and speedup per eval source, beside the baselines)
and how to serve it: vLLM (`"method": "dflash"`, num_speculative_tokens = block size - 1,
z-lab's convention), SGLang (`--speculative-algorithm DFLASH`, num draft tokens = block
size) and z-lab's reference `dflash_generate`. Front matter as z-lab publishes its drafters
(library_name transformers, dflash tags) plus `base_model`, the target.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..command import path_option
from ..io import atomic_path, read_json

TAGS = ["dflash", "speculative-decoding", "draft-model", "block-diffusion", "draftline"]

# The engine releases whose own code reads the export in tests/engines (rotary tables, layer
# ids, mask id, block size); that test fails when the installed versions differ from these.
ENGINES_CHECKED = {"vllm": "0.33.0", "sglang": "0.5.23"}


def _base_model(info: dict) -> str | None:
    """The target as a hub id (a card's `base_model`), when it has one."""
    return info.get("provenance", {}).get("base_model")


def _fmt(x, spec: str, suffix: str = "") -> str:
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
        cells = [f"`{src}`", str(e.get("requests", "-")), _fmt(e.get("target_tokens_per_second"), ".1f")]
        for m in methods:
            r = e.get(m) or {}
            cells.append(f"{_fmt(r.get('tau'), '.3f')} ({_fmt(r.get('speedup'), '.2f', 'x')})")
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
        rows.append(f"| `{src}` | {_fmt(r.get('tau'), '.3f')} | {_fmt(r.get('tau_reasoning'), '.3f')} "
                    f"({r.get('reasoning_tokens', '-')}) | {_fmt(r.get('tau_answer'), '.3f')} "
                    f"({r.get('answer_tokens', '-')}) |")
    return rows + [""]


def render(config: dict, info: dict, metrics: dict, drafter_ref: str) -> str:
    dc = config.get("dflash_config", {})
    block = int(dc.get("block_size", config.get("block_size", 0)))
    arch = (config.get("architectures") or ["DFlashDraftModel"])[0]
    base = _base_model(info)
    target_ref = base or info.get("provenance", {}).get("source", "<target>")
    front = ["---"] + ([f"base_model: {base}"] if base else []) + [
        "library_name: transformers", "pipeline_tag: text-generation", "tags:", *[f"- {t}" for t in TAGS], "---", ""]
    spec = json.dumps({"method": "dflash", "model": drafter_ref, "num_speculative_tokens": block - 1})
    lines = [
        f"# DFlash drafter for {target_ref}",
        "",
        f"A [DFlash](https://arxiv.org/abs/2602.06036) drafter (z-lab's `{arch}`) trained with draftline for "
        f"`{target_ref}`. It reads the target's hidden states and proposes {block - 1} tokens per step in one "
        "pass; the target verifies them in one forward pass, so decoding stays exactly the target's.",
        "",
        "| | |",
        "| --- | --- |",
        f"| target | `{target_ref}` ({info.get('architecture')}, {info.get('num_hidden_layers')} layers) |",
        f"| drafter | `{arch}`, {config.get('num_hidden_layers')} layers, hidden {config.get('hidden_size')} |",
        f"| block size | {block} (the anchor token + {block - 1} drafted) |",
        f"| target_layer_ids | {dc.get('target_layer_ids')} (0-based: the output of target layer i) |",
        f"| mask_token_id | {dc.get('mask_token_id')} |",
        "",
        "## Acceptance",
        "",
        f"Greedy decoding of {metrics.get('requests')} held-out requests ({metrics.get('max_new_tokens')} new tokens "
        f"each) on {metrics.get('device', 'the benchmark device')}; tau = tokens per target forward pass, averaged "
        "per request (z-lab's definition); speedup over the target alone in the same process. "
        f"Greedy outputs that differed from the target's: {metrics.get('mismatches')}.",
        "",
        *acceptance_table(metrics),
        "",
        *reasoning_table(metrics),
        "## Serving",
        "",
        f"draftline's config.json export is checked against the serving code of vLLM {ENGINES_CHECKED['vllm']} "
        f"and SGLang {ENGINES_CHECKED['sglang']}: on Llama, Qwen3.6 and Kimi-K2.6 layouts both read from it the "
        "rotary tables, target layers, mask token and block size the drafter trains with.",
        "",
        "vLLM (a DFlash-capable build; the drafter needs an attention backend with non-causal attention):",
        "",
        "```bash",
        f"vllm serve {target_ref} \\",
        f"  --speculative-config '{spec}' \\",
        "  --attention-backend flash_attn",
        "```",
        "",
        "SGLang (a DFlash-capable build):",
        "",
        "```bash",
        f"python -m sglang.launch_server --model-path {target_ref} \\",
        f"  --speculative-algorithm DFLASH --speculative-draft-model-path {drafter_ref} \\",
        f"  --speculative-num-draft-tokens {block}",
        "```",
        "",
        "z-lab's reference decoder (`pip install dflash`):",
        "",
        "```python",
        f"from dflash.model import {arch}, dflash_generate",
        f"drafter = {arch}.from_pretrained(\"{drafter_ref}\")",
        "out = dflash_generate(drafter, target, input_ids, max_new_tokens, stop_token_ids)",
        "```",
        "",
    ]
    if arch == "DFlash2DraftModel":
        lines += ["DFlash2 drafters need an engine build that registers `DFlash2DraftModel`; the method name stays "
                  "`dflash`.", ""]
    return "\n".join(front + lines)


def write_card(drafter: Path, info_file: Path, metrics_file: Path, out: Path, drafter_ref: str | None = None) -> None:
    text = render(read_json(drafter / "config.json"), read_json(info_file), read_json(metrics_file),
                  drafter_ref or str(drafter))
    with atomic_path(out) as tmp:
        tmp.write_text(text)


@click.command("card")
@path_option("--drafter", "drafter", "Reads: the drafter's config.json.")
@path_option("--info", "target_info", "Reads: the target's description.")
@path_option("--metrics", "benchmark_metrics", "Reads: the benchmark's metrics.")
@path_option("--out", "drafter_card", "Writes: the model card (README.md beside the weights).")
@click.option("--repo", help="The drafter's hub id, used in the serve commands.  [default: the --drafter path]")
def command(drafter, info, metrics, out, repo):
    """Write the drafter's model card (README.md beside it).

    Target, layers, block size, the tau table, vLLM and SGLang serve commands."""
    for path in (drafter / "config.json", info, metrics):
        if not path.exists():
            raise click.ClickException(f"{path}: not found (run `dvc repro benchmark` first)")
    write_card(drafter, info, metrics, out, repo)
    click.echo(f"card: {out}")
