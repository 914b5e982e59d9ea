"""Stage `benchmark`: speculative decoding with the drafter vs the target alone and baselines.

    draftline benchmark --model DIR --info FILE --drafter DIR --eval FILE --results FILE --metrics FILE ...

The card stage then writes the drafter's model card from these metrics.

A published drafter (z-lab's config.json + model.safetensors) runs on the same target and
prompts once `check_fits` has found it made for this target; its files go elsewhere
(`BenchmarkFiles.under`), and the metrics name the drafter either way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..devices import compute_device, describe
from ..drafter.model import ARCHITECTURES, DrafterError, build_drafter, load_drafter
from ..io import read_json, read_parquet, write_json, write_parquet, write_tsv
from ..revision import checkout
from ..target.info import TargetInfo
from ..target.load import load_model, load_tokenizer
from .measure import BenchmarkFailure, run_benchmark


@dataclass(frozen=True)
class BenchmarkFiles:
    """What the stage writes."""

    results: Path  # one row per request and method
    metrics: Path  # tau, tokens/s and speedup per eval source and method
    hist_plot: Path  # share of verify steps per tokens produced (a dvc plot)
    pos_plot: Path  # acceptance per drafted position (a dvc plot)

    @classmethod
    def under(cls, folder: Path) -> "BenchmarkFiles":
        """Everything in `folder`: for a drafter this pipeline did not train."""
        return cls(folder / "results.parquet", folder / "metrics.json", folder / "acceptance.tsv",
                   folder / "acceptance_by_position.tsv")


def run(params, model_dir: Path, info_file: Path, drafter_dir: Path, eval_file: Path, out: BenchmarkFiles,
        device=None, device_map: str | None = None) -> None:
    """Check the drafter fits the target, load, decode every held-out prompt by each method,
    write `out`; fail when any greedy decode differs from the target's."""
    info = TargetInfo.load(info_file)
    check_fits(drafter_dir, info, info_file)
    drafter = drafter_identity(drafter_dir)
    target, tok, drafters = _load(params.benchmark, model_dir, info, drafter_dir, device or compute_device(),
                                  device_map)
    B = drafters["dflash"].block_size
    metrics, rows = run_benchmark(target, tok, drafters, read_parquet(eval_file), params.benchmark,
                                  info.eos_token_ids, B, params.chat.template_kwargs())
    metrics["device"] = describe(target.device)
    metrics["drafter"] = drafter
    metrics["run"] = checkout()  # the commit and day, which the README's results name
    _write(out, metrics, rows, B)
    if metrics["mismatches"]:
        raise BenchmarkFailure(f"benchmark: {metrics['mismatches']} greedy decode(s) differ from the target's "
                               f"greedy output (see {out.results})")
    print(_summary(metrics, f"metrics {out.metrics}"))


def check_fits(drafter_dir: Path, info: TargetInfo, info_file: Path) -> None:
    """Refuse, before anything loads, a drafter made for another target: one line naming the
    key of its config.json. z-lab's published configs carry every key read here (our export
    adds target_hidden_size and dflash_config's copies of block_size and num_target_layers);
    z-lab's model reads dflash_config's value of a key first, then the top level's."""
    path = drafter_dir / "config.json"
    if not path.is_file():
        raise DrafterError(f"{path}: not found (a drafter folder holds config.json and model.safetensors)")
    cfg = read_json(path)
    dc = cfg.get("dflash_config") or {}
    arch = cfg.get("architectures") or []
    if not set(arch) & set(ARCHITECTURES.values()):
        raise DrafterError(f"{path}: architectures {arch} names no DFlash drafter "
                           f"({', '.join(ARCHITECTURES.values())})")
    checks = (("num_target_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"),
              ("target_hidden_size", "hidden_size"), ("vocab_size", "vocab_size"))
    for key, info_key in checks:
        if key == "target_hidden_size" and key not in cfg:
            continue  # ours only; z-lab's drafters run at the target's hidden size
        want = getattr(info, info_key)
        if cfg.get(key) != want:
            raise DrafterError(f"{path}: {key} is {cfg.get(key)} but the target's {info_key} is {want} "
                               f"({info_file}): a drafter for another target")
    n, vocab = info.num_hidden_layers, info.vocab_size
    for i in dc.get("target_layer_ids", cfg.get("target_layer_ids")) or []:
        if not (isinstance(i, int) and 0 <= i < n):
            raise DrafterError(f"{path}: dflash_config.target_layer_ids has layer {i}, outside the target's {n} "
                               f"layers (0..{n - 1}, {info_file})")
    mask = dc.get("mask_token_id", cfg.get("mask_token_id"))
    if not (isinstance(mask, int) and 0 <= mask < vocab):
        raise DrafterError(f"{path}: dflash_config.mask_token_id is {mask}, outside the target's vocabulary "
                           f"(0..{vocab - 1}, {info_file})")


