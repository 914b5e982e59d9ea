"""The materialised target folder: its bytes depend on the weights and tokenizer only."""

import json


def test_materialized_folder_carries_no_load_options(target_dir, tokenizer):
    # transformers records how the tokenizer was loaded (local_files_only follows
    # HF_HUB_OFFLINE); left in, the folder hash and every regeneration key would change
    # with the environment of the run.
    cfg = json.loads((target_dir / "tokenizer_config.json").read_text())
    assert not {"local_files_only", "is_local"} & set(cfg)
    assert cfg["eos_token"] == "<|im_end|>" == tokenizer.eos_token
