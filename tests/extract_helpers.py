"""The extract stage's work on a model already loaded, in one process and without params:
for tests and benchmarks that need real shards of a model they hold.

    from extract_helpers import extract_in_process    # tests/ is on sys.path (conftest.py)
"""

from __future__ import annotations

from pathlib import Path

from draftline.hidden import ledger
from draftline.hidden.capture import Capture
from draftline.hidden.merge import merge
from draftline.hidden.plan import Record, plan
from draftline.hidden.producers import TransformersProducer
from draftline.hidden.write import write_shards


def extract_in_process(model, rows: list[dict], layer_ids: list[int], folder: Path, batch_tokens: int = 8192,
                       pad_id: int = 0, shard_bytes: int = 2_000_000_000, teacher: str = "final",
                       top_k: int = 32, state_dtype: str = "bfloat16") -> dict:
    """Shards, index.json and manifest.json of `rows` in `folder`, as the stage writes them;
    returns the writer's counts."""
    hidden = model.config.get_text_config().hidden_size
    record = Record(hidden, len(layer_ids), teacher, top_k if teacher == "top_k" else 0, state_dtype)
    the_plan = plan([len(r["input_ids"]) for r in rows], record, shard_bytes)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    capture = Capture(model, layer_ids, record)
    try:
        stats = write_shards(TransformersProducer(capture, batch_tokens, pad_id), rows, the_plan,
                             list(the_plan.shards), folder, layer_ids)
    finally:
        capture.close()
    names = {s.index: s.name for s in the_plan.shards}
    merge(folder, None, layer_ids, record, the_plan, ledger.done(folder, names))
    return stats


def context_features(hidden_states, layer_ids: list[int]):
    """The reference the hooks are held to: a transformers output's `hidden_states` (index 0
    is the embedding output, layer l's output is index l + 1) at `layer_ids`, concatenated
    -> [..., T, len(layer_ids) * hidden]."""
    import torch

    return torch.cat([hidden_states[layer + 1] for layer in layer_ids], dim=-1)


def random_rows(n: int, seed: int = 0, vocab: int = 60) -> list[dict]:
    """`n` tokenized rows of 5-39 random ids, every fifth held out, the first third of each
    a prompt (loss mask 0)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = int(torch.randint(5, 40, (1,), generator=g))
        out.append({"id": f"r{i}", "split": "val" if i % 5 == 4 else "train",
                    "input_ids": torch.randint(0, vocab, (length,), generator=g).tolist(),
                    "loss_mask": [0] * (length // 3) + [1] * (length - length // 3)})
    return out
