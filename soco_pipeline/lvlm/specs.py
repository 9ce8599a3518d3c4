"""LVLM specs: one small YAML file per model in assets/lvlms/, parsed into a frozen, validated dataclass.

An OpenAI-compatible server (vLLM, LMDeploy, Ollama, llama.cpp's server, OpenAI itself)::

    backend: openai
    model: Qwen/Qwen2.5-VL-7B-Instruct     # the model name the server expects
    base_url: http://127.0.0.1:8000        # POST {base_url}/v1/chat/completions
    api_key_env: OPENAI_API_KEY            # the *name* of the variable holding the key (optional)
    temperature: 0
    max_tokens: 512
    timeout: 120                           # seconds per request
    max_concurrency: 8
    retries: 5                             # extra attempts after the first, with exponential backoff

A local model (transformers, AutoModelForImageTextToText and the processor's chat template)::

    backend: transformers
    model: Qwen/Qwen2.5-VL-7B-Instruct     # a local folder, or a Hugging Face id already in the cache
    device: auto
    dtype: bfloat16
    batch_size: 8

Both backends take `max_error_rate` (default 0.1): a run in which more than this share of the requests
fails (errors after retries, failed batches) stops with the first error's message instead of posting a
score deflated by errors counted as wrong.

The name is the file stem. Unknown fields are an error naming the file and the field. The key itself
never appears in a spec: only the name of the environment variable that holds it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

BACKENDS = ("openai", "transformers")
SETTINGS = ("vis", "vis_desc", "desc")
DTYPES = ("auto", "float32", "bfloat16", "float16")

# Bump when the request building or parsing changes what a spec's answers are.
LVLM_CODE_VERSION = "1"

_NUM = (int, float)
COMMON_FIELDS: dict[str, tuple[type | tuple[type, ...], Any]] = {
    "name": (str, None),
    "backend": (str, None),
    "model": (str, None),
    "description": (str, ""),
    "settings": (list, list(SETTINGS)),
    "temperature": (_NUM, 0.0),
    "max_tokens": (int, 512),
    "seed": (int, 0),
    "max_error_rate": (_NUM, 0.1),
}
BACKEND_FIELDS: dict[str, dict[str, tuple[type | tuple[type, ...], Any]]] = {
    "openai": {
        "base_url": (str, None),
        "api_key_env": (str, None),
        "timeout": (_NUM, 120.0),
        "max_concurrency": (int, 8),
        "retries": (int, 5),
        "backoff_base": (_NUM, 0.5),
        "backoff_max": (_NUM, 30.0),
        "max_consecutive_failures": (int, 25),
    },
    "transformers": {
        "device": (str, "auto"),
        "dtype": (str, "auto"),
        "batch_size": (int, 4),
    },
}
# Fields that change answers: they enter the request hash (timeouts, concurrency, retries do not).
POSITIVE = ("max_tokens", "timeout", "max_concurrency", "backoff_max", "batch_size", "max_consecutive_failures")


class LvlmSpecError(ValueError):
    """An LVLM spec is malformed; the message names the file, the field and the fix."""


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
        return {"backend": self.backend, "model": self.model, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "code": LVLM_CODE_VERSION}

    def to_dict(self) -> dict[str, Any]:
        """The normalised spec as a plain dict (without the source path)."""
        d = asdict(self)
        d.pop("source")
        d["settings"] = list(self.settings)
        return d


def _check(src: str, key: str, value: Any, expected: type | tuple[type, ...]) -> Any:
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool) or not isinstance(value, types):
        names = " or ".join(t.__name__ for t in types)
        raise LvlmSpecError(f"{src}: field {key!r} must be {names}, got {value!r}; fix the value in the spec file")
    return float(value) if float in types else value


def parse_spec(doc: Any, name: str, source: str = "<spec>") -> LvlmSpec:
    """Validate a spec document (the parsed YAML) and return the LvlmSpec."""
    src = source
    if not isinstance(doc, dict):
        raise LvlmSpecError(f"{src}: expected a mapping of fields (backend, model, ...)")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise LvlmSpecError(f"{src}: model name {name!r} (the file stem) may only hold letters, digits, '_', '-', '.'")
    backend = doc.get("backend")
    if backend not in BACKENDS:
        raise LvlmSpecError(f"{src}: field 'backend' is {backend!r}; it must be one of {list(BACKENDS)}")
    allowed = {**COMMON_FIELDS, **BACKEND_FIELDS[backend]}
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise LvlmSpecError(f"{src}: unknown field(s) {unknown} for backend {backend!r}; allowed: {sorted(allowed)}")
    if not doc.get("model"):
        raise LvlmSpecError(f"{src}: field 'model' is missing; every LVLM spec names its model")
    vals = {k: _check(src, k, doc[k], t) if doc.get(k) is not None else d for k, (t, d) in allowed.items()}
    if vals["name"] is not None and vals["name"] != name:
        raise LvlmSpecError(f"{src}: field 'name' is {vals['name']!r} but the file stem is {name!r}; drop the field")
    vals["name"] = name
    settings = vals["settings"]
    bad = [s for s in settings if s not in SETTINGS]
    if bad or not settings or len(set(settings)) != len(settings):
        raise LvlmSpecError(f"{src}: field 'settings' must list distinct values of {list(SETTINGS)}, got {settings}")
    vals["settings"] = tuple(settings)
    for key in POSITIVE:
        if key in vals and vals[key] <= 0:
            raise LvlmSpecError(f"{src}: field {key!r} must be > 0, got {vals[key]}")
    if vals.get("retries", 0) < 0:
        raise LvlmSpecError(f"{src}: field 'retries' must be >= 0, got {vals['retries']}")
    if not 0.0 <= vals["max_error_rate"] <= 1.0:
        raise LvlmSpecError(
            f"{src}: field 'max_error_rate' must be in [0, 1] (the share of failed requests a run tolerates), "
            f"got {vals['max_error_rate']}"
        )
    if not 0.0 <= vals["temperature"] <= 2.0:
        raise LvlmSpecError(f"{src}: field 'temperature' must be in [0, 2], got {vals['temperature']}")
    if backend == "openai":
        url = vals["base_url"]
        if not url or not re.match(r"https?://", url):
            raise LvlmSpecError(f"{src}: backend 'openai' needs 'base_url: http(s)://host[:port]', got {url!r}")
        if "@" in url.split("://", 1)[1].split("/", 1)[0]:
            raise LvlmSpecError(
                f"{src}: 'base_url' must not hold credentials (user:password@); put the key in an environment "
                f"variable and name it in 'api_key_env'"
            )
        vals["base_url"] = url.rstrip("/").removesuffix("/v1")
        env = vals["api_key_env"]
        if env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env):
            raise LvlmSpecError(
                f"{src}: 'api_key_env' must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                f"never the key itself"
            )
    else:
        if vals["dtype"] not in DTYPES:
            raise LvlmSpecError(f"{src}: field 'dtype' must be one of {list(DTYPES)}, got {vals['dtype']!r}")
    return LvlmSpec(**vals, source=source)


def load_spec(path: str | Path) -> LvlmSpec:
    """Read and validate one spec file (the model name is the file stem)."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise LvlmSpecError(f"{path}: not valid YAML: {e}") from None
    return parse_spec(doc, path.stem, str(path))


def spec_hash(spec: LvlmSpec) -> str:
    """Hash of the answer-deciding part of a spec (first 16 hex digits)."""
    return hashlib.sha256(json.dumps(spec.generation(), sort_keys=True).encode()).hexdigest()[:16]


def scan_specs(folder: str | Path) -> tuple[dict[str, str], dict[str, str]]:
    """Valid spec files of a folder as {name: file content hash}, invalid ones as {name: error}.

    A missing or empty folder gives two empty dicts.
    """
    valid, invalid = {}, {}
    for path in sorted(Path(folder).glob("*.yaml")):
        try:
            load_spec(path)
        except Exception as e:  # noqa: BLE001 - the sensor reports malformed specs, it does not raise
            invalid[path.stem] = str(e)
            continue
        valid[path.stem] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return valid, invalid
