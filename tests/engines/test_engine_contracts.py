"""The drafter's config.json, read by the serving engines' own code (the releases named in
card/serving.py `ENGINES_CHECKED`), gives what the drafter trains with, for the three target
layouts (the embedded Llama, Qwen3.6-class, Kimi-K2.6-class with its yarn rotary): the
cos/sin tables and yarn's multiplier, the softmax scale, the target layers captured, the
mask token and the block size.

    pip install --no-deps -r requirements-engines.txt      # `make test` installs them
    python -m pytest tests/engines -q
    DRAFTLINE_PLANT=mscale_all_dim python -m pytest tests/engines -q -k kimi   # must fail

"Ours" is the trained side: z-lab's DFlashDraftModel built by `build_drafter` from
`drafter_config` (its transformers rotary). The engines' side reads only the exported
folder, through transformers' AutoConfig as both engines load a draft's config.

Imported from the engines: SGLang's and vLLM's `get_rope`, vLLM's
`GPUModelRunner._get_eagle3_aux_layers_from_config`, `get_eagle3_aux_layers_from_config`
(model runner v2) and `LLMBaseProposer._init_parallel_drafting_params`. SGLang's
speculative/dflash_utils.py and utils/hf_transformers/common.py cannot be imported on CPU
(their module imports reach sglang.srt.configs -> multimodal -> torchvision, whose CUDA
build does not load against CPU torch): `engine_functions` runs the named functions from
the installed files' own source instead. What lives inside GPU-only model classes (the
capture loops, the softmax scale) is reproduced below, each with its file.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

vllm = pytest.importorskip("vllm")
sglang = pytest.importorskip("sglang")

from draftline.config.drafter import DrafterParams  # noqa: E402
from draftline.card.render import architecture, block_size  # noqa: E402
from draftline.card.serving import ENGINES_CHECKED, serving_section  # noqa: E402
from draftline.drafter.model import build_drafter, drafter_config, save_drafter  # noqa: E402
from draftline.hidden.capture import LayerOutputs  # noqa: E402

SGLANG_DIR = Path(sglang.__file__).parent
VLLM_DIR = Path(vllm.__file__).parent
# Positions the tables are compared at: the start, a block, around yarn's original context
# (4096) and far into the scaled one.
POSITIONS = [0, 1, 7, 100, 4095, 4096, 4097, 30000, 131071]
ATOL = 1e-4  # float32 tables computed two ways; a planted mscale fault is off by 0.4
PLANT = os.environ.get("DRAFTLINE_PLANT")  # a rope_parameters key to drop from the export


def engine_functions(path: Path, names: tuple[str, ...], header: str) -> dict:
    """The top-level functions, classes and constants `names` of an installed engine file,
    executed from its own source (compiled under its path, so tracebacks point there), for a
    module whose imports cannot load on CPU; `header`: the imports those names use."""
    tree = ast.parse(path.read_text())
    picked = [node for node in tree.body
              if getattr(node, "name", None) in names
              or isinstance(node, ast.Assign) and any(getattr(t, "id", None) in names for t in node.targets)]
    found = {getattr(n, "name", None) or n.targets[0].id for n in picked}
    assert found == set(names), f"{path}: not found {sorted(set(names) - found)}"
    ns: dict = {"logger": logging.getLogger(path.stem)}
    exec(compile(header, str(path), "exec"), ns)
    exec(compile(ast.Module(body=picked, type_ignores=[]), str(path), "exec"), ns)
    return ns


# SGLang 0.5.23 speculative/dflash_utils.py: the draft-config parser its DFlash worker and
# target-capture setup (model_runner_components/spec_aux_hidden_state.py) call.
SGL_DFLASH = engine_functions(
    SGLANG_DIR / "srt/speculative/dflash_utils.py",
    ("DEFAULT_DFLASH_MASK_TOKEN", "build_target_layer_ids", "_cfg_get", "_get_text_config", "_get_dflash_config",
     "_parse_optional_int", "DFlashDraftConfig", "parse_dflash_draft_config"),
    "from dataclasses import dataclass\nfrom numbers import Integral\nfrom typing import Any, List, Optional\n")
# SGLang 0.5.23 utils/hf_transformers/common.py: (rope_theta, rope_scaling) as models/dflash.py reads them.
SGL_ROPE_CONFIG = engine_functions(SGLANG_DIR / "srt/utils/hf_transformers/common.py", ("get_rope_config",), "")


def softmax_scale(path: Path, cls: str, head_dim: int) -> float:
    """The `self.scaling = ...` expression of `cls.__init__` in an engine file, evaluated
    with `head_dim` (the attention classes need a GPU-initialised parallel state to build)."""
    tree = ast.parse(path.read_text())
    init = next(f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == cls
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    expr = next(n.value for n in ast.walk(init) if isinstance(n, ast.Assign)
                and ast.unparse(n.targets[0]) == "self.scaling")
    return eval(ast.unparse(expr).replace("self.", ""), {"head_dim": head_dim})


# --- the three target layouts ---------------------------------------------------------

def _qwen36():
    """Qwen3.6-27B's rotary: theta 1e7 over a quarter of each head, 3-D M-RoPE sections."""
    from transformers.models.qwen3_5 import Qwen3_5Config

    rope = {"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10], "mrope_interleaved": True}
    text = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=8, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=2,
                linear_key_head_dim=8, linear_value_head_dim=8, max_position_embeddings=262144,
                layer_types=[("full_attention" if (i + 1) % 4 == 0 else "linear_attention") for i in range(8)],
                rope_parameters=rope)
    return Qwen3_5Config(text_config=text, vision_config=dict(depth=1, hidden_size=16, intermediate_size=32,
                                                              num_heads=2, out_hidden_size=32))


