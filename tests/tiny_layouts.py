"""Tiny random-weight targets in the layouts of the real ones, from transformers' own classes.

- `qwen36_target(folder)`: a Qwen3.6-class checkpoint (`qwen3_5`,
  `Qwen3_5ForConditionalGeneration`: a vision tower beside the text model, whose
  `text_config` nests the layer count and hidden size). Its text model repeats Qwen3.6's
  pattern of three Gated-DeltaNet linear-attention layers to one gated full-attention layer
  (q_proj twice the heads' width: query and output gate), partial rotary 0.25, Qwen3.6's real
  248,320-row vocabulary (the tokenizer holds 248,077 tokens: the rest are unnamed spare
  rows, as in the real checkpoint), and a generation_config.json with Qwen3.6's two eos ids.
- `kimi26_target(folder)`: a Kimi-K2.6-class checkpoint (`kimi_k25`,
  `Kimi_K25ForConditionalGeneration`, which AutoModelForCausalLM does not accept): a
  DeepSeek-V3 text model with MLA attention (q/kv low-rank, rope and nope parts), a dense
  first layer and then routed + shared experts, weights named as Moonshot's checkpoint
  names them (`language_model.model.layers.N...`, per-expert tensors).

Both carry real tokenizers and chat templates (chat_tokenizers.py). Each folder is built
once per test session and copied by the tests that change it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from chat_tokenizers import kimi26, qwen36, save_to

QWEN36_VOCAB = 248320  # Qwen3.6-27B's config.json: 243 rows past the tokenizer's last id
QWEN36_EOS = [248046, 248044]  # its generation_config.json: <|im_end|>, <|endoftext|>


def _pad64(n: int) -> int:
    return (n + 63) // 64 * 64


def qwen36_target(folder: Path, num_layers: int = 8) -> Path:
    from transformers.models.qwen3_5 import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    tok = qwen36()
    text = dict(vocab_size=QWEN36_VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=num_layers,
                num_attention_heads=4, num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
                linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                max_position_embeddings=4096, tie_word_embeddings=True, eos_token_id=QWEN36_EOS[0],
                layer_types=[("full_attention" if (i + 1) % 4 == 0 else "linear_attention") for i in range(num_layers)])
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64)
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen3_5ForConditionalGeneration(config).eval()
    _scale_init(model)
    model.save_pretrained(folder)
    save_to(tok, folder)
    (Path(folder) / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": None, "eos_token_id": QWEN36_EOS, "pad_token_id": 248044, "do_sample": True,
         "temperature": 1.0, "top_k": 20, "top_p": 0.95}, indent=2))
    return Path(folder)


def kimi26_target(folder: Path, num_layers: int = 4) -> Path:
    from safetensors.torch import load_file, save_file
    from transformers.models.kimi_k25 import Kimi_K25Config
    from transformers.models.kimi_k25.modeling_kimi_k25 import Kimi_K25ForConditionalGeneration

    tok = kimi26()
    text = dict(model_type="deepseek_v3", vocab_size=_pad64(len(tok)), hidden_size=64, intermediate_size=128,
                moe_intermediate_size=32, num_hidden_layers=num_layers, num_attention_heads=4,
                num_key_value_heads=4, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2,
                first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8,
                qk_nope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1, max_position_embeddings=4096,
                tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    vision = dict(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=2)
    config = Kimi_K25Config(text_config=text, vision_config=vision, projection_hidden_size=32,
                            tie_word_embeddings=False)
    torch.manual_seed(0)
    model = Kimi_K25ForConditionalGeneration(config).eval()
    _scale_init(model)
    model.save_pretrained(folder)
    # transformers writes the text layers back as `blocks` (its load-time rename of the vision
    # tower's blocks -> layers, reversed for every key); Moonshot's checkpoint names them
    # `language_model.model.layers.N`, which is what a real target folder holds.
    weights = Path(folder) / "model.safetensors"
    tensors = load_file(str(weights))
    renamed = {k.replace("language_model.model.blocks.", "language_model.model.layers."): v for k, v in tensors.items()}
    save_file(renamed, str(weights), metadata={"format": "pt"})
    save_to(tok, folder)
    (Path(folder) / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id},
        indent=2))
    return Path(folder)


@torch.no_grad()
def _scale_init(model) -> None:
    # Random weights at init scale give near-uniform next-token distributions over 248K
    # tokens: greedy picks would hinge on float noise. Sharper embeddings make the argmax
    # stable, so "equals plain greedy" compares decisions, not rounding.
    emb = model.get_input_embeddings().weight
    emb.mul_(8.0)
