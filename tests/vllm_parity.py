"""`extract.backend: vllm` against the transformers path on the tiny real-target layouts, on a
GPU with the `gpu` extra: the GPU check's vLLM cases and tests/gpu/test_vllm_parity.py.

For each layout, a project as the target stage leaves it under `target.materialize: false`
(data/target/model holds only a SOURCE.json pointer to the tiny checkpoint), its info.json
and tokenized rows. `draftline extract` runs on it with `extract.backend: vllm`, then with
`transformers` (each in its own process, as the stage runs: vLLM holds the GPU until its
process ends), and every stored row of the two is compared:

- qwen3.6 (hybrid Gated DeltaNet + gated attention): the same rows and tokens; per row, each
  captured layer's and the final state's relative error (Frobenius) within REL_TOL; no
  all-zero state (what vLLM before 0.25.0 stored for hybrid targets, vLLM PR #46301);
- kimi-k2.6 (MLA + MoE): the vLLM run stops with vllm_backend.MLA_REFUSED's one line, before
  vLLM starts and before any shard is planned.

    python bench/gpu_check.py --stages '' --vllm            # both layouts, a line each
    .venv/bin/python -m pytest -m gpu tests/gpu/test_vllm_parity.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
# bf16 keeps 8 significant bits (2^-9 a rounding); vLLM and transformers run different bf16
# kernels (fused Gated-DeltaNet and attention) whose roundings add up over the layers, to
# well under 2^-5 of a state's norm on the tiny targets. A wrong layer, a zero or a garbled
# state is off by the order of the state itself.
REL_TOL = 2**-5
N_ROWS = 12

# layout -> (builder in tiny_layouts.py, drafter.target_layer_ids)
LAYOUTS = {"qwen3.6": ("qwen36_target", [0, 2]), "kimi-k2.6": ("kimi26_target", [0, 1])}


class ParityError(AssertionError):
    """The vLLM backend's states differ from the transformers path's, or it ran where it should refuse."""


def project(layout: str, root: Path) -> Path:
    """The tiny checkpoint under root/hub, and root/data/{target,tokens} pointing to it."""
    import tiny_layouts
    from draftline.config.drafter import DrafterParams
    from draftline.config.target import TargetParams
    from draftline.io import write_parquet
    from draftline.target.info import describe
    from draftline.target.load import POINTER

    build, layers = LAYOUTS[layout]
    real = getattr(tiny_layouts, build)(root / "hub" / layout)
    model = root / "data/target/model"
    model.mkdir(parents=True)
    (model / POINTER).write_text(json.dumps({"path": str(real.resolve()), "source": f"tiny {layout}"}))
    info = describe(model, TargetParams(materialize=False, dtype="bfloat16"),
                    DrafterParams(num_layers=len(layers), target_layer_ids=layers), {"source": f"tiny {layout}"})
    (root / "data/target/info.json").write_text(json.dumps(info))
    g = torch.Generator().manual_seed(0)
    rows = []
    for i in range(N_ROWS):
        n = int(torch.randint(20, 200, (1,), generator=g))
        rows.append({"id": f"r{i:02d}", "split": "val" if i % 6 == 5 else "train",
                     "input_ids": torch.randint(0, 100_000, (n,), generator=g).tolist(),
                     "loss_mask": [0] * (n // 4) + [1] * (n - n // 4)})
    write_parquet(root / "data/tokens/train.parquet", rows)
    return root


def extract(root: Path, backend: str) -> subprocess.CompletedProcess:
    """`draftline extract` on the project with `backend`, into root/<backend>/."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["target"] |= {"materialize": False, "dtype": "bfloat16"}
    params["extract"] |= {"backend": backend, "shard_bytes": 200_000, "vllm_storage": str(root / backend / "files")}
    file = root / f"{backend}.yaml"
    file.write_text(yaml.safe_dump(params))
    cmd = [sys.executable, "-m", "draftline", "--params", str(file), "extract",
           "--model", str(root / "data/target/model"), "--info", str(root / "data/target/info.json"),
           "--tokens", str(root / "data/tokens/train.parquet"), "--out", str(root / backend / "hidden"),
           "--metrics", str(root / backend / "extract.json")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]), DRAFTLINE_NO_PROGRESS="1")
    p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=1200)
    (root / f"{backend}.log").write_text(p.stdout + p.stderr)
    return p


def compare(vllm: Path, hf: Path, layer_ids: list[int]) -> dict:
    """Row by row: the largest relative error per stored group (captured layers, final) and
    the number of all-zero states in vLLM's shards."""
    from draftline.hidden.reader import load_sequences

    got = {s.id: s for s in load_sequences(vllm)}
    want = {s.id: s for s in load_sequences(hf)}
    if sorted(got) != sorted(want):
        raise ParityError(f"rows differ: vllm {sorted(got)[:5]}..., transformers {sorted(want)[:5]}...")
    worst = {str(i): 0.0 for i in layer_ids} | {"final": 0.0}
    zeros = tokens = 0
    for i, w in want.items():
        g = got[i]
        if not torch.equal(g.input_ids, w.input_ids):
            raise ParityError(f"row {i!r}: the stored tokens differ")
        hidden = w.final.shape[-1]
        groups = [*g.context.split(hidden, -1), g.final]
        for label, a, b in zip(worst, groups, [*w.context.split(hidden, -1), w.final]):
            worst[label] = max(worst[label], float((a - b).norm() / b.norm()))
        zeros += sum(int((x == 0).all(-1).sum()) for x in groups)
        tokens += int(g.input_ids.shape[0])
    return {"rows": len(want), "tokens": tokens, "max_rel_err": {k: round(v, 5) for k, v in worst.items()},
            "zero_states": zeros}


def check(layout: str, root: Path) -> dict:
    """Build the layout's project in `root`, run both backends, compare; a dict to report,
    or ParityError naming what differs (the logs: root/<backend>.log)."""
    from draftline.hidden.vllm_backend import MLA_REFUSED
    from draftline.target.info import TargetInfo

    project(layout, root)
    info = TargetInfo.load(root / "data/target/info.json")
    vllm = extract(root, "vllm")
    if info.attention == "mla":
        want = "error: " + MLA_REFUSED.format(arch=info.architecture)
        last = (vllm.stderr.strip().splitlines() or [""])[-1]
        if vllm.returncode != 2 or last != want or (root / "vllm/hidden/index.json").exists():
            raise ParityError(f"{layout}: expected the refusal {want!r}, got rc {vllm.returncode}: {last!r}")
        return {"layout": layout, "refused": last.removeprefix("error: ")}
    if vllm.returncode:
        raise ParityError(f"{layout}: extract.backend: vllm failed (rc {vllm.returncode}): {vllm.stderr[-2000:]}")
    hf = extract(root, "transformers")
    if hf.returncode:
        raise ParityError(f"{layout}: extract.backend: transformers failed (rc {hf.returncode}): {hf.stderr[-2000:]}")
    result = {"layout": layout, **compare(root / "vllm/hidden", root / "transformers/hidden", info.target_layer_ids)}
    bad = {k: v for k, v in result["max_rel_err"].items() if not v <= REL_TOL}
    if bad or result["zero_states"]:
        raise ParityError(f"{layout}: vLLM's states differ from the transformers path's beyond {REL_TOL} "
                          f"(largest relative error per group {bad}) or hold {result['zero_states']} all-zero "
                          f"state(s): {result}")
    return result
