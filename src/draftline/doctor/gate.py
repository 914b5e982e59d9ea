"""The doctor's run: rows -> features -> overfit -> export -> served decode -> verdict.

    draftline doctor            # the embedded default: one to two minutes on a 2-core CPU
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..drafter.init_target import init_from_target
from ..drafter.model import build_drafter, drafter_config, load_drafter, mask_token_id, save_drafter
from ..target.info import TargetInfo
from ..target.load import load_config, load_model, load_tokenizer
from ..target.weights import load_io_weights
from .diagnose import Contract, candidate_fixes, diagnose, feature_error, layers_stored
from .overfit import Overfit, extract, overfit
from .probe import Probe, probe
from .rows import prompts, with_continuations

# The same states read back differ by their storage's rounding: 0.2% of their RMS in bf16
# (8 bits of mantissa), 0.5% in FP8 e4m3 (4 bits; measured on the embedded target, up to
# about 3% on states with no dominant dimensions); another layer's or another target's by
# tens of percent.
SAME_STATES = {"bfloat16": 0.02, "float8_e4m3fn": 0.06}


class DoctorFailure(RuntimeError):
    """The one line naming the cause; `lines`: what was measured, printed before it."""

    def __init__(self, message: str, lines: list[str]):
        super().__init__(message)
        self.lines = lines


@dataclass(frozen=True)
class Options:
    rows: int = 2
    new_tokens: int | None = None  # per row; None: 8 blocks
    max_prompt_tokens: int = 256
    max_steps: int = 400
    lr: float = 1e-3
    serve_block_size: int | None = None  # the engine's: vLLM num_speculative_tokens + 1; None: the export's
    keep: Path | None = None  # where the export is kept (else a temporary folder)


@dataclass
class Report:
    rows: list[str]
    tokens: int
    fit: Overfit
    feature_error: float
    trained: Contract
    served: Contract
    probe: Probe
    state_dtype: str = "bfloat16"
    lines: list[str] = field(default_factory=list)


def run(params, model_dir: Path, info_file: Path, tokens: Path, opts: Options, device) -> Report:
    """A Report when every block of every row is fully accepted by both decoders, which
    agree; else DoctorFailure naming the likely cause."""
    dp, tp = params.drafter, params.train
    info = TargetInfo.load(info_file)
    target = load_model(model_dir, info.dtype, device)
    tok = load_tokenizer(model_dir)
    mask_id = mask_token_id(tok, dp.mask_token, info.vocab_size)
    rows = with_continuations(target, prompts(tokens, opts.rows, opts.max_prompt_tokens),
                              opts.new_tokens or 8 * dp.block_size)
    layer_ids = info.target_layer_ids
    with tempfile.TemporaryDirectory(prefix="draftline-doctor-") as work:
        work = Path(work)
        pad = tok.pad_token_id if tok.pad_token_id is not None else info.eos_token_ids[0]
        seqs = extract(target, [r.as_tokens() for r in rows], layer_ids, work / "hidden", pad,
                       params.extract.state_dtype)
        config = drafter_config(load_config(model_dir), dp, layer_ids, mask_id)
        drafter = build_drafter(config, tp.seed)
        if tp.init == "target":
            init_from_target(drafter, model_dir, info)
        embed_w, head_w = load_io_weights(model_dir)
        fit = overfit(drafter, seqs, embed_w, head_w, dp, tp, mask_id, device, opts.lr, opts.max_steps)
        export = opts.keep or work / "export"
        save_drafter(drafter.to("cpu"), export)
        served = load_drafter(export).to(target.device)  # what an engine reads back
        error = feature_error(target, seqs, served.target_layer_ids)
        stored_as = layers_stored(target, seqs, served.target_layer_ids, info.num_hidden_layers, error)
    trained = Contract(list(layer_ids), mask_id, dp.block_size, dict(config.rope_parameters or {}))
    served_contract = Contract.served(served, opts.serve_block_size or served.block_size)
    result = probe(served, target, rows, served_contract.block_size)
    report = Report([r.id for r in rows], sum(len(r.continuation) for r in rows), fit, error, trained,
                    served_contract, result, params.extract.state_dtype)
    report.lines = summary(report)
    cause = _cause(report, served, target, rows, info.num_hidden_layers, stored_as)
    if cause is None:
        return report
    raise DoctorFailure(cause, report.lines)


def summary(r: Report) -> list[str]:
    p = r.probe
    steps = sum(len(d.acceptance_lengths) for d in p.ours)
    out = [f"rows {', '.join(r.rows)}: {r.tokens} greedy tokens of the target to draft",
           f"overfit: {r.fit.steps} steps, loss {r.fit.loss:.4f}, accuracy by position "
           + " ".join(f"{a:.3f}" for a in r.fit.accuracy),
           f"features: the states trained on ({r.state_dtype}) vs what the decoder reads, RMS difference "
           f"{r.feature_error:.4f} of theirs",
           f"served: layers {r.served.layer_ids}, mask id {r.served.mask_id}, block size {r.served.block_size}",
           f"decode: tau {p.tau():.3f}, {steps - len(p.short_blocks())}/{steps} verify steps fully accepted"]
    if p.zlab is not None:
        agree = "agree" if not p.disagreements() else f"disagree on rows {p.disagreements()}"
        out.append(f"z-lab dflash_generate: {len(p.short_blocks(p.zlab))} short blocks; the decoders {agree}")
    return out


def _cause(r: Report, served, target, rows, num_layers: int, stored_as: list[int] | None) -> str | None:
    """None when the drafter is served as trained and every block is accepted; else the
    line naming the likely cause. A mismatch is named even where these rows happen to be
    accepted anyway (a looping continuation needs no features): real data would pay for it."""
    p = r.probe
    mismatches = list(r.trained.differences(r.served).values())
    if stored_as is not None:
        mismatches.insert(0, f"target layer ids shifted by one between extraction and decoding: the states trained "
                             f"on are layers {stored_as}'s (as the decoder numbers them), the export reads "
                             f"{r.served.layer_ids}")
    elif r.feature_error > SAME_STATES[r.state_dtype]:
        mismatches.append(f"the states trained on are not this target's at layers {r.served.layer_ids} (RMS "
                          f"difference {r.feature_error:.3f} of theirs): features of another target, dtype or "
                          "template")
    if p.fully_accepted:
        if mismatches:
            return f"doctor: every block accepted on these rows, but served unlike trained; cause: {mismatches[0]}"
        if p.disagreements():
            return (f"doctor: every block accepted, but the benchmark decoder and z-lab's dflash_generate disagree "
                    f"on rows {p.disagreements()}: a decoder difference, not the drafter's")
        return None
    first = p.short_blocks()[0] if p.short_blocks() else None
    where = (f"doctor: {len(p.short_blocks())} verify steps not fully accepted"
             + (f" (row {r.rows[first[0]]}, step {first[1]}: {first[2]} of {first[3]} tokens)" if first else "")
             + f", tau {p.tau():.3f}")
    if not r.fit.done:
        return (f"{where}; the drafter did not overfit in {r.fit.steps} steps (accuracy by position "
                f"{min(r.fit.accuracy):.3f} at worst): raise --max-steps or --lr")

    def accepts(drafter, block_size: int) -> bool:
        return probe(drafter, target, rows, block_size, with_zlab=False).fully_accepted

    fix = diagnose(candidate_fixes(served, r.trained, r.served, num_layers), accepts)
    if fix is not None:
        return f"{where}; cause: {fix.cause} (decoding with the trained value accepts every block)"
    return f"{where}; cause: {mismatches[0] if mismatches else 'unknown: no single setting restores it'}"
