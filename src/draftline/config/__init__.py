"""The typed model of params.yaml, one module per section, and its one set of defaults.

A stage imports only the sections it reads (its dvc.yaml code deps then hold only those
modules, so a change to one section's model reruns only the stages that read it) and
receives a view of the keys it declares (view.py). The check stage validates the whole
file (params.py). A default here is the value params.yaml sets (tests/unit/test_config.py
holds them together); the reasons for each value are in params.yaml's comments and
bench/RESULTS.md's decisions table. Nothing here imports the rest of the project.

This file imports nothing: importing one section must not import the others.
"""
