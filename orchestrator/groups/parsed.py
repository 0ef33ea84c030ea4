"""The data of each group.yaml as YAML gave it, kept between processes.

Every command that lists groups, and ``status``, reads all of them: parsing a thousand
YAML files is most of such a command's time, while loading their data as JSON is a
fortieth of it. The cache (``state/cache/group-yaml.json``) keys each folder's entry by
the sha256 of its file's bytes, so a changed file is never read from it; it holds only
data that JSON gives back unchanged. It is a cache: one that cannot be read or written
is simply not used. Validation still runs on every load, and a file that fails it is
parsed again in full, so errors keep their line numbers.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

CACHE_FILE = "cache/group-yaml.json"
_VERSION = 1
MISSING = object()


class ParsedYaml:
    """The cache of one home's state folder."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / CACHE_FILE
        self._entries: dict[str, Any] | None = None
        self._dirty = False

    def _load(self) -> dict[str, Any]:
        if self._entries is None:
            try:
                found = json.loads(self.path.read_bytes())
            except (OSError, ValueError):
                found = None
            entries = found.get("entries") if isinstance(found, dict) else None
            valid = isinstance(entries, dict) and found.get("version") == _VERSION
            self._entries = entries if valid and isinstance(entries, dict) else {}
        return self._entries

    def get(self, folder: str, raw: bytes) -> Any:
        """The data of ``folder``'s file whose bytes are ``raw``, or MISSING."""
        entry = self._load().get(folder)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == _digest(raw):
            return entry[1]
        return MISSING

    def put(self, folder: str, raw: bytes, data: Any) -> None:
        """Keep ``data`` for ``folder``, when JSON gives it back exactly as it is."""
        try:
            kept = json.loads(json.dumps(data, ensure_ascii=False))
        except (TypeError, ValueError):
            return  # a date, a set, a key that is not text: parsed again each time
        if kept != data or not _same_types(kept, data):
            return
        self._load()[folder] = [_digest(raw), kept]
        self._dirty = True

    def forget(self, keep: set[str]) -> None:
        """Drop the entries of folders not in ``keep``."""
        entries = self._load()
        for folder in [f for f in entries if f not in keep]:
            del entries[folder]
            self._dirty = True

    def save(self) -> None:
        """Write the cache when it changed (atomically; a failure is ignored)."""
        if not self._dirty or self._entries is None:
            return
        from orchestrator.fsatomic import write_atomic

        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            text = json.dumps({"version": _VERSION, "entries": self._entries}, ensure_ascii=False)
            write_atomic(self.path, text, mode=0o600)
            self._dirty = False
        except OSError:
            pass


def _digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def _same_types(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down (1 == 1.0 == True in Python)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return all(_same_types(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return all(_same_types(x, y) for x, y in zip(a, b, strict=True))
    return True