def drafter_identity(drafter_dir: Path) -> dict:
    """Which drafter the metrics describe: its folder's name and the first 12 hex digits of
    its weights' sha256 (`sha256sum model.safetensors`; several files: of their bytes in
    name order)."""
    files = sorted(drafter_dir.glob("*.safetensors"))
    if not files:
        raise DrafterError(f"{drafter_dir}: no *.safetensors weights")
    digest = hashlib.sha256()
    for file in files:
        with file.open("rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
    return {"folder": drafter_dir.resolve().name, "weights_sha256": digest.hexdigest()[:12]}


def _load(bp, model_dir: Path, info: TargetInfo, drafter_dir: Path, device, device_map: str | None):
    """The target, its tokenizer and the drafters to measure: the trained one ("dflash") and
    the baselines' ("untrained"), on the device the target's inputs go to."""
    target = load_model(model_dir, info.dtype, device, device_map)
    device = target.device  # with a device map, the first device: where inputs and the drafter go
    tok = load_tokenizer(model_dir)
    drafter = load_drafter(drafter_dir).to(device)
    drafters = {"dflash": drafter}
    if "untrained" in bp.baselines:
        drafters["untrained"] = build_drafter(drafter.config, bp.seed).to(device).eval()
    return target, tok, drafters


def _write(out: BenchmarkFiles, metrics: dict, rows, B: int) -> None:
    """Written before the mismatch check, so a failed run leaves what it measured."""
    write_parquet(out.results, rows)
    write_json(out.metrics, metrics)
    _plots(metrics, B, out.hist_plot, out.pos_plot)


def _summary(metrics: dict, written: str) -> str:
    parts = ""
    if "reasoning_end" in metrics:
        parts = f" (reasoning {_fmt(metrics['tau_reasoning'])}, answer {_fmt(metrics['tau_answer'])})"
    return (f"benchmark: tau {metrics['tau']:.3f}{parts}, speedup {metrics['speedup']:.2f}x over "
            f"{metrics['requests']} requests; {written}")


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _plots(metrics: dict, B: int, hist_plot: Path, pos_plot: Path) -> None:
    """One column per benchmark (and temperature): `dvc plots diff` overlays revisions."""
    series = {}
    for key, section in metrics.items():
        if key != "greedy" and not key.startswith("temperature_"):
            continue  # not a decoding section (the drafter's name, the device)
        for src, entry in section.items():
            if "dflash" in entry:
                series[src if key == "greedy" else f"{src}_{key}"] = entry["dflash"]
    names = sorted(series)
    write_tsv(hist_plot, ["tokens_per_step"] + names,
              [[k] + [series[n]["histogram"][k] for n in names] for k in range(1, B + 1)])
    write_tsv(pos_plot, ["position"] + names,
              [[k] + [series[n]["position_acceptance"][k - 1] for n in names] for k in range(1, B)])
