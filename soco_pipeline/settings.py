"""The one settings object (plain pydantic; the Dagster resource `SocoSettings` subclasses it), and the only
module that reads the environment: `ENVIRONMENT` per field, `VARIABLES` for the others."""

from __future__ import annotations

import hashlib
import os
from collections.abc import MutableMapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def default_storage_root() -> str:
    """The storage root: $SOCO_STORAGE or <project>/storage."""
    return os.environ.get("SOCO_STORAGE", str(PROJECT_ROOT / "storage"))


def join(root: str, *parts: str) -> str:
    """Join path parts onto an fsspec path."""
    return "/".join([str(root).rstrip("/"), *[p.strip("/") for p in parts]])


def is_remote(path: str | Path) -> bool:
    """Whether an fsspec path is a URL (an object store, memory://) rather than a local path."""
    return "://" in str(path)


# field -> (environment variable, how its text is read: str | int | csv)
ENVIRONMENT: dict[str, tuple[str, str]] = {
    "storage_root": ("SOCO_STORAGE", "str"),
    "backbones_dir": ("SOCO_BACKBONES_DIR", "str"),
    "lvlms_dir": ("SOCO_LVLMS_DIR", "str"),
    "dataset_size": ("SOCO_DATASET_SIZE", "str"),
    "seed": ("SOCO_SEED", "int"),
    "categories": ("SOCO_CATEGORIES", "csv"),
    "images_per_category": ("SOCO_IMAGES_PER_CATEGORY", "int"),
    # the task families' config files (a family without a field reads assets/<family>.yaml)
    "mmvm_config_path": ("SOCO_MMVM_CONFIG", "str"),
    "fgbmk_config_path": ("SOCO_FGBMK_CONFIG", "str"),
    "tpips_config_path": ("SOCO_TPIPS_CONFIG", "str"),
    # no Settings field: read by env_value alone (trust/eee_export.schema_dir, where the wheel is unpacked)
    "eee_dir": ("SOCO_EEE_DIR", "str"),
}


def env_value(field: str):
    """The environment's value for a settings field, parsed by its kind (None when unset or empty)."""
    name, kind = ENVIRONMENT[field]
    text = os.environ.get(name)
    if not text:
        return None
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{name}={text!r} is not an integer") from None
    if kind == "csv":
        return [c for c in text.split(",") if c] or None
    return text


# Every other variable the package reads, through `variable`; docs/settings.md lists the SOCO_* ones.
VARIABLES = frozenset(
    """
    SOCO_REEVALUATE_CRON SOCO_SENSOR_INTERVAL_S SOCO_PROFILE SOCO_DEBUG SOCO_DEMO_LVLM SOCO_DEMO_FAMILIES
    SOCO_CELERY_BROKER SOCO_CELERY_BACKEND SOCO_CELERY_VISIBILITY_TIMEOUT SOCO_LOST_WORKER_GRACE_S
    SOCO_LAUNCHER SOCO_LAUNCH_DIR SOCO_SLURM_OPTIONS SOCO_SLURM_QUEUE_DEADLINE_S
    SOCO_K8S_IMAGE SOCO_K8S_NAMESPACE SOCO_K8S_GPUS SOCO_K8S_VOLUME_CLAIM
    SOCO_LOOPBACK_COUNTS SOCO_PAUSE_DIR SOCO_PAUSE_AT SOCO_REGRESSION_WEBHOOK
    SOCO_DETERMINISTIC_CPU SOCO_NATIVE SOCO_NATIVE_CACHE XDG_CACHE_HOME CC
    DAGSTER_HOME HF_HUB_CACHE HF_HOME HF_HUB_OFFLINE
    """.split()
)


def variable(name: str, default: str | None = "") -> str:
    """A variable of VARIABLES: its text, else `default` (None: it must be set, else KeyError); an undeclared
    name is a KeyError (declare it in VARIABLES and docs/settings.md)."""
    if name not in VARIABLES:
        raise KeyError(f"{name} is not declared in settings.VARIABLES (nor in docs/settings.md)")
    return os.environ[name] if default is None else os.environ.get(name, default)


def environment() -> MutableMapping[str, str]:
    """The whole process environment: a child process's (`{**environment(), ...}`), a payload job's forwarded
    variables, the defaults cli/project.py sets in place, the key an LVLM spec names (else use `variable`)."""
    return os.environ


def _from_env(field: str, default=None):
    def factory():
        value = env_value(field)
        return default() if value is None and callable(default) else (default if value is None else value)

    return factory


