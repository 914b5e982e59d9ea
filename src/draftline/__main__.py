"""`python -m draftline` (and `torchrun ... -m draftline train`): the `draftline` command."""

from .cli import main

main(prog_name="draftline")
