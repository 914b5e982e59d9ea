"""The whole of params.yaml in one model: what the check stage validates, and the
constraints across sections that no single stage's view can see.

    from draftline.config.params import load_params
    load_params("params.yaml").train.lr
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError, model_validator

from .base import ParamsError, Section, format_error, read_params_file
from .benchmark import BenchmarkParams
from .card import CardParams
from .chat import ChatParams
from .download import DownloadParams
from .drafter import DrafterParams
from .extract import ExtractParams
from .mix import MixParams
from .regenerate import RegenerateParams
from .target import TargetParams
from .tokenize import TokenizeParams
from .train import TrainParams

SECTIONS = (TargetParams, DrafterParams, DownloadParams, MixParams, ChatParams, RegenerateParams, TokenizeParams,
            ExtractParams, TrainParams, BenchmarkParams, CardParams)


class Params(Section):
    target: TargetParams = TargetParams()
    drafter: DrafterParams = DrafterParams()
    download: DownloadParams
    mix: MixParams
    chat: ChatParams = ChatParams()
    regenerate: RegenerateParams = RegenerateParams()
    tokenize: TokenizeParams = TokenizeParams()
    extract: ExtractParams = ExtractParams()
    train: TrainParams = TrainParams()
    benchmark: BenchmarkParams = BenchmarkParams()
    card: CardParams = CardParams()

    @model_validator(mode="after")
    def _teacher_stored(self):
        # Across two stages' keys, so checked where the whole file is (the check stage).
        t, e = self.train, self.extract
        if t.features == "online":  # the target computes the teacher as it trains
            return self
        if t.loss != "ce" and e.teacher == "none":
            raise ValueError(f"train.loss: {t.loss} needs a stored teacher, but extract.teacher is none")
        if t.loss != "ce" and e.teacher == "top_k" and (t.kl_top_k is None or t.kl_top_k > e.top_k):
            raise ValueError(f"train.kl_top_k: {t.kl_top_k} needs the teacher's top {t.kl_top_k}, but extract stores "
                             f"its top {e.top_k} (extract.top_k)")
        return self


def parse_params(data: object, source: str = "params.yaml") -> Params:
    if not isinstance(data, dict):
        raise ParamsError(f"{source}: top level must be a mapping")
    try:
        return Params.model_validate(data)
    except ValidationError as err:
        raise ParamsError(format_error(err, source)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    return parse_params(read_params_file(path), str(path))
