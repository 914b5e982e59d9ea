"""Stage `target`: materialise the target model and record what later stages need.

    python -m stages.target      # writes data/target/model/ and data/target/info.json
"""

from pathlib import Path

from draftline import target as tgt

from ._run import main

MODEL = Path("data/target/model")
INFO = Path("data/target/info.json")


def run(params) -> None:
    prov = tgt.materialize(params.target, MODEL)
    info = tgt.describe(MODEL, params.target, params.drafter, prov)
    tgt.write_info(INFO, info)
    print(f"target: {info['architecture']} with {info['num_hidden_layers']} layers, hidden {info['hidden_size']}, "
          f"drafter reads layers {info['target_layer_ids']}")


if __name__ == "__main__":
    main(run)
