"""FP8 hidden-state storage (extract.state_dtype: float8_e4m3fn): the round trip within
e4m3's error bound, the shard's self-described format, the loaders and online features
agreeing with what is stored, and a folder mixing two formats refused in one line. On a
tiny random Llama (hidden 32) built from transformers' own classes."""

from __future__ import annotations

import shutil
import threading

import pytest
import torch
from extract_helpers import extract_in_process, random_rows
from safetensors import safe_open

from draftline.hidden.plan import Record
from draftline.hidden.reader import ShardRows, load_sequences
from draftline.hidden.state_dtype import quantize, widen
from draftline.hidden.store import ShardsMissing, check_shards, read_index

LAYERS = [0, 2]
HIDDEN = 32


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight.mul_(6.0)
    return model


_rows = random_rows


def _within_e4m3(x: torch.Tensor, back: torch.Tensor, scales: torch.Tensor, hidden: int) -> None:
    """e4m3 keeps 3 mantissa bits: each value within half a unit in the last place, 2^-4 of
    itself; its subnormals (scaled magnitude below 2^-6) are spaced 2^-9 apart, so within
    2^-10 of the scale. Checked per token and state (row)."""
    v = x.float().unflatten(-1, (-1, hidden))
    err = (back.unflatten(-1, (-1, hidden)) - v).abs()
    bound = torch.maximum(v.abs() * 2.0**-4, scales.unsqueeze(-1) * 2.0**-10) * (1 + 1e-6)
    assert bool((err <= bound).all()), float((err / bound).max())
    # and the scale maps each row's largest magnitude onto e4m3's largest, 448
    amax = v.abs().amax(-1)
    assert torch.allclose(scales[amax > 0], amax[amax > 0] / 448, rtol=1e-6, atol=0)


def test_quantize_round_trips_within_e4m3s_bound_per_row():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(300, 3 * 64, generator=g)
    x[7, :64] *= 1e4  # an outlier row (a massive activation) costs precision in itself only
    x[8, 64:128] = 0  # an all-zero state stays zero
    x[9] *= 1e-20  # tiny states scale too
    x[10, 5] = 300.0  # an outlier column inside a row: the rest of it go subnormal
    x = x.to(torch.bfloat16)
    q, scales = quantize(x, 64)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape and scales.shape == (300, 3)
    back = widen(q, scales)
    _within_e4m3(x, back, scales, 64)
    assert bool((back[8, 64:128] == 0).all()) and float(scales[8, 1]) == 1.0
    # a relative error that says FP8, not something coarser: about 2.5% RMS on Gaussian rows
    rel = float((back - x.float()).norm() / x.float().norm())
    assert 0.01 < rel < 0.05, rel


def test_a_non_finite_state_stays_non_finite_for_the_state_check():
    x = torch.randn(4, 2 * 16).to(torch.bfloat16)
    x[1, 3], x[2, 20] = float("nan"), float("inf")
    back = widen(*quantize(x, 16))
    assert not back[1, :16].isfinite().all() and not back[2, 16:].isfinite().all()
    assert back[0].isfinite().all() and back[1, 16:].isfinite().all()


def test_an_fp8_shard_names_its_format_and_stores_half_the_bytes(llama, tmp_path):
    rows = _rows(8)
    extract_in_process(llama, rows, LAYERS, tmp_path / "bf16", 256, 0)
    extract_in_process(llama, rows, LAYERS, tmp_path / "fp8", 256, 0, state_dtype="float8_e4m3fn")
    tokens = sum(len(r["input_ids"]) for r in rows)
    record = Record(HIDDEN, len(LAYERS), "final", 0, "float8_e4m3fn")
    assert record.bytes_per_token == 3 * HIDDEN * 1 + 3 * 4 + 4 + 1
    index = read_index(tmp_path / "fp8")
    assert index["dtype"] == "float8_e4m3fn"
    shard = tmp_path / "fp8" / index["shards"][0]
    header_bytes = shard.stat().st_size - tokens * record.bytes_per_token
    assert 0 < header_bytes < 1024
    # A plain safetensors file, read by the safetensors library itself: the format is its header's.
    with safe_open(shard, "pt") as f:
        assert f.metadata()["state_dtype"] == "float8_e4m3fn"
        states, scales = f.get_tensor("states"), f.get_tensor("state_scales")
    assert states.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32
    assert states.shape == (tokens, 3 * HIDDEN) and scales.shape == (tokens, 3)
    # each stored row is the bf16 row quantized, within e4m3's bound of it
    bf16 = {s.id: s for s in load_sequences(tmp_path / "bf16")}
    fp8 = {s.id: s for s in ShardRows(tmp_path / "fp8")}
    for rid, a in bf16.items():
        b = fp8[rid]
        stored = torch.cat([b.context, b.final], -1)
        scale = torch.cat([b.context_scale, b.final_scale], -1)
        _within_e4m3(torch.cat([a.context, a.final], -1), widen(stored, scale), scale, HIDDEN)