class Settings(BaseModel):
    """Paths, data source and evaluation choices of a run (defaults: the embedded demo data set)."""

    model_config = ConfigDict(frozen=True)

    storage_root: str = Field(
        default_factory=_from_env("storage_root", default_storage_root),
        description="fsspec root for all outputs",
    )
    backbones_dir: str = Field(
        default_factory=_from_env("backbones_dir", str(PROJECT_ROOT / "assets" / "backbones")),
        description="folder of backbone spec files",
    )
    lvlms_dir: str = Field(
        default_factory=_from_env("lvlms_dir", str(PROJECT_ROOT / "assets" / "lvlms")),
        description="folder of LVLM spec files",
    )
    lvlm_protocol_path: str | None = Field(
        default=None, description="LVLM item protocol YAML (default: assets/lvlm_protocol.yaml)"
    )
    source: str = Field(
        default="embedded",
        description="embedded (generate the default data set) | raw (ImageNet3D/Animal3D roots) | soco_release",
    )
    dataset_size: str = Field(
        default_factory=_from_env("dataset_size", "demo"), description="embedded data set size: demo | full"
    )
    seed: int = Field(default_factory=_from_env("seed", 0), description="seed of every random choice")
    imagenet3d_root: str | None = None
    animal3d_root: str | None = None
    clicks_path: str | None = None
    soco_release_root: str | None = None
    categories: list[str] | None = Field(
        default_factory=_from_env("categories"),
        description="restrict to these categories (and generate only these)",
    )
    images_per_category: int | None = Field(
        default_factory=_from_env("images_per_category"),
        description="kept images per category of the embedded set",
    )
    intra_pairs_per_category: int = 200
    cross_pairs_per_category: int = 200
    evaluate_all_pairs: bool = False
    device: str = Field(default="auto", description="auto | cpu | cuda")
    protocol_path: str | None = Field(
        default=None, description="evaluation protocol YAML (default: assets/protocol.yaml)"
    )
    mmvm_config_path: str | None = Field(
        default_factory=_from_env("mmvm_config_path"),
        description="MMVM family config (default: assets/mmvm.yaml)",
    )
    fgbmk_config_path: str | None = Field(
        default_factory=_from_env("fgbmk_config_path"),
        description="FG-BMK family config (default: assets/fgbmk.yaml)",
    )
    tpips_config_path: str | None = Field(
        default_factory=_from_env("tpips_config_path"),
        description="TPIPS family config (default: assets/tpips.yaml)",
    )

    def definition_overrides(self) -> dict:
        """The settings a command passes to build_definitions (paths, data size, seed, categories), so that
        its runs read the environment as the command read it, not as it was at import time."""
        return dict(
            storage_root=self.storage_root,
            backbones_dir=self.backbones_dir,
            lvlms_dir=self.lvlms_dir,
            dataset_size=self.dataset_size,
            seed=self.seed,
            images_per_category=self.images_per_category,
            categories=list(self.categories) if self.categories else None,
        )

    def family_config_path(self, family: str) -> str:
        """A family's config file: its `<family>_config_path` field when set, else assets/<family>.yaml."""
        return getattr(self, f"{family}_config_path", None) or str(PROJECT_ROOT / "assets" / f"{family}.yaml")

    @property
    def tables_root(self) -> str:
        """Parquet tables, one file per asset (per partition for partitioned assets)."""
        return join(self.storage_root, "tables")

    @property
    def features_root(self) -> str:
        """The per-backbone feature tensor cache."""
        return join(self.storage_root, "features")

    @property
    def embedded_root(self) -> str:
        """The generated default data set for the configured size, categories and seed."""
        name = f"{self.dataset_size}-seed{self.seed}"
        if self.categories:
            name += "-" + hashlib.sha256(",".join(self.categories).encode()).hexdigest()[:8]
        if self.images_per_category:
            name += f"-n{self.images_per_category}"
        return join(self.storage_root, "embedded", name)

    @property
    def lvlm_root(self) -> str:
        """LVLM marked images (`images/`) and the answer cache (`cache/<model>/`)."""
        return join(self.storage_root, "lvlm")

    @property
    def lvlm_images_root(self) -> str:
        """The marked source/target images of the LVLM items."""
        return join(self.lvlm_root, "images")

    @property
    def lvlm_cache_root(self) -> str:
        """The LVLM answer cache (one folder per model)."""
        return join(self.lvlm_root, "cache")

    @property
    def figures_root(self) -> str:
        """Figures written beside the tables (the correlation study's PNG/SVG)."""
        return join(self.storage_root, "figures")

    @property
    def records_root(self) -> str:
        """The results records (JSON): `<backbone>.json`, and `lvlm/<model>.json`."""
        return join(self.storage_root, "results", "records")

    @property
    def report_root(self) -> str:
        """The static results page (`index.html`, its images) and the prediction panels (`panels/<backbone>/`)."""
        return join(self.storage_root, "report")

    def task_root(self, family: str, *parts: str) -> str:
        """A task family's files beside its tables: `<storage>/<family>/<parts...>`."""
        return join(self.storage_root, family, *parts)

    @property
    def duckdb_path(self) -> str:
        """The DuckDB file of views of the result tables; ":memory:" for a URL root (views on a bucket)."""
        if is_remote(self.storage_root):
            return ":memory:"
        return str(Path(self.storage_root) / "results.duckdb")