def _kimi26():
    """Kimi-K2.6's text config: DeepSeek-V3 MLA with its yarn rotary exactly (factor 64 over
    4096 positions, mscale = mscale_all_dim = 1)."""
    from transformers.models.kimi_k25 import Kimi_K25Config

    rope = {"rope_type": "yarn", "rope_theta": 50000.0, "factor": 64.0, "original_max_position_embeddings": 4096,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    text = dict(model_type="deepseek_v3", vocab_size=64, hidden_size=32, intermediate_size=96,
                moe_intermediate_size=16, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=4,
                n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                q_lora_rank=16, kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=16, n_group=1,
                topk_group=1, max_position_embeddings=262144, rope_parameters=rope)
    return Kimi_K25Config(text_config=text, vision_config=dict(num_hidden_layers=1, hidden_size=16,
                                                               intermediate_size=32, num_attention_heads=2))


# layout -> (drafter params beyond the defaults, target layer ids, mask id)
LAYOUTS = {
    "llama": (dict(num_layers=2, block_size=16), [1, 26], 16),
    "qwen3.6": (dict(num_layers=2, block_size=8, layer_types=["sliding_attention", "full_attention"],
                     sliding_window=16, num_attention_heads=4, num_key_value_heads=2, head_dim=8), [1, 5], 63),
    "kimi": (dict(num_layers=2, block_size=16), [1, 3], 63),
}


@pytest.fixture(scope="module")
def targets(target_dir):
    from transformers import AutoConfig

    return {"llama": AutoConfig.from_pretrained(target_dir), "qwen3.6": _qwen36(), "kimi": _kimi26()}


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def export(request, targets, tmp_path_factory):
    """(layout, our drafter as trained, the engines' view: the exported folder's config)."""
    from transformers import AutoConfig

    layout = request.param
    shape, layer_ids, mask_id = LAYOUTS[layout]
    dp = DrafterParams(target_layer_ids=layer_ids, mask_token=mask_id, **shape)
    ours = build_drafter(drafter_config(targets[layout], dp, layer_ids, mask_id), 0).eval()
    folder = tmp_path_factory.mktemp(layout.replace(".", "_"))
    save_drafter(ours, folder)
    if PLANT:
        plant(folder, PLANT)
    return layout, ours, AutoConfig.from_pretrained(folder)


def plant(folder: Path, key: str) -> None:
    """Drop `key` from the exported rope_parameters: the fault these tests must catch."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg["rope_parameters"].pop(key, None)
    path.write_text(json.dumps(cfg, indent=2))


# --- the rotary tables ------------------------------------------------------------------

def sglang_rope(cfg):
    """SGLang 0.5.23 models/dflash.py DFlashAttention: get_rope with these arguments."""
    from sglang.srt.layers.rotary_embedding import get_rope

    head_dim = int(getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads))
    rope_theta, rope_scaling = SGL_ROPE_CONFIG["get_rope_config"](cfg)
    assert rope_scaling is None or "rope_dim" not in rope_scaling  # dflash.py's other branch
    return get_rope(head_dim, rotary_dim=head_dim, max_position=int(getattr(cfg, "max_position_embeddings", 32768)),
                    base=rope_theta, rope_scaling=rope_scaling,
                    is_neox_style=bool(getattr(cfg, "rope_is_neox_style", getattr(cfg, "is_neox_style", True))),
                    partial_rotary_factor=float(getattr(cfg, "partial_rotary_factor", 1.0)))


def vllm_rope(cfg):
    """vLLM 0.33.0 model_executor/models/qwen3_dflash.py DFlashQwen3DecoderLayer ->
    DFlashQwen3Attention: set_default_rope_theta, then get_rope with these arguments."""
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.rotary_embedding import get_rope
    from vllm.transformers_utils.config import set_default_rope_theta

    set_default_rope_theta(cfg, default_theta=1000000)
    # get_rope builds a CustomOp, which reads the current config; "cpu": no platform to detect
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        return get_rope(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
                        max_position=cfg.max_position_embeddings, is_neox_style=getattr(cfg, "is_neox_style", True),
                        rope_parameters=cfg.rope_parameters)


def rope_mismatches(ours, rope, engine: str) -> list[str]:
    """How an engine's rotary (its cos|sin cache, neox style) differs from our drafter's
    transformers rotary at POSITIONS; the softmax scale is checked apart (both engines bake
    yarn's multiplier into the table, as transformers' attention_scaling does)."""
    head_dim = ours.config.head_dim
    positions = [p for p in POSITIONS if p < ours.config.max_position_embeddings]
    pos = torch.tensor([positions])
    cos, sin = ours.rotary_emb(torch.zeros(1, dtype=torch.float32), pos)  # [1, P, head_dim], halves repeat
    out = []
    if rope.rotary_dim != head_dim or not rope.is_neox_style:
        return [f"{engine}: rotates {rope.rotary_dim} of {head_dim} dims, neox={rope.is_neox_style}; "
                f"ours: all {head_dim}, neox (rotate_half)"]
    mult, mine = float(getattr(rope, "mscale", 1.0)), ours.rotary_emb.attention_scaling
    if abs(mult - mine) > 1e-6:
        out.append(f"{engine}: cos/sin multiplier (yarn mscale) {mult:.6f}, ours {mine:.6f}")
    half = head_dim // 2
    table = rope.cos_sin_cache[pos[0]].float()
    for name, mine, theirs in (("cos", cos[0, :, :half], table[:, :half]), ("sin", sin[0, :, :half], table[:, half:])):
        err = (mine - theirs).abs()
        if err.max() > ATOL:
            p = int(err.amax(dim=1).argmax())
            out.append(f"{engine}: {name} at position {positions[p]} differs by {err[p].max():.4g} "
                       f"(engine {theirs[p, :4].tolist()}, ours {mine[p, :4].tolist()})")
    return out


def test_installed_engines_are_the_ones_the_card_names():
    assert {name: importlib.metadata.version(name) for name in ENGINES_CHECKED} == ENGINES_CHECKED


def test_both_engines_build_our_rotary_tables(export):
    layout, ours, cfg = export
    problems = rope_mismatches(ours, sglang_rope(cfg), "sglang") + rope_mismatches(ours, vllm_rope(cfg), "vllm")
    assert problems == [], f"{layout}:\n" + "\n".join(problems)


def test_both_engines_scale_attention_as_we_do(export):
    """Softmax scale head_dim ** -0.5 on both sides; yarn's multiplier is in the tables."""
    _, ours, cfg = export
    head_dim = cfg.head_dim
    assert ours.layers[0].self_attn.scaling == head_dim ** -0.5
    assert softmax_scale(SGLANG_DIR / "srt/models/dflash.py", "DFlashAttention", head_dim) == head_dim ** -0.5
    assert softmax_scale(VLLM_DIR / "model_executor/models/qwen3_dflash.py", "DFlashQwen3Attention",
                         head_dim) == head_dim ** -0.5


def test_a_dropped_mscale_all_dim_is_caught(targets, tmp_path):
    """The planted fault: Kimi's yarn exported without mscale_all_dim makes both engines
    multiply cos/sin by 0.1 ln(64) + 1 = 1.416 where the drafter trained with 1.0."""
    from transformers import AutoConfig

    shape, layer_ids, mask_id = LAYOUTS["kimi"]
    dp = DrafterParams(target_layer_ids=layer_ids, mask_token=mask_id, **shape)
    ours = build_drafter(drafter_config(targets["kimi"], dp, layer_ids, mask_id), 0).eval()
    save_drafter(ours, tmp_path)
    plant(tmp_path, "mscale_all_dim")
    cfg = AutoConfig.from_pretrained(tmp_path)
    for engine, rope in (("sglang", sglang_rope(cfg)), ("vllm", vllm_rope(cfg))):
        problems = rope_mismatches(ours, rope, engine)
        assert any("multiplier" in p for p in problems) and any(" cos at " in p for p in problems), problems


# --- target layers, mask token, block size -----------------------------------------------

def vllm_capture_ids(cfg) -> dict[str, tuple[int, ...]]:
    """The aux layer ids each vLLM model runner reads from the draft's config."""
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import get_eagle3_aux_layers_from_config
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    spec = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=cfg))
    return {"v1": GPUModelRunner._get_eagle3_aux_layers_from_config(SimpleNamespace(speculative_config=spec)),
            "v2": get_eagle3_aux_layers_from_config(spec)}


