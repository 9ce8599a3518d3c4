"""Reference answerers behind a loopback OpenAI-compatible server: the LVLM side's oracles."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from soco_pipeline.lvlm.prompt import ChatRequest, build_prompts
from soco_pipeline.lvlm.server import HttpReply, serve
from soco_pipeline.settings import environment, variable
from soco_pipeline.storage import exists, join, read_bytes, read_parquet
from soco_pipeline.taxonomy import ASSETS_DIR

SPEC_TEMPLATES = ASSETS_DIR / "lvlm_demo"
URL_PLACEHOLDER = "@LOOPBACK_URL@"
READY_PREFIX = "loopback answerers at "


def content_key(images: list[bytes] | tuple[bytes, ...], text: str) -> str:
    """What the server sees of a request as one hash: the text and each image's sha256."""
    h = hashlib.sha256(text.encode())
    for b in images:
        h.update(hashlib.sha256(b).digest())
    return h.hexdigest()


def answer_key(items: pd.DataFrame) -> dict[str, str]:
    """{content key of the request a row becomes: its right letter} for every LVLM item row."""
    texts = build_prompts(items)
    out = {}
    for src, trg, text, answer in zip(
        items["src_render"], items["trg_render"], texts, items["answer"], strict=True
    ):
        imgs = [read_bytes(p) for p in (src, trg) if isinstance(p, str) and p]
        out[content_key(imgs, text)] = str(answer)
    return out


class Answerers:
    """The server's answer function by `model` (oracle | random); the key re-read when needed."""

    def __init__(self, tables_root: str, seed: int = 0) -> None:
        self.tables_root, self.seed = tables_root, seed
        self._key: dict[str, str] | None = None
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def _lookup(self, k: str) -> str | None:
        with self._lock:
            if self._key is None or k not in self._key:
                path = join(self.tables_root, "lvlm_items.parquet")
                self._key = answer_key(read_parquet(path)) if exists(path) else {}
            return self._key.get(k)

    def __call__(self, request: ChatRequest, body: dict) -> str | HttpReply:
        model = str(body.get("model", ""))
        with self._lock:
            self.counts[model] = self.counts.get(model, 0) + 1
        k = content_key(request.images, request.text)
        if model == "random":
            return f"The answer is {random.Random(f'{self.seed}:{k}').choice('ABCD')}."
        if model == "oracle":
            letter = self._lookup(k)
            if letter is None:
                return HttpReply(
                    400, json.dumps({"error": "oracle: this question is not in lvlm_items"}).encode()
                )
            return f"The answer is {letter}."
        return HttpReply(
            404, json.dumps({"error": f"unknown model {model!r}: use oracle or random"}).encode()
        )


def _serve_forever(tables_root: str, seed: int, port: int) -> None:
    answerers = Answerers(tables_root, seed)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with serve(answerers, port=port, model_name="soco-loopback") as srv:
        counts_path = variable("SOCO_LOOPBACK_COUNTS")
        print(f"{READY_PREFIX}{srv.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while not stop.wait(0.2):
                if counts_path:
                    Path(counts_path).write_text(json.dumps({"requests": srv.requests, **answerers.counts}))
        if counts_path:
            Path(counts_path).write_text(json.dumps({"requests": srv.requests, **answerers.counts}))


@dataclass
class Loopback:
    """A started loopback server process: its URL, pid, the spec files written and a request counter."""

    base_url: str
    pid: int
    specs: dict[str, Path]
    counts_path: Path

    @property
    def models(self) -> list[str]:
        """The LVLM spec names (partitions) served."""
        return sorted(self.specs)

    def requests(self) -> int:
        """Chat-completion requests the server has answered so far (model calls)."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                return int(json.loads(self.counts_path.read_text())["requests"])
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                time.sleep(0.05)
        raise TimeoutError(
            f"the loopback server (pid {self.pid}) wrote no request counts to {self.counts_path}"
        )


def write_specs(specs_dir: str | Path, base_url: str, templates: Path = SPEC_TEMPLATES) -> dict[str, Path]:
    """Copy the answerers' spec templates into specs_dir with the server's URL filled in."""
    out_dir = Path(specs_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for t in sorted(templates.glob("*.yaml")):
        text = t.read_text().replace(URL_PLACEHOLDER, base_url)
        dest = out_dir / t.name
        if not dest.exists() or dest.read_text() != text:
            tmp = dest.with_name(f".{dest.name}.tmp")
            tmp.write_text(text)
            tmp.replace(dest)
        out[t.stem] = dest
    return out


def _stop(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Stop the server by its pid: SIGTERM, then SIGKILL after `timeout` seconds."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)


@contextmanager
def loopback_answerers(
    tables_root: str, specs_dir: str | Path, seed: int = 0, start_timeout: float = 60.0
) -> Iterator[Loopback]:
    """Serve the answerers on a free loopback port, write their specs into specs_dir; stop by pid on exit."""
    counts = Path(specs_dir) / ".loopback-counts.json"
    Path(specs_dir).mkdir(parents=True, exist_ok=True)
    counts.unlink(missing_ok=True)
    env = {**environment(), "SOCO_LOOPBACK_COUNTS": str(counts), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "soco_pipeline.lvlm.loopback", "--tables", tables_root, "--seed", str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        url = _wait_ready(proc, start_timeout)
        yield Loopback(url, proc.pid, write_specs(specs_dir, url), counts)
    finally:
        _stop(proc)


def _wait_ready(proc: subprocess.Popen, timeout: float) -> str:
    """Read the server's ready line (its URL), with a deadline; a clear error if it dies or stays silent."""
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        lines.append(proc.stdout.readline())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    line = lines[0] if lines else ""
    if not line.startswith(READY_PREFIX):
        _stop(proc)
        err = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(
            f"the loopback answerers did not start within {timeout:.0f} s: {line!r} {err[-500:]}"
        )
    url = line[len(READY_PREFIX) :].strip()
    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as r:  # noqa: S310 - our loopback URL
        r.read()
    return url


def main(argv: list[str] | None = None) -> int:
    """`python -m soco_pipeline.lvlm.loopback --tables ROOT`: serve the answerers until SIGTERM / Ctrl-C."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tables", required=True, help="the tables root holding lvlm_items.parquet")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0, help="0: a free port")
    args = p.parse_args(argv)
    _serve_forever(args.tables, args.seed, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
