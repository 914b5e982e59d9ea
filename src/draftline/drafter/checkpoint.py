"""Resume state of a training run: written every N steps, atomically, last K kept.

A checkpoint holds the drafter's weights, the optimizer's moments, the step (from which the
epoch, the batch and the learning rate follow: batches and anchors are pure functions of
seed, epoch and sequence id), the logs so far and the RNG states. It is resumed only when
its fingerprint matches: same training and drafter params, same hidden states, same
training code, same torch. Anything else starts afresh rather than continue a run that
would not have produced these weights.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path

import torch

from ..io import atomic_path, set_aside

NAME = re.compile(r"^step-(\d{7})\.pt$")


# train params that change how the work is done, not what is computed: a run stopped under
# one loader or process count resumes under another (the gradient sums' order aside).
HOW_NOT_WHAT = ("loader", "prefetch", "processes_per_node", "nodes", "master")


def fingerprint(train_params: dict, drafter_params: dict, data_index: dict) -> str:
    h = hashlib.sha256()
    train_params = {k: v for k, v in train_params.items() if k not in HOW_NOT_WHAT}
    h.update(json.dumps({"train": train_params, "drafter": drafter_params, "torch": torch.__version__},
                        sort_keys=True).encode())
    h.update(json.dumps(data_index, sort_keys=True).encode())
    for src in sorted(Path(__file__).parent.glob("*.py")):  # the training code itself
        h.update(src.name.encode())
        h.update(src.read_bytes())
    return h.hexdigest()


def _listed(folder: Path) -> list[tuple[int, Path]]:
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := NAME.match(p.name))]
    return sorted(found)


def save(folder: Path, step: int, fp: str, model_state: dict, optimizer_state: dict, log: dict, keep: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    state = {"fingerprint": fp, "step": step, "model": model_state, "optimizer": optimizer_state,
             "log": log, "torch_rng": torch.get_rng_state(), "python_rng": random.getstate()}
    path = folder / f"step-{step:07d}.pt"
    with atomic_path(path) as tmp:
        torch.save(state, tmp)
    for _, old in _listed(folder)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def latest(folder: Path, fp: str) -> dict | None:
    """The newest checkpoint with this fingerprint; others (a different run) are removed."""
    for _, path in reversed(_listed(folder)):
        try:
            # weights_only: tensors, numbers, strings and containers, never arbitrary objects.
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torn writes cannot happen (atomic rename), a bad disk can
            # Set aside, then the next older checkpoint (or a fresh start) is used.
            set_aside(path, folder / "damaged", str(err).splitlines()[0])
            continue
        if state.get("fingerprint") == fp:
            return state
        path.unlink()
    return None


def restore(state: dict, model, optimizer, sharded: bool = False) -> None:
    if sharded:  # full state dicts, each process keeping its shard
        from .fsdp import load_full_state

        load_full_state(model, optimizer, state["model"], state["optimizer"])
    else:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