def vllm_captured(hidden_states, ids: tuple[int, ...]) -> torch.Tensor:
    """vLLM 0.33.0 model_executor/models/llama.py, qwen3_next.py (Qwen3.5/3.6) and
    deepseek_v2.py (Kimi): aux id L is the residual stream entering layer L (0: the
    embeddings), i.e. transformers' hidden_states[L], appended in layer order."""
    assert max(ids) < len(hidden_states) - 1  # the last entry is after the final norm, vLLM's is not
    return torch.cat([hidden_states[L] for L in sorted(set(ids))], dim=-1)


def sglang_captured(hidden_states, cfg, num_target_layers: int) -> torch.Tensor:
    """SGLang 0.5.23: spec_aux_hidden_state.py resolves the ids with the draft config's
    parser, then models/{llama,qwen3,deepseek_v2,qwen3_5_text}.py set_dflash_layers_to_capture
    adds 1 and the model captures the state entering that layer, in layer order;
    qwen3_5_text.py also wants them increasing and below the last layer."""
    parsed = SGL_DFLASH["parse_dflash_draft_config"](draft_hf_config=cfg)
    ids = parsed.resolve_target_layer_ids(target_num_layers=num_target_layers,
                                          draft_num_layers=parsed.require_num_layers())
    assert sorted(set(ids)) == ids and ids[-1] < num_target_layers - 1, ids
    return torch.cat([hidden_states[k + 1] for k in ids], dim=-1)


