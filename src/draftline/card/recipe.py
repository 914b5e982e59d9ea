"""The card's training section: the recipe as params.yaml set it and what the run recorded."""

from __future__ import annotations

from .tables import fmt


def _loss(recipe: dict) -> str:
    loss = recipe.get("loss")
    kl = (f"KL to the target's distribution at temperature {recipe.get('kl_temperature')}, over its top "
          f"{recipe.get('kl_top_k') or 'all'} tokens")
    if loss == "kl":
        return kl
    if loss == "mix":
        return f"{1 - recipe.get('kl_weight', 0):.2f} x cross-entropy + {recipe.get('kl_weight')} x {kl}"
    return "cross-entropy on the target's tokens"


def training_section(recipe: dict, train: dict) -> list[str]:
    params = train.get("drafter_parameters")
    return [
        "## Training", "",
        "| | |", "| --- | --- |",
        f"| loss | {_loss(recipe)}; block position k weighs exp(-(k-1)/{recipe.get('gamma')}) |",
        f"| steps | {train.get('steps')} (max_steps {recipe.get('max_steps')}, epochs {recipe.get('epochs')}), "
        f"{recipe.get('batch_size')} sequences x {recipe.get('grad_accum')} accumulation per step, "
        f"{recipe.get('num_anchors')} answer + {recipe.get('prompt_anchors')} prompt blocks per sequence |",
        f"| optimizer | AdamW, lr {recipe.get('lr')}, warmup {recipe.get('warmup_ratio')} of the steps, cosine to "
        f"{recipe.get('min_lr_ratio')} x lr, weight decay {recipe.get('weight_decay')}, gradient clip "
        f"{recipe.get('grad_clip')} |",
        f"| initialisation | `{recipe.get('init')}`; seed {recipe.get('seed')} |",
        f"| run | {train.get('processes')} process(es), {train.get('precision')}, {fmt(train.get('seconds'), '.0f')} s; "
        f"{fmt(params / 1e6 if params else None, '.1f')} M trainable parameters; mask token "
        f"`{train.get('mask_token')}` (id {train.get('mask_token_id')}) |",
        f"| held out ({train.get('val_sequences')} sequences) | loss {fmt(train.get('val_loss'), '.3f')}, "
        f"first-position accuracy {fmt(train.get('val_acc_1'), '.3f')}, tau estimate "
        f"{fmt(train.get('val_tau_estimate'), '.3f')} |",
        ""]
