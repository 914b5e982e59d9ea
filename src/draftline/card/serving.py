"""The card's serve commands: vLLM, SGLang and z-lab's reference decoder, for `card.repo`."""

from __future__ import annotations

import json

# The engine releases whose own code reads the export in tests/engines (rotary tables, layer
# ids, mask id, block size); that test fails when the installed versions differ from these.
ENGINES_CHECKED = {"vllm": "0.33.0", "sglang": "0.5.23"}


def serving_section(arch: str, block: int, target_ref: str, drafter_ref: str, repo_given: bool) -> list[str]:
    """vLLM drafts block - 1 tokens after the anchor (num_speculative_tokens, z-lab's
    convention); SGLang counts the whole block (num draft tokens)."""
    spec = json.dumps({"method": "dflash", "model": drafter_ref, "num_speculative_tokens": block - 1})
    where = (f"The commands load the drafter from the hub as `{drafter_ref}` (`card.repo`)." if repo_given else
             f"The commands load the drafter from the local folder `{drafter_ref}`: set `card.repo` in params.yaml "
             "to its hub id (owner/name) and run `dvc repro card` before publishing, so they name the hub copy.")
    lines = [
        "## Serving", "",
        f"draftline's config.json export is checked against the serving code of vLLM {ENGINES_CHECKED['vllm']} "
        f"and SGLang {ENGINES_CHECKED['sglang']}: on Llama, Qwen3.6 and Kimi-K2.6 layouts both read from it the "
        f"rotary tables, target layers, mask token and block size the drafter trains with. {where}", "",
        "vLLM (a DFlash-capable build; the drafter needs an attention backend with non-causal attention):", "",
        "```bash", f"vllm serve {target_ref} \\", f"  --speculative-config '{spec}' \\",
        "  --attention-backend flash_attn", "```", "",
        "SGLang (a DFlash-capable build):", "",
        "```bash", f"python -m sglang.launch_server --model-path {target_ref} \\",
        f"  --speculative-algorithm DFLASH --speculative-draft-model-path {drafter_ref} \\",
        f"  --speculative-num-draft-tokens {block}", "```", "",
        "z-lab's reference decoder (`pip install dflash`):", "",
        "```python", f"from dflash.model import {arch}, dflash_generate",
        f"drafter = {arch}.from_pretrained(\"{drafter_ref}\")",
        "out = dflash_generate(drafter, target, input_ids, max_new_tokens, stop_token_ids)", "```", ""]
    if arch == "DFlash2DraftModel":
        lines += ["DFlash2 drafters need an engine build that registers `DFlash2DraftModel`; the method name stays "
                  "`dflash`.", ""]
    return lines
