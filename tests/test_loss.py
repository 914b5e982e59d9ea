"""The fused LM-head loss equals the plain formulas, values and gradients."""

import pytest
import torch
import torch.nn.functional as F

from draftline.drafter import loss as L


def _reference(kind, logits, teacher_logits, labels, w, denom, T, kl_weight, top_k):
    ce = F.cross_entropy(logits, labels, reduction="none")
    t = teacher_logits / T
    if top_k is not None:
        keep = torch.zeros_like(t, dtype=torch.bool).scatter_(-1, teacher_logits.topk(top_k, -1).indices, True)
        t = t.masked_fill(~keep, float("-inf"))
    p = torch.softmax(t, -1)
    s_logp = F.log_softmax(logits / T, -1)
    kl = (torch.where(p > 0, p * (torch.log(p) - s_logp), torch.zeros_like(p))).sum(-1) * T * T
    per = {"ce": ce, "kl": kl, "mix": (1 - kl_weight) * ce + kl_weight * kl}[kind]
    return (per * w).sum() / denom


@pytest.mark.parametrize("kind,top_k", [("ce", None), ("kl", None), ("kl", 5), ("mix", None), ("mix", 3)])
def test_fused_head_loss_matches_reference(kind, top_k, monkeypatch):
    monkeypatch.setattr(L, "CHUNK", 7)  # several chunks, one ragged
    torch.manual_seed(0)
    n, h, v = 20, 16, 50
    rows = torch.randn(n, h, dtype=torch.float64, requires_grad=True)
    head = torch.randn(v, h, dtype=torch.float64)
    labels = torch.randint(0, v, (n,))
    w = torch.rand(n, dtype=torch.float64) + 0.1
    teacher = torch.randn(n, h, dtype=torch.float64)
    spec = L.LossSpec(kind, kl_weight=0.3, temperature=2.0, top_k=top_k)
    denom = torch.tensor(w.sum().item() * 1.7, dtype=torch.float64)  # a step's weight beyond this micro-batch
    got, correct = L._FusedHeadLoss.apply(rows, head, labels, w, teacher, spec, denom, torch.float64)
    got.backward()
    g_fused = rows.grad.clone()
    rows.grad = None
    logits = rows @ head.T
    ref = _reference(kind, logits, teacher @ head.T, labels, w, denom, 2.0, 0.3, top_k)
    ref.backward()
    assert torch.allclose(got, ref, atol=1e-10)
    assert torch.allclose(g_fused, rows.grad, atol=1e-10)
    assert torch.equal(correct, logits.argmax(-1) == labels)


def test_kl_against_one_hot_teacher_is_ce():
    """A teacher certain of the label (huge logit) makes KL at T=1 equal CE."""
    torch.manual_seed(1)
    n, h, v = 6, 32, 30
    head = torch.linalg.qr(torch.randn(h, v, dtype=torch.float64)).Q.T  # orthonormal rows
    rows = torch.randn(n, h, dtype=torch.float64)
    labels = torch.randint(0, v, (n,))
    teacher = head[labels] * 1e3  # teacher logits peak at the label by a wide margin
    w = torch.ones(n, dtype=torch.float64)
    ce, _ = L._FusedHeadLoss.apply(rows, head, labels, w, teacher, L.LossSpec("ce"), w.sum(), torch.float64)
    kl, _ = L._FusedHeadLoss.apply(rows, head, labels, w, teacher, L.LossSpec("kl"), w.sum(), torch.float64)
    assert torch.allclose(ce, kl, atol=1e-6)


@pytest.mark.parametrize("kind", ["kl", "mix"])
def test_precomputed_top_k_teacher_equals_per_step_top_k(kind, monkeypatch):
    """The top-k teacher computed once per sequence gives the loss and gradient of the
    per-step path (teacher logits from the final states at every step)."""
    monkeypatch.setattr(L, "CHUNK", 7)
    torch.manual_seed(2)
    n, h, v, k = 20, 16, 50, 6
    rows = torch.randn(n, h, dtype=torch.float64, requires_grad=True)
    head = torch.randn(v, h, dtype=torch.float64)
    labels = torch.randint(0, v, (n,))
    w = torch.rand(n, dtype=torch.float64) + 0.1
    final = torch.randn(n, h, dtype=torch.float64)
    spec = L.LossSpec(kind, kl_weight=0.4, temperature=1.5, top_k=k)
    a, _ = L._FusedHeadLoss.apply(rows, head, labels, w, final, spec, w.sum(), torch.float64)
    a.backward()
    g_a = rows.grad.clone()
    rows.grad = None
    sparse = L.top_k_teacher(final, head, k, torch.float64)
    assert sparse.ids.shape == (n, k)
    b, _ = L._FusedHeadLoss.apply(rows, head, labels, w, sparse, spec, w.sum(), torch.float64)
    b.backward()
    assert torch.allclose(a, b, atol=1e-10)
    assert torch.allclose(g_a, rows.grad, atol=1e-10)
