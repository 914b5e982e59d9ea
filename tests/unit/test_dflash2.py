"""DFlash2 drafters: trained as z-lab's DFlash2DraftModel, decoded losslessly, loaded unchanged."""

import json
import time

import dflash.model as zlab
import pytest
import torch
from conftest import TINY_MASK, train_params
from safetensors import safe_open
from sampling_helpers import chi2_pvalue, exact_distribution, sample_speculative

from draftline.config.drafter import DFlash2Params, DrafterParams
from draftline.decode import chain as S
from draftline.drafter.dflash2 import block_local_convs, selector_loss, walk
from draftline.drafter.loop import train
from draftline.drafter.model import build_drafter, drafter_config, load_drafter, save_drafter
from draftline.drafter.train_step import Step
from draftline.hidden.store import Sequence

D2 = DFlash2Params(conv_kernel_size=2, conv_group_size=16, selector_rank=8, selector_top_k=4)


def _dflash2(target_cfg, seed=1, layer_ids=(0,), num_layers=1, mask=TINY_MASK):
    dp = DrafterParams(num_layers=num_layers, block_size=4, arch="dflash2", dflash2=D2)
    return build_drafter(drafter_config(target_cfg, dp, list(layer_ids), mask), seed)


@torch.no_grad()
def _stir(drafter, seed=0):
    """Random convolutions and selector, so that both change what the drafter proposes."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in drafter.named_parameters():
        if "conv" in name or "candidate_selector" in name:
            p.copy_(torch.randn(p.shape, generator=gen) * (0.3 if "conv" in name else 1.0))
    return drafter


@pytest.fixture(scope="module")
def tiny2(tiny):
    target, _ = tiny
    return target, _stir(_dflash2(target.config)).eval()


def test_block_local_convolution_is_one_block_at_a_time():
    conv = zlab.GroupedDynamicCausalConv(32, 2, 16)
    with torch.no_grad():
        conv.base_kernel.normal_()
        conv.kernel_projection.weight.normal_()
    x = torch.randn(2, 3 * 4, 32)
    one_by_one = [conv.finish(*conv.prepare(x[:, a * 4:(a + 1) * 4])) for a in range(3)]
    expected = torch.cat(one_by_one, dim=1)
    with block_local_convs(4):
        packed = conv.finish(*conv.prepare(x))
    assert torch.allclose(packed, expected, atol=1e-6)
    # Without it, slot 0 of a block sees the block before: the test has something to catch.
    leaky = conv.finish(*conv.prepare(x))
    assert not torch.allclose(leaky[:, 4], expected[:, 4], atol=1e-3)
    assert zlab._grouped_dynamic_convolve.__name__ == "_grouped_dynamic_convolve"  # restored


def test_fresh_dflash2_computes_what_the_dflash_backbone_does(tiny):
    target, _ = tiny
    cfg = target.config
    d1 = build_drafter(drafter_config(cfg, DrafterParams(num_layers=2, block_size=4), [0, 1], TINY_MASK), 0)
    d2 = _dflash2(cfg, seed=5, layer_ids=(0, 1), num_layers=2)
    missing, unexpected = d2.load_state_dict(d1.state_dict(), strict=False)
    assert not unexpected and all("conv" in k or "candidate_selector" in k for k in missing)
    inputs = dict(position_ids=torch.arange(9)[None], noise_embedding=torch.randn(1, 4, 32),
                  target_hidden=torch.randn(1, 5, 64))
    assert torch.allclose(d1(**inputs), d2(**inputs), atol=1e-6)


def test_config_errors_name_the_key(tiny):
    target, _ = tiny
    bad = DrafterParams(block_size=4, arch="dflash2", dflash2=DFlash2Params(conv_group_size=5))
    with pytest.raises(ValueError, match="drafter.dflash2.conv_group_size"):
        drafter_config(target.config, bad, [0], TINY_MASK)
    bad = DrafterParams(block_size=4, arch="dflash2", dflash2=DFlash2Params(selector_top_k=64))
    with pytest.raises(ValueError, match="drafter.dflash2.selector_top_k"):
        drafter_config(target.config, bad, [0], TINY_MASK)


def test_checkpoint_loads_unchanged_in_zlab_dflash2(tiny2, tmp_path):
    _, drafter = tiny2
    save_drafter(drafter, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["DFlash2DraftModel"]
    assert cfg["dflash_config"] == {"block_size": 4, "mask_token_id": TINY_MASK, "target_layer_ids": [0],
                                    "conv_kernel_size": 2, "conv_group_size": 16, "selector_rank": 8,
                                    "selector_top_k": 4, "num_target_layers": 2, "use_swa": False,
                                    "swa_window_size": None, "causal": False}
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    # z-lab's checkpoints (and the vLLM and SGLang loaders) name the codebooks bare.
    assert {"candidate_selector.predecessor_codebook", "candidate_selector.successor_codebook",
            "candidate_selector.hidden_projection.weight"} <= keys
    ref = zlab.DFlash2DraftModel.from_pretrained(str(tmp_path))
    ours = load_drafter(tmp_path)
    assert type(ours) is zlab.DFlash2DraftModel
    want = drafter.state_dict()
    for model in (ref, ours):
        got = model.state_dict()
        assert got.keys() == want.keys()
        for k in want:
            assert torch.equal(got[k], want[k]), k


def test_greedy_equals_plain_greedy_and_zlab_dflash_generate(tiny2, monkeypatch):
    target, drafter = tiny2
    monkeypatch.setattr(zlab, "_cuda_time", time.perf_counter)
    picked_off_argmax = 0
    for prompt in ([1, 2, 3], [4, 0, 1, 1, 2], [2, 2, 0]):
        ids = torch.tensor([prompt])
        plain = S.plain(target, ids, 14, [])
        spec = S.speculative(drafter, target, ids, 14, [])
        ref = zlab.dflash_generate(drafter, target, ids, 14, [], return_stats=True)
        assert spec.tokens == plain.tokens
        assert ref.output_ids[0, ids.shape[1]:].tolist() == plain.tokens
        assert spec.acceptance_lengths == ref.acceptance_lengths
    # The selector does change the proposals here (else the comparison above proves little).
    for seed in range(8):
        torch.manual_seed(seed)
        h = torch.randn(3, 32)
        logits = target.lm_head(h)
        tokens, _ = walk(drafter.candidate_selector, h, logits, 1, 0.0, None)
        picked_off_argmax += tokens != logits.argmax(-1).tolist()
    assert picked_off_argmax > 0


def test_sampled_matches_target_distribution(tiny2):
    target, drafter = tiny2
    torch.set_num_threads(1)
    prompt, n, runs = [1, 2, 3], 3, 2500
    counts, acc_rate = sample_speculative(target, drafter, prompt, n, runs)
    assert 0.1 < acc_rate < 1.0
    assert chi2_pvalue(counts, exact_distribution(target, prompt, n), runs) > 0.001


def test_selector_loss_puts_in_a_missing_target_and_trains():
    sel = zlab.CandidateSelector(type("C", (), {"vocab_size": 10, "hidden_size": 6,
                                                "dflash_config": {"selector_rank": 3, "selector_top_k": 3}})())
    head = torch.eye(10, 6) * 4
    rows = torch.randn(5, 6)
    targets = torch.tensor([0, 1, 2, 9, 9])  # 9: no head row points at it, never in a top-3
    preds = torch.tensor([3, 3, 4, 4, 5])
    w = torch.ones(5)
    loss0 = selector_loss(sel, rows, preds, targets, head, None, None, w, w.sum(), 3)
    assert torch.isfinite(loss0)
    opt = torch.optim.Adam(sel.parameters(), lr=0.05)
    for _ in range(60):
        opt.zero_grad()
        loss = selector_loss(sel, rows, preds, targets, head, None, None, w, w.sum(), 3)
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * loss0.item()
    # A training head vocabulary without the target drops that row (no logit to score).
    ids = torch.arange(9)
    index = torch.cat([ids, torch.tensor([-1])])
    part = selector_loss(sel, rows, preds, targets, head[:9], ids, index, w, w.sum(), 3)
    full = selector_loss(sel, rows[:3], preds[:3], targets[:3], head[:9], ids, index, w[:3], w.sum(), 3)
    assert torch.allclose(part, full)


def _synthetic(n_seqs, gen, feat=64, vocab=40):
    seqs = []
    for i in range(n_seqs):
        n = 30
        ids = torch.randint(0, vocab - 2, (n,), generator=gen)
        mask = (torch.arange(n) >= 8).float()
        seqs.append(Sequence(f"s{i}", "train", torch.randn(n, feat, generator=gen),
                             torch.randn(n, 32, generator=gen), ids, mask))
    return seqs


def test_training_steps_train_the_selector_and_convolutions():
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    dp = DrafterParams(num_layers=2, block_size=4, arch="dflash2", dflash2=D2)
    drafter = build_drafter(drafter_config(cfg, dp, [0, 2], 39), 0)
    before = {k: v.clone() for k, v in drafter.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    seqs = _synthetic(6, gen)
    embed, head = torch.randn(40, 32, generator=gen), torch.randn(40, 32, generator=gen)
    tp = train_params(num_anchors=8, prompt_anchors=2, batch_size=2, epochs=3, lr=3e-3, loss="kl",
                     kl_top_k=8, head_vocab=30, eval_every=1000)
    step = Step(drafter, embed, head, dp, tp, 39)
    batch = step.blocks(seqs[:2], 0, training=True)
    with torch.no_grad():
        with_sel, _ = step.loss(seqs[:2], batch, training_head=True)
        without, _ = Step(drafter, embed, head, dp, tp.model_copy(update={"selector_weight": 0.0}), 39).loss(
            seqs[:2], batch, training_head=True)
    assert with_sel > without  # the selector's loss is part of a training step's
    train(drafter, embed, head, seqs, [], dp, tp, 39)
    after = drafter.state_dict()
    for part in ("candidate_selector.predecessor_codebook", "candidate_selector.hidden_projection",
                 "layers.0.attention_conv.kernel_projection", "layers.1.mlp_conv.base_kernel"):
        changed = [k for k in after if k.startswith(part) and not torch.equal(after[k], before[k])]
        assert changed, part
