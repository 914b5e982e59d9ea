"""The card as text: front matter as the hub reads it, then what the drafter is for, how
well it drafts, what it was trained on and how, and how to serve it."""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_path
from .data import data_section
from .inputs import CardInputs
from .provenance import license_of, target_ref, target_section
from .recipe import training_section
from .serving import serving_section
from .tables import acceptance_table, reasoning_table

TAGS = ["dflash", "speculative-decoding", "draft-model", "block-diffusion", "draftline"]


def front_matter(info: dict, license_override: str | None) -> list[str]:
    """As z-lab publishes its drafters (library_name transformers, dflash tags), plus the
    target's license and `base_model` (the target, when it has a hub id)."""
    lic, _ = license_of(info, license_override)
    base = info.get("provenance", {}).get("base_model")
    return ["---", *[f"{k}: {v}" for k, v in (lic or {}).items()], *([f"base_model: {base}"] if base else []),
            "library_name: transformers", "pipeline_tag: text-generation", "tags:", *[f"- {t}" for t in TAGS],
            "---", ""]


def _summary(config: dict, info: dict, block: int, arch: str, target: str) -> list[str]:
    dc = config.get("dflash_config", {})
    return [
        f"# DFlash drafter for {target}", "",
        f"A [DFlash](https://arxiv.org/abs/2602.06036) drafter (z-lab's `{arch}`) trained with draftline for "
        f"`{target}`. It reads the target's hidden states and proposes {block - 1} tokens per step in one "
        "pass; the target verifies them in one forward pass, so decoding stays exactly the target's.", "",
        "| | |", "| --- | --- |",
        f"| target | `{target}` ({info.get('architecture')}, {info.get('num_hidden_layers')} layers) |",
        f"| drafter | `{arch}`, {config.get('num_hidden_layers')} layers, hidden {config.get('hidden_size')} |",
        f"| block size | {block} (the anchor token + {block - 1} drafted) |",
        f"| target_layer_ids | {dc.get('target_layer_ids')} (0-based: the output of target layer i) |",
        f"| mask_token_id | {dc.get('mask_token_id')} |", ""]


def _acceptance(metrics: dict) -> list[str]:
    return [
        "## Acceptance", "",
        f"Greedy decoding of {metrics.get('requests')} held-out requests ({metrics.get('max_new_tokens')} new tokens "
        f"each) on {metrics.get('device', 'the benchmark device')}; tau = tokens per target forward pass, averaged "
        "per request (z-lab's definition); speedup over the target alone in the same process. "
        f"Greedy outputs that differed from the target's: {metrics.get('mismatches')}.", "",
        *acceptance_table(metrics), "", *reasoning_table(metrics)]


def block_size(config: dict) -> int:
    """The block the export declares: what the serve commands must set."""
    return int(config.get("dflash_config", {}).get("block_size", config.get("block_size", 0)))


def architecture(config: dict) -> str:
    return (config.get("architectures") or ["DFlashDraftModel"])[0]


def render(inputs: CardInputs, drafter_dir: str) -> str:
    config, info = inputs.config, inputs.info
    block, arch = block_size(config), architecture(config)
    target = target_ref(info)
    body = [*_summary(config, info, block, arch, target), *_acceptance(inputs.benchmark),
            *target_section(info, inputs.license),
            *data_section(inputs.sources, inputs.download, inputs.mix, inputs.regenerate),
            *training_section(inputs.recipe, inputs.train),
            *serving_section(arch, block, target, inputs.repo or drafter_dir, inputs.repo is not None)]
    return "\n".join(front_matter(info, inputs.license) + body)


def write_card(inputs: CardInputs, out: Path) -> None:
    text = render(inputs, str(out.parent))
    with atomic_path(out) as tmp:
        tmp.write_text(text)
