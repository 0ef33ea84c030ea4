"""What an image is built from, remembered between runs: each input file's digest by its
status (size, modification time, inode), so an unchanged checkout is hashed from stats
instead of reading every source file; the last build of each request, so a build that
would change nothing is known as such from one inspect of its tag; and which image
repository each home's orchestrator.yaml named, by that file's status, so that answer
needs no YAML either.

All live in ``<checkout>/.cache/image-inputs.json``; a cache that cannot be read or
written is simply not used (every answer is then computed in full, as before).

This module and ``orchestrator.image.noop`` import only the standard library's light
modules: a build with nothing to do is answered before the CLI loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CACHE_FILE = ".cache/image-inputs.json"
_VERSION = 1
# the Python version the image's wheels are for (part of the inputs)
PYTHON_VERSION = "3.11"
# the folders of the checkout the agent image is built from, besides pyproject.toml
INPUT_FOLDERS = ("images/agent", "orchestrator")


class Recorded:
    """A build that was current: its request, what it was built from, the result."""

    __slots__ = ("base", "image_id", "inputs_hash", "tag")

    def __init__(self, inputs_hash: str, tag: str, image_id: str, base: str) -> None:
        self.inputs_hash = inputs_hash
        self.tag = tag
        self.image_id = image_id
        self.base = base

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recorded) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "Recorded({!r}, {!r}, {!r}, {!r})".format(*self._key())

    def _key(self) -> tuple[str, str, str, str]:
        return (self.inputs_hash, self.tag, self.image_id, self.base)


def input_files(root: str | os.PathLike[str]) -> list[str]:
    """The agent image's input files, as paths relative to the checkout ``root`` with
    "/" between parts, in the order of their parts: pyproject.toml and every regular
    file (or link to one) under images/agent/ and orchestrator/, compiled Python and
    __pycache__ folders aside. Linked folders are not entered."""
    top = os.fspath(root)
    found = ["pyproject.toml"]
    for folder in INPUT_FOLDERS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(top, folder)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, top).replace(os.sep, "/")
            for name in filenames:
                if name == "__pycache__" or name.endswith((".pyc", ".pyo")):
                    continue
                if os.path.isfile(os.path.join(dirpath, name)):
                    found.append(f"{rel}/{name}")
    found.sort(key=lambda rel: rel.split("/"))
    return found


def inputs_hash(root: str | os.PathLike[str], base_identity: str) -> str:
    """The hash the agent image is tagged by: its base, the Python version, and every
    input file's path and bytes (each file's digest read again only when its status
    changed)."""
    cache = InputsCache(root)
    digest = hashlib.sha256()
    digest.update(f"base={base_identity}\npython={PYTHON_VERSION}\n".encode())
    files = input_files(root)
    for rel in files:
        digest.update(rel.encode() + b"\0")
        digest.update(cache.digest(rel))
    cache.forget_missing(files)
    cache.save()
    return digest.hexdigest()


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


class InputsCache:
    """The cache of one checkout (``root``)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self.path = os.path.join(self.root, CACHE_FILE)
        self._data: dict[str, Any] | None = None
        self._dirty = False

    def _load(self) -> dict[str, Any]:
        if self._data is None:
            try:
                with open(self.path, encoding="utf-8") as file:
                    data = json.load(file)
            except (OSError, ValueError):
                data = None
            if not isinstance(data, dict) or data.get("version") != _VERSION:
                data = {"version": _VERSION, "files": {}, "builds": {}}
            for key in ("files", "builds", "configs"):
                if not isinstance(data.get(key), dict):
                    data[key] = {}
            self._data = data
        return self._data

    def digest(self, rel: str) -> bytes:
        """The sha256 of the bytes of the checkout's file ``rel`` (relative, "/"
        between parts), read only when its status changed."""
        path = os.path.join(self.root, rel)
        stamp = _stamp(os.stat(path))
        files = self._load()["files"]
        known = files.get(rel)
        if isinstance(known, list) and len(known) == 4 and known[:3] == stamp:
            try:
                return bytes.fromhex(str(known[3]))
            except ValueError:
                pass
        with open(path, "rb") as file:
            digest = hashlib.sha256(file.read()).digest()
        files[rel] = [*stamp, digest.hex()]
        self._dirty = True
        return digest

    def forget_missing(self, present: list[str]) -> None:
        """Drop entries of files that are no longer inputs."""
        keep = set(present)
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

    def config_repository(self, config_file: str) -> str | None:
        """The image repository ``config_file`` named when it was last read whole and
        found valid, if it is still that same regular file; else None."""
        try:
            st = os.stat(config_file)
        except OSError:
            return None
        known = self._load()["configs"].get(config_file)
        if (
            stat.S_ISREG(st.st_mode)
            and isinstance(known, list)
            and len(known) == 5
            and known[:4] == [*_stamp(st), st.st_ctime_ns]
            and isinstance(known[4], str)
        ):
            return known[4]
        return None

    def record_config(self, config_file: str, repository: str) -> None:
        """Remember that ``config_file``, valid as it is now, names ``repository``
        (a file that is not there, or not a regular file, is not remembered)."""
        try:
            st = os.stat(config_file)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            return
        entry = [*_stamp(st), st.st_ctime_ns, repository]
        configs = self._load()["configs"]
        if configs.get(config_file) != entry:
            configs[config_file] = entry
            self._dirty = True

    def save(self) -> None:
        """Write the cache when it changed (atomically; a failure is ignored)."""
        if not self._dirty or self._data is None:
            return
        from pathlib import Path

        from orchestrator.fsatomic import write_atomic

        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            write_atomic(Path(self.path), json.dumps(self._data, sort_keys=True), mode=0o644)
            self._dirty = False
        except OSError:
            pass
