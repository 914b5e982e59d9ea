"""The `drafter` section: the drafter's shape, block and mask token, and the target layers it reads."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from .base import NonNegInt, PositiveInt, Section


class DFlash2Params(Section):
    # Taps of the convolution over block slots (2: a slot and its predecessor).
    conv_kernel_size: Annotated[int, Field(ge=1, le=8)] = 2
    # Channels sharing one input-dependent tap; must divide the hidden size.
    conv_group_size: PositiveInt = 16
    # Rank of the selector's predecessor x candidate score, and candidates per slot.
    selector_rank: PositiveInt = 16
    selector_top_k: Annotated[int, Field(ge=2)] = 16


class DrafterParams(Section):
    key: ClassVar[str] = "drafter"

    # Decoder layers in the drafter; also picks the default target layers.
    num_layers: PositiveInt = 3
    # Target layers whose hidden states feed the drafter; null = z-lab's
    # build_target_layer_ids(num_target_layers, num_layers). Checked against the target.
    target_layer_ids: list[NonNegInt] | None = [1, 26]
    # Tokens per draft block (position 0 is the last accepted token).
    block_size: Annotated[int, Field(ge=2, le=64)] = 4
    # Token whose embedding marks a to-be-predicted slot: a token name, or an id (an
    # unnamed spare row past the tokenizer's last id, as Qwen3.6's 243 are). Its embedding
    # is the target's row as stored, trained or not: z-lab's, vLLM's and SGLang's decoders
    # all read the target's embedding there, so the drafter learns with the row they will
    # use (docs/real-targets.md). SmolLM2 has no
    # spare embedding row, so we reuse a special token that never occurs in chat data
    # (docs/training.md).
    mask_token: str | NonNegInt = "<empty_output>"
    # The drafter's shape; null: the target's (num_attention_heads, num_key_value_heads,
    # head_dim, intermediate_size of its dense MLP). An MLA target has no key/value heads or
    # plain head_dim to copy: null there gives 8 key/value heads and head_dim = v_head_dim,
    # as z-lab's Kimi-K2.5 drafter (docs/real-targets.md).
    num_attention_heads: PositiveInt | None = None
    num_key_value_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    intermediate_size: PositiveInt | None = None
    # Each drafter layer's attention: full_attention (the whole context) or
    # sliding_attention (the last `sliding_window` positions, causal within the block, as
    # z-lab, vLLM and SGLang run it); null: all full. z-lab's Qwen3.6-27B drafter: four
    # sliding of 2048 and one full.
    layer_types: list[Literal["full_attention", "sliding_attention"]] | None = None
    sliding_window: PositiveInt = 2048
    # dflash: z-lab's DFlashDraftModel. dflash2: DFlash2DraftModel, the same backbone plus a
    # grouped dynamic convolution around each sublayer (a slot sees the one before it) and a
    # candidate selector that walks each slot's top-k given the token picked before it.
    # z-lab's dflash_generate, vLLM (method dflash) and SGLang (DFLASH) run both.
    arch: Literal["dflash", "dflash2"] = "dflash"
    dflash2: DFlash2Params = Field(default_factory=DFlash2Params)

    @model_validator(mode="after")
    def _layer_types_match(self) -> "DrafterParams":
        if self.layer_types is not None and len(self.layer_types) != self.num_layers:
            raise ValueError(f"drafter.layer_types has {len(self.layer_types)} entries for "
                             f"drafter.num_layers: {self.num_layers}")
        return self
