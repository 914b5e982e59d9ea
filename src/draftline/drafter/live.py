"""Training curves while the stage runs, through DVCLive.

The main process logs every optimizer step (loss, learning rate, gradient norm, accuracy
per block position, steps/s and tokens/s) and every held-out evaluation into the --live
folder: `metrics.json` holds the latest values, so `dvc exp show` and `dvc metrics show`
follow a running training; `plots/metrics/` holds one TSV per curve, so `dvc plots show`
draws it at any moment. A resumed run rebuilds the folder from its checkpoint's log before
going on, so every step appears once, as in an uninterrupted run (a killed run had logged
steps past its last checkpoint, which the resumed run computes again).

DVCLive is told not to write dvc.yaml nor save experiments itself: the train stage declares
these files in the project's dvc.yaml, and `dvc exp run` saves the experiment.
"""

from __future__ import annotations

import logging
from pathlib import Path


class LiveLog:
    """LiveLog(folder) (None: log nothing, e.g. on other ranks); .step(row), .eval(step, ev)."""

    def __init__(self, folder: Path | None):
        self.live = None
        self._last: tuple[int, float] | None = None
        if folder is None:
            return
        from dvclive import Live

        # DVCLive announces the experiment it logs to at INFO: noise in the stage's output.
        logging.getLogger("dvclive").setLevel(logging.WARNING)
        self.live = Live(dir=str(folder), resume=False, report=None, save_dvc_exp=False, dvcyaml=None)

    def replay(self, steps: list[dict], evals: list[dict]) -> None:
        """A resumed run's history, from its checkpoint."""
        at = {e["step"]: e for e in evals}
        for row in steps:
            self.step(row, summary=False)
            if row["step"] in at:
                self.eval(row["step"], at[row["step"]], summary=False)
        if self.live is not None and steps:
            self.live.make_summary()

    def step(self, row: dict, summary: bool = True) -> None:
        if self.live is None:
            return
        live = self.live
        live.step = row["step"]
        for key in ("loss", "lr", "grad_norm", "padding"):
            live.log_metric(f"train/{key}", row[key])
        for key in sorted(k for k in row if k.startswith("acc_")):
            live.log_metric(f"train/{key}", row[key])
        if self._last is not None and row["seconds"] > self._last[1]:
            dt = row["seconds"] - self._last[1]
            live.log_metric("train/steps_per_second", round((row["step"] - self._last[0]) / dt, 4))
            live.log_metric("train/tokens_per_second", round(row.get("tokens", 0) / dt, 1))
        self._last = (row["step"], row["seconds"])
        if summary:
            live.make_summary()

    def eval(self, step: int, ev: dict, summary: bool = True) -> None:
        if self.live is None:
            return
        self.live.step = step
        self.live.log_metric("eval/loss", ev["loss"])
        self.live.log_metric("eval/acc_1", ev["acc_by_pos"][0])
        self.live.log_metric("eval/tau_estimate", ev["tau_estimate"])
        if summary:
            self.live.make_summary()

    def close(self) -> None:
        # Not Live.end(): inside `dvc exp run` it would git-add files of its own; the stage's
        # outputs are DVC's to track.
        if self.live is not None:
            self.live.make_summary()
