"""What an image is built from, remembered between runs: each input file's digest by its
status (size, modification time, inode), so an unchanged checkout is hashed from stats
instead of reading every source file, and the last build of each request, so a build
that would change nothing is known as such from one inspect of its tag.

Both live in ``<checkout>/.cache/image-inputs.json``; a cache that cannot be read or
written is simply not used (every answer is then computed in full, as before)."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CACHE_FILE = ".cache/image-inputs.json"
_VERSION = 1


@dataclass(frozen=True)
class Recorded:
    """A build that was current: its request, what it was built from, the result."""

    inputs_hash: str
    tag: str
    image_id: str
    base: str


class InputsCache:
    """The cache of one checkout (``root``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / CACHE_FILE
        self._data: dict[str, Any] | None = None
        self._dirty = False

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            try:
                data = json.loads(self.path.read_text())
            except (OSError, ValueError):
                data = None
            if not isinstance(data, dict) or data.get("version") != _VERSION:
                data = {"version": _VERSION, "files": {}, "builds": {}}
            for key in ("files", "builds"):
                if not isinstance(data.get(key), dict):
                    data[key] = {}
            self._data = data
        return self._data

    def digest(self, path: Path) -> bytes:
        """The sha256 of ``path``'s bytes, read only when its status changed."""
        st = os.stat(path)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        rel = path.relative_to(self.root).as_posix()
        files = self._load()["files"]
        known = files.get(rel)
        if isinstance(known, list) and len(known) == 4 and known[:3] == stamp:
            try:
                return bytes.fromhex(str(known[3]))
            except ValueError:
                pass
        digest = hashlib.sha256(path.read_bytes()).digest()
        files[rel] = [*stamp, digest.hex()]
        self._dirty = True
        return digest

    def forget_missing(self, present: list[Path]) -> None:
        """Drop entries of files that are no longer inputs."""
        keep = {p.relative_to(self.root).as_posix() for p in present}
        files = self._load()["files"]
        for rel in [r for r in files if r not in keep]:
            del files[rel]
            self._dirty = True

    def recorded(self, request: str) -> Recorded | None:
        found = self._load()["builds"].get(request)
        if not isinstance(found, dict):
            return None
        try:
            return Recorded(
                str(found["inputs_hash"]),
                str(found["tag"]),
                str(found["image_id"]),
                str(found["base"]),
            )
        except KeyError:
            return None

    def record(self, request: str, build: Recorded) -> None:
        self._load()["builds"][request] = {
            "inputs_hash": build.inputs_hash,
            "tag": build.tag,
            "image_id": build.image_id,
            "base": build.base,
        }
        self._dirty = True

    def save(self) -> None:
        """Write the cache when it changed (atomically; a failure is ignored)."""
        if not self._dirty or self._data is None:
            return
        from orchestrator.fsatomic import write_atomic

        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(self._data, sort_keys=True), mode=0o644)
            self._dirty = False
        except OSError:
            pass
