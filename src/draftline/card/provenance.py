"""The card's target section: which weights the drafter was trained on, and their license."""

from __future__ import annotations


def target_ref(info: dict) -> str:
    """How the serve commands name the target: its hub id, else the folder it came from."""
    prov = info.get("provenance", {})
    return prov.get("base_model") or prov.get("source", "<target>")


def license_of(info: dict, override: str | None) -> tuple[dict | None, str]:
    """The card's license keys (license, license_name, license_link) and where they come
    from. A drafter trained on a model's outputs is published under that model's terms."""
    if override:
        return {"license": override}, "`card.license` in params.yaml"
    prov = info.get("provenance", {})
    found = prov.get("license")
    if not found:
        return None, ""
    if prov.get("source") == "embedded":
        return found, f"as the package `{prov.get('package')}` that ships the GGUF declares it"
    return found, "as the target's own model card (README.md front matter) states it"


def _weights(info: dict) -> str:
    prov, dtype = info.get("provenance", {}), info.get("dtype")
    if prov.get("source") == "embedded":
        return (f"converted by draftline from `{prov.get('gguf_file')}` (Python package `{prov.get('package')}`, "
                f"sha256 `{prov.get('gguf_sha256')}`), dequantized to {dtype}")
    q = info.get("quantization")
    quant = f", stored as {q.get('method')} ({q.get('format')}) and dequantized" if q else ""
    if prov.get("base_model"):
        return f"the hub's `{prov['base_model']}` at revision `{prov.get('revision')}`, loaded in {dtype}{quant}"
    return f"the local folder `{prov.get('source')}` (not a hub id: no `base_model`), loaded in {dtype}{quant}"


def target_section(info: dict, license_override: str | None) -> list[str]:
    lic, where = license_of(info, license_override)
    if lic:
        name = f" ({lic['license_name']})" if lic.get("license_name") else ""
        link = f", {lic['license_link']}" if lic.get("license_link") else ""
        lic_cell = f"`{lic['license']}`{name}{link}, {where}"
    else:
        lic_cell = "not stated by the target's files: set `card.license` before publishing"
    lines = ["## Target", "", "| | |", "| --- | --- |",
             f"| model | `{target_ref(info)}` ({info.get('architecture')}, {info.get('num_hidden_layers')} layers, "
             f"hidden {info.get('hidden_size')}) |",
             f"| weights trained on | {_weights(info)} |",
             f"| license | {lic_cell} |", ""]
    if info.get("provenance", {}).get("source") == "embedded":
        lines += ["The hidden states and answers the drafter learnt from come from that Q4_1 conversion; the serve "
                  "commands below load the hub's unquantized weights, so acceptance there can differ from the "
                  "table above.", ""]
    return lines
