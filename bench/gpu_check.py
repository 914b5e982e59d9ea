"""The GPU check: the whole pipeline on one CUDA machine, then its figures in one table.

Runs the stages' own entry points in dvc.yaml's order (`python -m stages.<name>`, what
`dvc repro` runs), so it also works where dvc is not installed, e.g. a bare GPU node with
only PyTorch. Every stage computes on the GPU that `draftline.devices` picks: regeneration
batched through transformers in bf16, extraction in bf16, training under bf16 autocast, the
benchmark's one-sequence decoding in the target's dtype (params: target.dtype). Then it
prints, and writes to `<out>/gpu_check.md` and `.json`, the tokens/s of each stage and the
benchmark's tau and speedups per benchmark.

    python bench/gpu_check.py [--out DIR] [--stages target,download,...] [--params FILE]

Each stage's output goes to `<out>/<stage>.log`. A stage that fails stops the run (its log
tail is printed), except a benchmark whose greedy outputs differ from the target's: its
metrics are written before it fails, and the table reports the mismatch count.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = ["target", "download", "mix", "regenerate", "tokenize", "extract", "train", "benchmark"]
METRICS = ROOT / "data" / "metrics"


def _gpu() -> str:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_check: CUDA is not available on this machine")
    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"


def run_stage(name: str, out: Path, env: dict) -> tuple[int, float]:
    t0 = time.perf_counter()
    with (out / f"{name}.log").open("w") as log:
        rc = subprocess.call([sys.executable, "-m", f"stages.{name}"], cwd=ROOT, env=env,
                             stdout=log, stderr=subprocess.STDOUT)
    return rc, time.perf_counter() - t0


def _read(name: str) -> dict:
    path = METRICS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _fmt(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def summary(device: str, seconds: dict[str, float]) -> tuple[str, dict]:
    regen, ext, tr, bench = (_read(n) for n in ("regenerate", "extract", "train", "benchmark"))
    lines = [f"GPU check on {device}", "", "| stage | seconds | throughput |", "| --- | --- | --- |"]
    rate = {"regenerate": f"{_fmt(regen.get('tokens_per_second'), '.0f')} generated tokens/s "
                          f"({regen.get('rows', '-')} rows, {regen.get('compute_dtype', '-')})",
            "extract": f"{_fmt(ext.get('tokens_per_second'), '.0f')} tokens/s ({ext.get('compute_dtype', '-')})",
            "train": f"{_fmt(tr.get('steps_per_second'), '.2f')} steps/s ({tr.get('steps', '-')} steps, "
                     f"{tr.get('precision', '-')})"}
    for name, s in seconds.items():
        lines.append(f"| {name} | {s:.1f} | {rate.get(name, '')} |")
    if bench:
        lines += ["", f"benchmark: {bench['requests']} requests, greedy, {bench['max_new_tokens']} new tokens, "
                      f"block {bench['block_size']}, mismatches {bench['mismatches']}", "",
                  "| group | target tok/s | dflash tau | dflash tok/s | speedup | untrained tau | prompt lookup tau |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        for group, e in bench.get("greedy", {}).items():
            d, u, p = e.get("dflash", {}), e.get("untrained", {}), e.get("prompt_lookup", {})
            lines.append(f"| {group} | {_fmt(e.get('target_tokens_per_second'), '.1f')} | {_fmt(d.get('tau'))} | "
                         f"{_fmt(d.get('tokens_per_second'), '.1f')} | {_fmt(d.get('speedup'), '.2f')}x | "
                         f"{_fmt(u.get('tau'))} | {_fmt(p.get('tau'))} |")
    if tr:
        lines += ["", f"train: loss {tr.get('loss')}, val tau estimate {_fmt(tr.get('val_tau_estimate'))}, "
                      f"padding {_fmt(tr.get('padding_fraction'), '.2%')}"]
    data = {"device": device, "stage_seconds": seconds, "regenerate": regen, "extract": ext, "train": tr,
            "benchmark": bench}
    return "\n".join(lines), data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "data" / "gpu_check")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--params", type=Path, default=None, help="params file (default params.yaml)")
    args = ap.parse_args()
    stages = args.stages.split(",")
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise SystemExit(f"gpu_check: --stages: unknown stage(s) {unknown}; known: {STAGES}")
    device = _gpu()
    print(f"gpu_check: {device}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DRAFTLINE_NO_PROGRESS": "1", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH")]))
    if args.params:
        env["DRAFTLINE_PARAMS"] = str(args.params.resolve())
    seconds: dict[str, float] = {}
    failed = None
    for name in stages:
        rc, s = run_stage(name, args.out, env)
        seconds[name] = round(s, 1)
        print(f"gpu_check: {name}: rc {rc}, {s:.1f} s", flush=True)
        if rc:
            failed = name
            tail = (args.out / f"{name}.log").read_text().splitlines()[-25:]
            print("\n".join(tail), flush=True)
            if name != "benchmark":  # a benchmark with mismatches has written its metrics
                break
    text, data = summary(device, seconds)
    (args.out / "gpu_check.md").write_text(text + "\n")
    (args.out / "gpu_check.json").write_text(json.dumps(data, indent=2) + "\n")
    print(text)
    if failed:
        raise SystemExit(f"gpu_check: stage {failed} failed (log: {args.out / (failed + '.log')})")


if __name__ == "__main__":
    main()