def _target_model(layout, targets, target_model):
    from transformers import AutoModelForCausalLM

    if layout == "llama":
        return target_model
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(targets[layout].get_text_config(decoder=True)).eval()


def test_both_engines_capture_the_layers_we_trained_on(export, targets, target_model):
    layout, ours, cfg = export
    ids = LAYOUTS[layout][1]
    vllm_ids = vllm_capture_ids(cfg)
    # Written top-level in vLLM's convention; what vLLM 0.33 derives when the key is absent.
    absent = SimpleNamespace(**{k: v for k, v in vars(cfg).items() if k != "eagle_aux_hidden_state_layer_ids"})
    assert vllm_ids["v1"] == vllm_ids["v2"] == vllm_capture_ids(absent)["v1"] == tuple(i + 1 for i in ids)
    model = _target_model(layout, targets, target_model)
    x = torch.randint(0, 64, (1, 9))
    with torch.no_grad(), LayerOutputs(model, ours.target_layer_ids) as hooks:
        out = model(x, output_hidden_states=True)
        trained = hooks.features()  # what extraction stores and the drafter reads
    n = len(out.hidden_states) - 1
    torch.testing.assert_close(vllm_captured(out.hidden_states, vllm_ids["v1"]), trained, rtol=0, atol=0)
    torch.testing.assert_close(sglang_captured(out.hidden_states, cfg, n), trained, rtol=0, atol=0)


def test_both_engines_use_our_mask_token_and_block(export):
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    layout, ours, cfg = export
    # pass_hidden_states_to_model only sizes a buffer for EAGLE-style drafts
    proposer = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=cfg), pass_hidden_states_to_model=False)
    SpecDecodeBaseProposer._init_parallel_drafting_params(proposer)
    parsed = SGL_DFLASH["parse_dflash_draft_config"](draft_hf_config=cfg)
    assert proposer.parallel_drafting_token_id == parsed.mask_token_id == ours.mask_token_id == LAYOUTS[layout][2]
    # SGLang 0.5.23 dflash_worker_v2.py: the block is --speculative-num-draft-tokens, else the
    # config's (default 16). vLLM 0.33.0 v1/spec_decode/dflash.py: 1 + num_speculative_tokens
    # query slots a request, the anchor then the masks. The card's serve commands say so.
    assert parsed.resolve_block_size(default=16) == ours.block_size
    exported = json.loads(json.dumps(cfg.to_dict()))
    card = "\n".join(serving_section(architecture(exported), block_size(exported), "t", "d", True))
    spec = json.loads(card.split("--speculative-config '")[1].split("'")[0])
    assert 1 + spec["num_speculative_tokens"] == ours.block_size
    assert f"--speculative-num-draft-tokens {ours.block_size}" in card
