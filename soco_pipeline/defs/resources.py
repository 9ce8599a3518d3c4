"""Resources: where things live and which data source and settings a run uses."""

import dagster as dg
from pydantic import Field

from soco_pipeline.settings import Settings

_DEFAULTS = Settings()


class SocoSettings(dg.ConfigurableResource):
    """Storage root, data source and evaluation settings (defaults: the embedded demo data set)."""

    storage_root: str = Field(default=_DEFAULTS.storage_root, description="fsspec root for all outputs")
    backbones_dir: str = Field(default=_DEFAULTS.backbones_dir, description="folder of backbone spec files")
    lvlms_dir: str = Field(default=_DEFAULTS.lvlms_dir, description="folder of LVLM spec files")
    lvlm_protocol_path: str | None = Field(
        default=None, description="LVLM item protocol YAML (default: assets/lvlm_protocol.yaml)"
    )
    source: str = Field(
        default="embedded",
        description="embedded (generate the default data set) | raw (ImageNet3D/Animal3D roots) | soco_release",
    )
    dataset_size: str = Field(
        default=_DEFAULTS.dataset_size, description="embedded data set size: demo | full"
    )
    seed: int = Field(default=_DEFAULTS.seed, description="seed of every random choice")
    imagenet3d_root: str | None = None
    animal3d_root: str | None = None
    clicks_path: str | None = None
    soco_release_root: str | None = None
    categories: list[str] | None = Field(
        default=list(_DEFAULTS.categories) if _DEFAULTS.categories else None,
        description="restrict to these categories (and generate only these)",
    )
    images_per_category: int | None = Field(
        default=_DEFAULTS.images_per_category, description="kept images per category of the embedded set"
    )
    intra_pairs_per_category: int = 200
    cross_pairs_per_category: int = 200
    evaluate_all_pairs: bool = False
    device: str = Field(default="auto", description="auto | cpu | cuda")
    protocol_path: str | None = Field(
        default=None, description="evaluation protocol YAML (default: assets/protocol.yaml)"
    )
    mmvm_config_path: str | None = Field(default=None, description="MMVM family config (default: assets/mmvm.yaml)")

    def settings(self) -> Settings:
        """The plain-Python settings object the core functions take."""
        return Settings(
            storage_root=self.storage_root,
            backbones_dir=self.backbones_dir,
            lvlms_dir=self.lvlms_dir,
            dataset_size=self.dataset_size,
            seed=self.seed,
            categories=tuple(self.categories) if self.categories else None,
            images_per_category=self.images_per_category,
        )
