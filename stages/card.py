"""Stage `card`: the drafter's model card (README.md beside its weights), ready to publish.

    draftline card --drafter DIR --info FILE --benchmark FILE ... --out FILE

A stage of its own, after the benchmark: setting `card.repo` (the drafter's hub id) before
publishing reruns only this, not the decoding.
"""

from __future__ import annotations

import click

from draftline.card.inputs import CardFiles
from draftline.card.render import write_card
from draftline.command import path_option, run_stage
from draftline.config.card import CardParams
from draftline.config.download import DownloadParams
from draftline.config.train import TrainParams
from draftline.config.view import Declared

PARAMS = Declared("card", ("card", "train", "download.sources"), (CardParams, TrainParams, DownloadParams))


@click.command("card")
@path_option("--drafter", "drafter", "Reads: the drafter's config.json.")
@path_option("--info", "target_info", "Reads: the target's description (provenance, license).")
@path_option("--benchmark", "benchmark_metrics", "Reads: the benchmark's metrics.")
@path_option("--download", "download_metrics", "Reads: the prompts read per source.")
@path_option("--mix", "mix_metrics", "Reads: the prompts kept per source, and those decontaminated.")
@path_option("--regenerate", "regenerate_metrics", "Reads: the answers generated.")
@path_option("--train", "train_metrics", "Reads: what the training run recorded.")
@path_option("--out", "drafter_card", "Writes: the model card (README.md beside the weights).")
@click.pass_obj
def command(settings, drafter, info, benchmark, download, mix, regenerate, train, out):
    """Write the drafter's model card (README.md beside it).

    Params: `card`, `train`, `download.sources`. The target and its license, the tau table, the
    data (which benchmark prompts were trained on), the training recipe, and vLLM, SGLang and
    z-lab serve commands for `card.repo`."""
    files = CardFiles(drafter, info, benchmark, download, mix, regenerate, train)

    def stage(params) -> None:
        missing = files.missing()
        if missing is not None:
            raise FileNotFoundError(f"{missing}: not found (run `dvc repro benchmark` first)")
        write_card(files.read(params), out)
        print(f"card: {out}")

    run_stage(settings, PARAMS.load, stage, torch_threads=False)
