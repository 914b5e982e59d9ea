"""The GPU check: the whole pipeline on one CUDA machine, then its figures in one table.

Runs each stage's `cmd` from dvc.yaml, in dvc.yaml's order, as `dvc repro` runs it
(`draftline <stage> --model ${paths.target_model} ...`, the `${paths.x}` filled in from
dvc.yaml's `vars`), with this interpreter (`python -m draftline <stage> ...`), so it also
works where dvc is not installed, e.g. a bare GPU node with only PyTorch and draftline
installed. Every stage computes on the GPU that `draftline.devices` picks: regeneration
batched through transformers in bf16, extraction in bf16, training under bf16 autocast, the
benchmark's one-sequence decoding in the target's dtype (params: target.dtype). Then it
prints, and writes to `<out>/gpu_check.md` and `.json`, the tokens/s of each stage and the
benchmark's tau and speedups per benchmark.

    python bench/gpu_check.py [--out DIR] [--stages target,download,...] [--params FILE] [--vllm]
    python bench/gpu_check.py --stages '' --vllm     # the vLLM backend's cases alone

--params reaches every stage as DRAFTLINE_PARAMS (`draftline --params`); progress bars are
off (DRAFTLINE_NO_PROGRESS=1). The table's figures come from the metrics files dvc.yaml
declares (`paths.<stage>_metrics`).

Each stage's output goes to `<out>/<stage>.log`. A stage that fails stops the run (its log
tail is printed), except a benchmark whose greedy outputs differ from the target's: its
metrics are written before it fails, and the table reports the mismatch count.

--vllm adds the cases of `extract.backend: vllm` (tests/vllm_parity.py; needs the `gpu`
extra and the repository's tests/): both tiny real-target layouts are extracted with vLLM
and with transformers and every stored row compared. The Qwen3.6 layout's states must agree
within bf16 tolerance and none may be all-zero; the Kimi layout (MLA) must be refused in one
line. Each case's folder and logs are under `<out>/vllm/<layout>/`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _setup import DATA, DVC_FILE, ROOT, path

from draftline.cli import STAGES
from draftline.paths import all_declared

_VAR = re.compile(r"\$\{\s*paths\.(\w+)\s*\}")


def _gpu() -> str:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_check: CUDA is not available on this machine")
    return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"


def stage_command(name: str) -> list[str]:
    """The stage's `cmd` in dvc.yaml with `${paths.x}` resolved from its `vars`, as an argv that
    runs `draftline` with this interpreter (`python -m draftline`, no console script needed)."""
    stages = (yaml.safe_load(DVC_FILE.read_text()) or {}).get("stages") or {}
    if name not in stages or "cmd" not in stages[name]:
        raise SystemExit(f"gpu_check: {DVC_FILE}: no stage '{name}' with a cmd")
    paths = {k: str(v) for k, v in all_declared(DVC_FILE).items()}

    def var(m: re.Match) -> str:
        if m.group(1) not in paths:
            raise SystemExit(f"gpu_check: {DVC_FILE}: stage {name}: ${{paths.{m.group(1)}}} is not declared")
        return paths[m.group(1)]

    argv = shlex.split(_VAR.sub(var, str(stages[name]["cmd"])))
    if "${" in " ".join(argv):
        raise SystemExit(f"gpu_check: {DVC_FILE}: stage {name}: unresolved variable in {argv}")
    if not argv or argv[0] != "draftline":
        raise SystemExit(f"gpu_check: {DVC_FILE}: stage {name}: cmd does not run draftline: {argv}")
    return [sys.executable, "-m", "draftline", *argv[1:]]


def run_stage(name: str, out: Path, env: dict) -> tuple[int, float]:
    cmd = stage_command(name)
    t0 = time.perf_counter()
    with (out / f"{name}.log").open("w") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        rc = subprocess.call(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return rc, time.perf_counter() - t0


def _read(name: str) -> dict:
    metrics = path(f"{name}_metrics")
    return json.loads(metrics.read_text()) if metrics.exists() else {}


def _fmt(x, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def vllm_cases(out: Path) -> dict[str, dict]:
    """layout -> the vLLM backend's comparison with the transformers path (or its error)."""
    sys.path.insert(0, str(ROOT / "tests"))  # the tiny layouts and the comparison live with the tests
    from vllm_parity import LAYOUTS, ParityError, check

    results = {}
    for layout in sorted(LAYOUTS):
        folder = out / "vllm" / layout
        if folder.exists():
            shutil.rmtree(folder)
        t0 = time.perf_counter()
        try:
            results[layout] = {"ok": True, **check(layout, folder)}
        except ParityError as e:
            results[layout] = {"ok": False, "error": str(e)}
        results[layout]["seconds"] = round(time.perf_counter() - t0, 1)
        print(f"gpu_check: vllm {layout}: {'ok' if results[layout]['ok'] else 'FAILED'}, "
              f"{results[layout]['seconds']} s", flush=True)
    return results


def _vllm_line(layout: str, r: dict) -> str:
    if not r["ok"]:
        return f"| {layout} | FAILED | {r['error'][:300]} |"
    if "refused" in r:
        return f"| {layout} | refused, as it must be | {r['refused']} |"
    errs = ", ".join(f"{k} {v:.4f}" for k, v in r["max_rel_err"].items())
    return f"| {layout} | ok | {r['rows']} rows, {r['tokens']} tokens; largest relative error {errs}; " \
           f"{r['zero_states']} all-zero states |"


def summary(device: str, seconds: dict[str, float], vllm: dict[str, dict] | None = None) -> tuple[str, dict]:
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
    if vllm:
        lines += ["", "extract.backend: vllm against transformers (tests/vllm_parity.py):", "",
                  "| layout | result | detail |", "| --- | --- | --- |"]
        lines += [_vllm_line(layout, r) for layout, r in vllm.items()]
    data = {"device": device, "stage_seconds": seconds, "regenerate": regen, "extract": ext, "train": tr,
            "benchmark": bench, "vllm": vllm}
    return "\n".join(lines), data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA / "gpu_check")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--params", type=Path, default=None, help="params file (default params.yaml)")
    ap.add_argument("--vllm", action="store_true", help="also compare extract.backend: vllm with transformers "
                    "on the tiny real-target layouts (the gpu extra)")
    args = ap.parse_args()
    stages = [s for s in args.stages.split(",") if s]  # --stages '': none (with --vllm: its cases alone)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise SystemExit(f"gpu_check: --stages: unknown stage(s) {unknown}; known: {STAGES}")
    for name in stages:  # every stage's command resolves before the first one runs
        stage_command(name)
    device = _gpu()
    print(f"gpu_check: {device}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DRAFTLINE_NO_PROGRESS": "1", "PYTHONUNBUFFERED": "1"}
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
    vllm = vllm_cases(args.out) if args.vllm else None
    text, data = summary(device, seconds, vllm)
    (args.out / "gpu_check.md").write_text(text + "\n")
    (args.out / "gpu_check.json").write_text(json.dumps(data, indent=2) + "\n")
    print(text)
    if failed:
        raise SystemExit(f"gpu_check: stage {failed} failed (log: {args.out / (failed + '.log')})")
    if vllm and not all(r["ok"] for r in vllm.values()):
        raise SystemExit(f"gpu_check: extract.backend: vllm differs from transformers (logs: {args.out / 'vllm'})")


if __name__ == "__main__":
    main()
