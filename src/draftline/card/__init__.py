"""The drafter's model card (README.md beside its weights), ready to publish on a hub.

The `card` stage writes it from what the earlier stages measured and recorded, never from
what they were meant to do: the target's provenance and license (info.json), the prompts
trained on and those held out (download and mix metrics, `download.sources`), the answers
(regenerate metrics), the training recipe and its outcome (`train`, train metrics), the
acceptance (benchmark metrics) and the serve commands for `card.repo`, with the engine
releases whose own code was checked to read the export as trained (tests/engines).
"""

from .render import render
from .serving import ENGINES_CHECKED

__all__ = ["ENGINES_CHECKED", "render"]
