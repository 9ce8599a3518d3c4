"""Answers cached by request hash, one JSON file each, written atomically; never errors or secrets."""

from __future__ import annotations

import json
from typing import Any

from soco_pipeline.storage import exists, join, read_bytes, write_bytes_atomic


class AnswerCache:
    """A folder of `<hash[:2]>/<hash>.json` answer records under an fsspec root."""

    def __init__(self, root: str) -> None:
        self.root = root

    def path(self, key: str) -> str:
        """The file of one request hash."""
        return join(self.root, key[:2], f"{key}.json")

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached record of a request hash, or None."""
        path = self.path(key)
        if not exists(path):
            return None
        try:
            return json.loads(read_bytes(path))
        except (ValueError, OSError):  # unreadable (should not happen with atomic writes): ask again
            return None

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store the record of a request hash (atomic: temp file, then rename)."""
        write_bytes_atomic(self.path(key), json.dumps(record, sort_keys=True).encode())
