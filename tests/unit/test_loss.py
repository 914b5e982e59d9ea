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
    sparse = L.top_k_teacher(final, head, k)
    assert sparse.ids.shape == (n, k)
    b, _ = L._FusedHeadLoss.apply(rows, head, labels, w, sparse, spec, w.sum(), torch.float64)
    b.backward()
    assert torch.allclose(a, b, atol=1e-10)
    assert torch.allclose(g_a, rows.grad, atol=1e-10)


@pytest.mark.parametrize("kind", ["ce", "kl", "mix"])
def test_head_vocab_loss_is_the_softmax_over_the_subset(kind, monkeypatch):
    """With a training head vocabulary the loss and gradient are those of the plain formulas
    over the subset's logits: labels outside it drop out of CE, the top-k teacher is
    renormalised over its tokens inside, and a row with no teacher token inside drops out
    of KL."""
    from draftline.drafter.head_vocab import HeadVocab

    monkeypatch.setattr(L, "CHUNK", 7)
    torch.manual_seed(3)
    n, h, v, k = 20, 16, 50, 4
    rows = torch.randn(n, h, dtype=torch.float64, requires_grad=True)
    head = torch.randn(v, h, dtype=torch.float64)
    sub = HeadVocab.of(torch.arange(0, v, 2), v)  # even ids
    labels = torch.randint(0, v, (n,))
    w = torch.rand(n, dtype=torch.float64) + 0.1
    teacher = L.top_k_teacher(torch.randn(n, h, dtype=torch.float64), head, k)
    teacher.ids[0] = torch.tensor([1, 3, 5, 7])  # no token inside: row 0 leaves the KL term
    spec = L.LossSpec(kind, kl_weight=0.3, temperature=2.0, top_k=k)
    denom = w.sum()
    mapped = L.SparseTeacher(sub.index[teacher.ids], teacher.vals)
    got, _ = L._FusedHeadLoss.apply(rows, head[sub.ids], sub.index[labels], w, mapped, spec, denom, torch.float64)
    got.backward()
    g = rows.grad.clone()
    rows.grad = None

    logits = rows @ head[sub.ids].T
    y = sub.index[labels]
    ce = torch.where(y >= 0, F.cross_entropy(logits, y.clamp(min=0), reduction="none"), 0.0)
    t = torch.full((n, len(sub)), float("-inf"), dtype=torch.float64)
    for i in range(n):
        for j, val in zip(teacher.ids[i].tolist(), teacher.vals[i].tolist()):
            if sub.index[j] >= 0:
                t[i, sub.index[j]] = val / 2.0
    p = torch.softmax(t, -1).nan_to_num(0.0)
    s_logp = F.log_softmax(logits / 2.0, -1)
    kl = torch.where(p > 0, p * (torch.log(p) - s_logp), torch.zeros_like(p)).sum(-1) * 4.0
    per = {"ce": ce, "kl": kl, "mix": 0.7 * ce + 0.3 * kl}[kind]
    ref = (per * w).sum() / denom
    ref.backward()
    assert torch.allclose(got, ref, atol=1e-10)
    assert torch.allclose(g, rows.grad, atol=1e-10)


def test_head_vocab_takes_the_most_frequent_tokens():
    from types import SimpleNamespace

    from draftline.drafter.head_vocab import HeadVocab

    seqs = [SimpleNamespace(id="a", input_ids=torch.tensor([5, 5, 5, 2, 9])),
            SimpleNamespace(id="b", input_ids=torch.tensor([2, 7, 9, 1]))]
    hv = HeadVocab.frequent(((s.id, s.input_ids) for s in seqs), 3, 10)  # counts: 5:3, 2:2, 9:2, 7:1, 1:1
    assert hv.ids.tolist() == [2, 5, 9]
    assert hv.index[[2, 5, 9, 7]].tolist() == [0, 1, 2, -1]
    assert HeadVocab.frequent(((s.id, s.input_ids) for s in seqs), 100, 10).ids.tolist() == [1, 2, 5, 7, 9]  # at most what occurs
    with pytest.raises(ValueError, match="sequence a: token id 9"):
        HeadVocab.frequent(((s.id, s.input_ids) for s in seqs), 3, 8)


@pytest.mark.parametrize("kind", ["ce", "kl", "mix"])
def test_loss_without_gradient_equals_the_training_loss(kind, monkeypatch):
    """Evaluation (no grad) skips the gradient's work and gets the same loss and accuracy."""
    monkeypatch.setattr(L, "CHUNK", 7)
    torch.manual_seed(4)
    n, h, v, k = 20, 16, 50, 6
    rows = torch.randn(n, h, dtype=torch.float64, requires_grad=True)
    head = torch.randn(v, h, dtype=torch.float64)
    labels = torch.randint(0, v, (n,))
    w = torch.rand(n, dtype=torch.float64) + 0.1
    teacher = L.top_k_teacher(torch.randn(n, h, dtype=torch.float64), head, k)
    spec = L.LossSpec(kind, kl_weight=0.3, temperature=2.0, top_k=k)
    a, ca = L._FusedHeadLoss.apply(rows, head, labels, w, teacher, spec, w.sum(), torch.float64, True)
    with torch.no_grad():
        b, cb = L._FusedHeadLoss.apply(rows, head, labels, w, teacher, spec, w.sum(), torch.float64, False)
    assert torch.equal(a.detach(), b) and torch.equal(ca, cb)
