"""DFlash2 in training and decoding: identity-started convolutions, block-local
convolution over packed blocks, the candidate selector's loss and its walk.

z-lab's `DFlash2DraftModel` adds to DFlash a grouped dynamic convolution around each
sublayer (slot i mixes in slot i-1, so later slots know what earlier ones hold) and a
`CandidateSelector`: each slot keeps its top-k tokens, and a low-rank score of (token
picked at the previous slot, candidate) is added to the drafter's logit before choosing.
DFlash's slots are predicted in parallel, so without it slot 2 guesses without knowing
slot 1's token; that is where a chain loses most after slot 1.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F


def is_dflash2(model) -> bool:
    return getattr(model, "candidate_selector", None) is not None


@torch.no_grad()
def identity_convs(model) -> None:
    """Start every convolution as the identity (tap 0 = 1, no input-dependent part): a
    fresh DFlash2 backbone then computes exactly what the DFlash one does."""
    for layer in model.layers:
        for conv in (layer.attention_conv, layer.mlp_conv):
            if conv is not None:
                conv.base_kernel.zero_()
                conv.base_kernel[:, 0, :] = 1.0
                conv.kernel_projection.weight.zero_()


@contextlib.contextmanager
def block_local_convs(block_size: int):
    """Training packs a sequence's A blocks along the length axis ([b, A*B, H]); the
    reference convolution shifts along that axis, so slot 0 of a block would see the last
    slot of the block before. Inside this context each block is convolved on its own, as
    at inference, where the drafter sees one block at a time."""
    import dflash.model as ref

    conv = ref._grouped_dynamic_convolve

    def per_block(hidden, dynamic, base, group_size):
        b, length, h = hidden.shape
        if length % block_size or length == block_size:
            return conv(hidden, dynamic, base, group_size)
        n = b * (length // block_size)
        out = conv(hidden.reshape(n, block_size, h), dynamic.reshape(n, block_size, *dynamic.shape[2:]),
                   base, group_size)
        return out.reshape(b, length, h)

    ref._grouped_dynamic_convolve = per_block
    try:
        yield
    finally:
        ref._grouped_dynamic_convolve = conv


def selector_targets(block_ids: torch.Tensor, labels: torch.Tensor, keep: torch.Tensor, block_size: int):
    """Predecessor of each supervised slot: the anchor for slot 1, the true token of the
    slot before for the others (a chain only goes on past a slot whose token was right)."""
    b = labels.shape[0]
    anchors = block_ids.view(b, -1, block_size)[:, :, 0]
    return torch.cat([anchors[..., None], labels[..., :-1]], -1)[keep]


def selector_loss(selector, rows: torch.Tensor, predecessors: torch.Tensor, targets: torch.Tensor,
                  head_w: torch.Tensor, head_ids: torch.Tensor | None, head_index: torch.Tensor | None,
                  weights: torch.Tensor, denom: torch.Tensor, top_k: int,
                  compute_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Cross-entropy of the selector's scores over each row's top-k candidates.

    rows: the drafter's hidden states of the supervised slots [N, H]; head_w: the LM head
    rows training normalises over (a training head vocabulary, `head_ids` its token ids and
    `head_index` the inverse map, or the full head with both None). The drafter's logits
    (the selector's unary scores) are taken as they are: the drafter's own loss trains them.
    A target outside the top-k replaces the k-th candidate, so every row has a right answer.
    """
    with torch.no_grad():
        logits = F.linear(rows.detach().to(compute_dtype), head_w.to(compute_dtype)).float()
        unary, cand = logits.topk(top_k, dim=-1)
        cand = head_ids[cand] if head_ids is not None else cand
        local = head_index[targets] if head_index is not None else targets
        ok = local >= 0  # a target outside a training head vocabulary has no logit: dropped
        missing = ~(cand == targets[:, None]).any(-1) & ok
        cand[missing, -1] = targets[missing]
        unary[missing, -1] = logits[missing, local[missing].clamp(min=0)]
        right = (cand == targets[:, None]).float().argmax(-1)
    h = selector.hidden_projection(rows.float())
    pair = torch.einsum("nr,nkr->nk", selector.predecessor_codebook(predecessors) * h,
                        selector.successor_codebook(cand))
    ce = F.cross_entropy(unary + pair, right, reduction="none")
    return (ce * weights * ok).sum() / denom


def walk(selector, hidden: torch.Tensor, logits: torch.Tensor, anchor: int, temperature: float,
         gen: torch.Generator | None):
    """The selector's path through one block's slots: the reference `CandidateSelector.select`
    for one sequence, drawing with `gen` when sampling. hidden [P, H], logits [P, V].
    Returns the tokens and, when sampling, each slot's draft distribution over the
    vocabulary (zero outside its candidates): what lossless rejection sampling needs."""
    unary, cand = torch.topk(logits.float(), selector.top_k, dim=-1)
    h = selector.hidden_projection(hidden)
    succ = selector.successor_codebook(cand)  # [P, k, r]
    prev = torch.tensor(anchor, device=hidden.device)
    tokens, q = [], None if temperature == 0 else torch.zeros_like(logits, dtype=torch.float32)
    for i in range(hidden.shape[0]):
        scores = unary[i] + succ[i] @ (selector.predecessor_codebook(prev) * h[i])
        if temperature == 0:
            j = int(scores.argmax())
        else:
            probs = torch.softmax(scores / temperature, -1)
            j = int(torch.multinomial(probs.cpu(), 1, generator=gen))
            q[i, cand[i]] = probs.to(q.dtype)
        prev = cand[i, j]
        tokens.append(int(prev))
    return tokens, q
