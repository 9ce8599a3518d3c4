"""LVLM specs: one YAML file per model in assets/lvlms/ (docs/config.md, "LVLM specs")."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union
from urllib.parse import urlparse

from pydantic import Field, TypeAdapter, field_validator

from soco_pipeline.backbones.spec_files import scan_folder
from soco_pipeline.config import ConfigModel, read_yaml, validate_doc
from soco_pipeline.storage import spec_name_problem

BACKENDS = ("openai", "transformers")
# hosts of a server on this machine (a loopback port names no model: lvlm/specs.spec_version, trust/roles)
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SETTINGS = ("vis", "vis_desc", "desc")

# Bump when the request building or parsing changes what a spec's answers are.
LVLM_CODE_VERSION = "1"

Positive = Annotated[float, Field(gt=0)]
PositiveInt = Annotated[int, Field(gt=0)]


class LvlmSpecError(ValueError):
    """An LVLM spec is malformed; the message names the file, the field and the fix."""


class LvlmFields(ConfigModel):
    """The fields every LVLM spec has (a backend's model adds its own)."""

    name: str | None = None
    backend: str
    model: Annotated[str, Field(min_length=1)]
    description: str = ""
    settings: Annotated[tuple[Literal["vis", "vis_desc", "desc"], ...], Field(min_length=1, strict=False)] = (
        SETTINGS
    )
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    max_tokens: PositiveInt = 512
    seed: int = 0
    # The share of failed rows a run tolerates before it stops with the first error (lvlm/run.py).
    max_error_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.1

    @field_validator("settings")
    @classmethod
    def _distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError(f"list distinct values of {list(SETTINGS)}, got {list(v)}")
        return v


class OpenaiFields(LvlmFields):
    """backend: openai, an OpenAI-compatible chat completions server."""

    backend: Literal["openai"]
    base_url: str
    api_key_env: str | None = None
    timeout: Positive = 120.0
    max_concurrency: PositiveInt = 8
    retries: Annotated[int, Field(ge=0)] = 5
    backoff_base: float = 0.5
    backoff_max: Positive = 30.0
    max_consecutive_failures: PositiveInt = 25

    @field_validator("base_url")
    @classmethod
    def _plain_url(cls, url: str) -> str:
        if not re.match(r"https?://", url):
            raise ValueError(f"backend 'openai' needs 'base_url: http(s)://host[:port]', got {url!r}")
        if "@" in url.split("://", 1)[1].split("/", 1)[0]:
            raise ValueError(
                "must not hold credentials (user:password@); put the key in an environment "
                "variable and name it in 'api_key_env'"
            )
        return url.rstrip("/").removesuffix("/v1")

    @field_validator("api_key_env")
    @classmethod
    def _a_variable_name(cls, env: str | None) -> str | None:
        # The value is not echoed: a user who put the key itself here must not see it in a log.
        if env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env):
            raise ValueError(
                "must be the NAME of an environment variable (e.g. OPENAI_API_KEY), never the key"
            )
        return env


class TransformersFields(LvlmFields):
    """backend: transformers, a local model in-process."""

    backend: Literal["transformers"]
    device: str = "auto"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    batch_size: PositiveInt = 4


LVLM_SPEC = TypeAdapter(Annotated[Union[OpenaiFields, TransformersFields], Field(discriminator="backend")])  # noqa: UP007


@dataclass(frozen=True)
class LvlmSpec:
    """A validated LVLM spec; fields of the other backend keep their defaults."""

    name: str
    backend: str
    model: str
    description: str = ""
    settings: tuple[str, ...] = SETTINGS
    temperature: float = 0.0
    max_tokens: int = 512
    seed: int = 0
    base_url: str | None = None
    api_key_env: str | None = None
    timeout: float = 120.0
    max_concurrency: int = 8
    retries: int = 5
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    max_consecutive_failures: int = 25
    max_error_rate: float = 0.1
    device: str = "auto"
    dtype: str = "auto"
    batch_size: int = 4
    source: str = ""

    def generation(self) -> dict[str, Any]:
        """What decides an answer besides the request content: backend, model, sampling settings."""
        return {
            "backend": self.backend,
            "model": self.model,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "code": LVLM_CODE_VERSION,
        }

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec as a plain dict (without the source path)."""
        d = asdict(self)
        d.pop("source")
        d["settings"] = list(self.settings)
        return d


def parse_spec(doc: Any, name: str, source: str = "<spec>") -> LvlmSpec:
    """Validate a spec document (the parsed YAML) with its backend's model and return the LvlmSpec."""
    src = source
    if not isinstance(doc, dict):
        raise LvlmSpecError(f"{src}: expected a mapping of fields (backend, model, ...)")
    if problem := spec_name_problem(name, "model"):
        raise LvlmSpecError(f"{src}: {problem}")
    backend = doc.get("backend")
    if backend not in BACKENDS:
        raise LvlmSpecError(f"{src}: field 'backend' is {backend!r}; it must be one of {list(BACKENDS)}")
    doc = {k: v for k, v in doc.items() if v is not None}  # an empty field means its default
    allowed = (OpenaiFields if backend == "openai" else TransformersFields).model_fields
    fields = validate_doc(LVLM_SPEC, doc, src, LvlmSpecError, drop_loc=1, allowed=allowed)  # loc[0]: the tag
    if fields.name is not None and fields.name != name:
        raise LvlmSpecError(
            f"{src}: field 'name' is {fields.name!r} but the file stem is {name!r}; drop the field"
        )
    return LvlmSpec(**{**fields.model_dump(), "name": name}, source=source)


def load_spec(path: str | Path) -> LvlmSpec:
    """Read and validate one spec file (the model name is the file stem)."""
    path = Path(path)
    return parse_spec(read_yaml(path, LvlmSpecError, "LVLM spec"), path.stem, str(path))


def spec_hash(spec: LvlmSpec) -> str:
    """Hash of the answer-deciding part of a spec (first 16 hex digits)."""
    return hashlib.sha256(json.dumps(spec.generation(), sort_keys=True).encode()).hexdigest()[:16]


def spec_version(spec: LvlmSpec) -> str:
    """A spec's data version (16 hex digits): the normalised spec but its name and local port."""
    d = spec.to_dict()
    d.pop("name")
    url = urlparse(d["base_url"] or "")
    if url.port is not None and (url.hostname or "") in LOOPBACK_HOSTS:
        d["base_url"] = url._replace(netloc=url.netloc.rsplit(":", 1)[0]).geturl()
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def spec_data_version(path: str | Path) -> str:
    """The data version of a spec file (its content hash when it does not load)."""
    try:
        return spec_version(load_spec(path))
    except LvlmSpecError:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def scan_specs(folder: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """A folder's valid spec files as {name: `spec_version`} and invalid ones as {name: error}."""
    return scan_folder(Path(folder), load_spec, spec_version)
