"""Which summary rows are models (ranked) and which are checks, `ceiling` or `control` (never ranked): a
family's `Headline` marks its own, the spec files the rest (`spec_roles`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from soco_pipeline.lvlm.specs import LOOPBACK_HOSTS

ROLES = ("model", "control", "ceiling")
CEILING_KINDS = frozenset({"oracle"})  # backbone kinds that read the answer (the SOCO part maps)
LOOPBACK_ROLES = {"oracle": "ceiling", "random": "control"}  # lvlm/loopback.py's two answerers
ROLE_NOTE = (
    "(ceiling): an oracle that reads the answer, the top a score can reach; (control): a baseline, no model; "
    "neither is ranked, rows below the models"
)


def _yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}  # the spec scan reports a broken file; here it is just not a check
    return data if isinstance(data, dict) else {}


def lvlm_role(spec: dict) -> str:
    """`ceiling` / `control` for the loopback oracle / random answerer, else `model`."""
    model = str(spec.get("model", ""))
    url = str(spec.get("base_url", ""))
    local = url.startswith("@") or (urlparse(url).hostname or "") in LOOPBACK_HOSTS
    return LOOPBACK_ROLES.get(model, "model") if spec.get("backend") == "openai" and local else "model"


def demo_lvlm_specs(storage_root: str | Path) -> Path:
    """Where `make demo` writes the loopback answerers' specs (cli/demo_lvlm.py), outside the LVLM spec folder."""
    return Path(storage_root) / "lvlm" / "demo_specs"


def spec_roles(
    backbones_dir: str | Path | None, lvlms_dir: str | Path | None, storage_root: str | Path | None = None
) -> dict[str, str]:
    """{spec name: role} of the spec files that are checks (oracles, loopback answerers)."""
    out: dict[str, str] = {}
    if backbones_dir and Path(backbones_dir).is_dir():
        for path in sorted(Path(backbones_dir).glob("*.yaml")):
            if _yaml(path).get("kind") in CEILING_KINDS:
                out[path.stem] = "ceiling"
    folders = [lvlms_dir, demo_lvlm_specs(storage_root) if storage_root else None]
    for folder in [Path(f) for f in folders if f and Path(f).is_dir()]:
        for path in sorted(folder.glob("*.yaml")):
            role = lvlm_role(_yaml(path))
            if role != "model":
                out[path.stem] = role
    return out
