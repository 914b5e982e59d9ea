"""The CUDA paths: extraction, bf16 training and speculative decoding on a GPU.

Marked `gpu`: skipped without CUDA (conftest.py). On a GPU machine they run with the rest
of the suite, or alone with `pytest -m gpu tests/test_gpu.py`.
"""

import copy

import pytest
import torch
from conftest import TINY_MASK, TINY_VOCAB, train_params
from extract_helpers import extract_in_process

from draftline import distributed as dist
from draftline.config.drafter import DrafterParams
from draftline.decode.chain import plain, speculative
from draftline.drafter.loop import train
from draftline.drafter.train_step import Step
from draftline.hidden.reader import load_sequences

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
LAYERS = [0]


def _rows(n: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        length = int(torch.randint(12, 40, (1,), generator=g))
        ids = torch.randint(0, TINY_MASK, (length,), generator=g).tolist()
        mask = [0] * (length // 3) + [1] * (length - length // 3)
        rows.append({"id": f"r{i}", "split": "val" if i % 8 == 7 else "train", "input_ids": ids, "loss_mask": mask})
    return rows


def _extract(target, rows, folder, device):
    model = copy.deepcopy(target).to(device)
    extract_in_process(model, rows, LAYERS, folder, 256, 0, shard_bytes=4096 * 5000)
    return load_sequences(folder)


def test_extraction_on_gpu_matches_cpu(tiny, tmp_path):
    rows = _rows(12, 0)
    cpu = _extract(tiny[0], rows, tmp_path / "cpu", torch.device("cpu"))
    gpu = _extract(tiny[0], rows, tmp_path / "gpu", CUDA)
    assert [s.id for s in gpu] == [s.id for s in cpu]
    for a, b in zip(cpu, gpu):
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)
        # Both stored in bf16: equal up to a rounding step of the larger values.
        torch.testing.assert_close(b.context, a.context, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(b.final, a.final, atol=2e-2, rtol=2e-2)


def test_greedy_speculative_on_gpu_equals_plain_greedy(tiny):
    target, drafter = (copy.deepcopy(m).to(CUDA) for m in tiny)
    g = torch.Generator().manual_seed(1)
    for _ in range(6):
        prompt = torch.randint(0, TINY_MASK, (1, 5), generator=g).to(CUDA)
        ref = plain(target, prompt, 24, [])
        out = speculative(drafter, target, prompt, 24, [], 4)
        assert out.tokens == ref.tokens
        assert sum(out.acceptance_lengths) == len(out.tokens) - 1


def test_sampled_speculative_on_gpu_emits_target_tokens(tiny):
    target, drafter = (copy.deepcopy(m).to(CUDA) for m in tiny)
    prompt = torch.tensor([[1, 2, 3]], device=CUDA)
    out = speculative(drafter, target, prompt, 20, [], 4, temperature=1.0, gen=torch.Generator().manual_seed(0))
    assert len(out.tokens) == 20 and all(0 <= t < TINY_VOCAB for t in out.tokens)
    assert sum(out.acceptance_lengths) == len(out.tokens) - 1


def test_bf16_training_on_gpu_follows_fp32_cpu_and_learns(tiny, tmp_path):
    """Same drafter, data and anchors: the first step's loss in bf16 on the GPU is the CPU's
    fp32 loss up to bf16 rounding, and 80 steps lower it."""
    target, drafter = tiny
    seqs = _extract(target, _rows(40, 1), tmp_path / "hid", CUDA)
    train_seqs = [s for s in seqs if s.split == "train"]
    val_seqs = [s for s in seqs if s.split == "val"]
    dp = DrafterParams(num_layers=1, block_size=4)
    tp = train_params(num_anchors=8, batch_size=4, max_steps=80, epochs=20, lr=3e-3, eval_every=40, loss="kl",
                     kl_top_k=4)
    embed, head = target.get_input_embeddings().weight, target.get_output_embeddings().weight

    first = []
    for device, precision in ((torch.device("cpu"), "float32"), (CUDA, "auto")):
        d = copy.deepcopy(drafter).to(device).train()
        step = Step(d, embed, head, dp, tp.model_copy(update={"precision": precision}), TINY_MASK, device)
        if device.type == "cuda":
            assert step.bf16  # precision auto: bf16 autocast on a GPU
        batch = step.blocks(train_seqs[:4], 0, training=True)
        loss, _ = step.loss(train_seqs[:4], batch)
        first.append(float(loss.detach()))
    cpu_fp32, gpu = first
    assert gpu == pytest.approx(cpu_fp32, rel=3e-2)

    d = copy.deepcopy(drafter)
    log = train(d, embed, head, train_seqs, val_seqs, dp, tp, TINY_MASK, dist.World(device=CUDA))
    assert next(d.parameters()).device.type == CUDA.type
    losses = [s["loss"] for s in log.steps]
    assert len(losses) == 80 and all(torch.isfinite(torch.tensor(losses)))
    assert sum(losses[-10:]) < sum(losses[:10])
    assert [e["step"] for e in log.evals] == [40, 80]


def test_a_device_map_places_the_target_on_the_gpus(target_dir, target_model, tokenizer):
    """`--target-device-map auto`: the target's layers go to the visible GPUs (split
    over several when there are), inputs go to `model.device`, and it computes what the
    CPU model does up to float32 kernel differences."""
    from draftline.target.load import load_model

    mapped = load_model(target_dir, "float32", "cpu", device_map="auto")
    assert {p.device.type for p in mapped.parameters()} == {"cuda"}
    ids = tokenizer("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        got = mapped(ids.to(mapped.device)).logits.cpu()
        want = target_model(ids).logits
    torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)


def test_fp8_states_widen_on_the_gpu_to_the_cpus_numbers(tmp_path):
    """extract.state_dtype: float8_e4m3fn on CUDA: FP8 values and scales moved to the GPU
    widen there to the CPU's numbers bit for bit (one float32 multiply each), and the GPU's
    own quantization (online features) stays within e4m3's bound of the states."""
    from draftline.hidden.state_dtype import quantize, widen

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(512, 3 * 256, generator=g) * torch.rand(512, 1, generator=g) * 50).to(torch.bfloat16)
    q, s = quantize(x, 256)
    assert torch.equal(widen(q.to(CUDA), s.to(CUDA)).cpu(), widen(q, s))
    qg, sg = quantize(x.to(CUDA), 256)
    assert qg.device.type == "cuda" and torch.allclose(sg.cpu(), s, rtol=1e-6, atol=0)
    v = x.float().unflatten(-1, (3, 256))
    err = (widen(qg, sg).cpu().unflatten(-1, (3, 256)) - v).abs()
    assert bool((err <= torch.maximum(v.abs() * 2.0**-4, s.unsqueeze(-1) * 2.0**-10) * (1 + 1e-6)).all())
