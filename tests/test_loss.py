"""The fused LM-head loss equals the plain formulas, values and gradients."""

import pytest
import torch
import torch.nn.functional as F

from draftline.drafter import loss as L


@pytest.mark.parametrize("kind", ["ce", "kl"])
def test_fused_head_loss_matches_reference(kind, monkeypatch):
    monkeypatch.setattr(L, "CHUNK", 7)  # several chunks, one ragged
    torch.manual_seed(0)
    n, h, v = 20, 16, 50
    rows = torch.randn(n, h, dtype=torch.float64, requires_grad=True)
    head = torch.randn(v, h, dtype=torch.float64)
    labels = torch.randint(0, v, (n,))
    w = torch.rand(n, dtype=torch.float64) + 0.1
    teacher = torch.randn(n, h, dtype=torch.float64)
    T = 2.0
    got, correct = L._FusedHeadLoss.apply(rows, head, labels, w, teacher, kind, T, torch.float64)
    got.backward()
    g_fused = rows.grad.clone()
    rows.grad = None
    logits = rows @ head.T
    if kind == "ce":
        per = F.cross_entropy(logits, labels, reduction="none")
    else:
        t = F.log_softmax(teacher @ head.T / T, -1)
        per = (t.exp() * (t - F.log_softmax(logits / T, -1))).sum(-1) * T * T
    ref = (per * w).sum() / w.sum()
    ref.backward()
    assert torch.allclose(got, ref, atol=1e-10)
    assert torch.allclose(g_fused, rows.grad, atol=1e-10)
    assert torch.equal(correct, logits.argmax(-1) == labels)
