"""The pipeline's stages, one module per DVC stage, in the order dvc.yaml runs them.

Each module holds the stage's click command and path options, the params keys it reads
(`PARAMS`, declared once and held equal to its `params:` in dvc.yaml by
tests/unit/test_params_view.py), and the call into the library under src/draftline. Only
the `draftline` entry point (draftline/cli.py) imports these modules, one at a time.
"""