def _step(llama, loss="kl"):
    from conftest import train_params

    from draftline.config.drafter import DrafterParams
    from draftline.drafter.model import build_drafter, drafter_config
    from draftline.drafter.train_step import Step

    dp = DrafterParams(num_layers=1, block_size=4)
    drafter = build_drafter(drafter_config(llama.config, dp, LAYERS, 63), 0)
    tp = train_params(loss=loss, kl_top_k=8, num_anchors=6, precision="float32")
    return Step(drafter, llama.model.embed_tokens.weight, llama.lm_head.weight, dp, tp, 63)


def _loss(step, seqs) -> float:
    with torch.no_grad():
        return float(step.loss(seqs, step.blocks(seqs, 0, torch.Generator().manual_seed(0)))[0])


def test_streamed_fp8_rows_widen_to_the_loaded_ones_and_train_as_bf16_does(llama, tmp_path):
    """train.loader: stream moves FP8 and its scales, and widens them in the step; memory
    widens them when loading: the same numbers, so the same loss bit for bit. Against the
    bf16 store the loss moves by FP8's rounding only."""
    rows = _rows(12)
    extract_in_process(llama, rows, LAYERS, tmp_path / "bf16", 256, 0)
    extract_in_process(llama, rows, LAYERS, tmp_path / "fp8", 256, 0, state_dtype="float8_e4m3fn")
    loaded = load_sequences(tmp_path / "fp8", "train")
    streamed = ShardRows(tmp_path / "fp8", "train")[:]
    assert all(s.context.dtype == torch.float8_e4m3fn and s.context_scale.shape[1] == 2 for s in streamed)
    assert all(s.context.dtype == torch.float32 and s.context_scale is None for s in loaded)
    step = _step(llama)
    fp8_stream, fp8_loaded = _loss(step, streamed), _loss(step, loaded)
    assert fp8_stream == fp8_loaded
    bf16 = _loss(step, load_sequences(tmp_path / "bf16", "train"))
    assert fp8_stream != bf16 and abs(fp8_stream - bf16) <= 0.05 * bf16, (fp8_stream, bf16)


def test_online_features_round_to_fp8_only_when_the_param_asks(llama, tmp_path):
    from draftline.drafter.online import OnlineRows
    from draftline.hidden.capture import Capture
    from draftline.hidden.token_rows import TokenRows
    from draftline.io import write_parquet

    rows = _rows(12)
    extract_in_process(llama, rows, LAYERS, tmp_path / "fp8", 256, 0, state_dtype="float8_e4m3fn")
    write_parquet(tmp_path / "tokens.parquet", rows)
    capture = Capture(llama, LAYERS, Record(HIDDEN, len(LAYERS), "final"))
    tokens = TokenRows.read(tmp_path / "tokens.parquet")
    picked = [0, 3, 5, 7]
    fp8 = OnlineRows(tokens, "train", capture, 0, threading.Lock(), "float8_e4m3fn").read(picked)
    bf16 = OnlineRows(tokens, "train", capture, 0, threading.Lock()).read(picked)
    capture.close()
    stored = {s.id: s for s in ShardRows(tmp_path / "fp8", "train")}
    for a, b, c in zip(fp8, bf16, (stored[s.id] for s in fp8)):
        assert a.context.dtype == torch.float8_e4m3fn and b.context.dtype == torch.bfloat16 and b.context_scale is None
        assert torch.allclose(widen(a.context, a.context_scale), widen(c.context, c.context_scale), rtol=0.13, atol=1e-2)
        assert torch.allclose(widen(a.final, a.final_scale), widen(c.final, c.final_scale), rtol=0.13, atol=1e-2)
    step = _step(llama)
    online, offline = _loss(step, fp8), _loss(step, [stored[s.id] for s in fp8])
    assert abs(online - offline) <= 1e-2 * offline, (online, offline)


def test_a_folder_mixing_bf16_and_fp8_shards_is_refused_in_one_line(llama, tmp_path):
    rows = _rows(20)
    extract_in_process(llama, rows, LAYERS, tmp_path / "bf16", 256, 0, shard_bytes=20_000)
    extract_in_process(llama, rows, LAYERS, tmp_path / "fp8", 256, 0, shard_bytes=10_000,
                       state_dtype="float8_e4m3fn")
    shards = read_index(tmp_path / "bf16")["shards"]
    assert len(shards) >= 2 and (tmp_path / "fp8" / shards[1]).exists()
    shutil.copy(tmp_path / "fp8" / shards[1], tmp_path / "bf16" / shards[1])  # one FP8 shard among bf16 ones
    with pytest.raises(ShardsMissing) as got:
        check_shards(tmp_path / "bf16")
    line = str(got.value)
    assert "\n" not in line and shards[1] in line and "float8_e4m3fn" in line and "bfloat16" in line, line
    with pytest.raises(ShardsMissing, match=shards[1]):
        ShardRows(tmp_path / "bf16")
    # without the manifest (an index alone), the reader's own check names it when it gets there
    (tmp_path / "bf16" / "manifest.json").unlink()
    rows_read = ShardRows(tmp_path / "bf16")
    with pytest.raises(ShardsMissing, match=f"{shards[1]}: states stored as float8_e4m3fn"):
        rows_read[:]
