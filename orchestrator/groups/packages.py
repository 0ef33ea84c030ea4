"""Packages a group asks for (group.yaml ``packages``): Debian packages by name and
Python packages as requirements, built into an image of the group's own on top of the
agent image, offline.

Names are checked before anything runs: Debian's package-name grammar (no options, no
paths, no versions), and Python requirements by ``packaging`` (a name, extras and a
version specifier; no URL, path or option). Python packages are wheels only: an sdist
would run its ``setup.py`` on the host, as root, to be built. Their exact versions and
sha256 hashes are resolved when they are asked for and kept in the group's
``packages.lock`` (host-owned, never mounted); the image installs exactly those with
``--require-hashes``.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import BadInput, InvalidConfig
from orchestrator.fsatomic import write_atomic

LOCK_FILE = "packages.lock"
# Debian Policy 5.6.7: lowercase letters, digits, plus, minus and full stops; at least two
# characters; starting with a letter or digit (so never an option)
DEBIAN_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,62}$")
PYTHON_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
MAX_PACKAGES = 64
IMAGE_PYTHON = "3.11"  # the agent image's Python (Debian bookworm's)
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64")

Progress = Callable[[str], None]


class PackageRefused(BadInput):
    """A package name or requirement that is not accepted, or cannot be had as asked."""


def debian_problem(name: object) -> str | None:
    """Why ``name`` is not a Debian package name, or None."""
    if not isinstance(name, str) or not DEBIAN_NAME.fullmatch(name):
        return (
            f"got {name!r}; expected a Debian package name: lowercase letters, digits, "
            "'+', '-' and '.', at least two characters, starting with a letter or digit"
        )
    return None


def python_problem(text: object) -> str | None:
    """Why ``text`` is not an accepted Python requirement, or None."""
    from packaging.requirements import InvalidRequirement, Requirement

    expected = "expected a name with an optional version, such as requests or rich==13.7.1"
    if not isinstance(text, str) or not text.strip() or len(text) > 200:
        return f"got {text!r}; {expected}"
    if text.lstrip().startswith("-") or any(c in text for c in "/\\@:;#\n\r\t"):
        return f"got {text!r}: no options, paths, URLs or markers; {expected}"
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        return f"got {text!r}: {exc}; {expected}"
    if requirement.url or requirement.marker or not PYTHON_NAME.fullmatch(requirement.name):
        return f"got {text!r}: no URLs or markers; {expected}"
    return None


@dataclass(frozen=True)
class PackageSettings:
    """group.yaml ``packages``."""

    debian: tuple[str, ...] = ()
    python: tuple[str, ...] = ()
    from_chat: bool = False  # creators may ask for packages from the chat

    @property
    def empty(self) -> bool:
        return not self.debian and not self.python


def check_names(debian: Iterable[object], python: Iterable[object]) -> None:
    """InvalidConfig naming the first refused entry."""
    for index, name in enumerate(debian):
        if problem := debian_problem(name):
            raise InvalidConfig(f"packages.debian[{index}]: {problem}")
    for index, text in enumerate(python):
        if problem := python_problem(text):
            raise InvalidConfig(f"packages.python[{index}]: {problem}")


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    filename: str
    sha256: str

    def requirement(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class PythonLock:
    """What the requirements resolved to: every wheel, dependencies included."""

    requirements: tuple[str, ...]
    wheels: tuple[LockedWheel, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "requirements": list(self.requirements),
            "wheels": [asdict(w) for w in self.wheels],
        }

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    def requirements_txt(self) -> str:
        return "".join(w.requirement() + "\n" for w in self.wheels)


def _pip_download(args: list[str], dest: Path, progress: Progress) -> None:
    platforms = [a for p in WHEEL_PLATFORMS for a in ("--platform", p)]
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "--disable-pip-version-check",
        "download",
        "-q",
        "--only-binary=:all:",  # never an sdist: building one runs its setup.py here
        "--python-version",
        IMAGE_PYTHON,
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(dest),
        *args,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        text = (result.stderr or result.stdout).strip()
        if "no matching distribution" in text.lower() or "could not find a version" in text.lower():
            raise PackageRefused(
                f"no wheel for Python {IMAGE_PYTHON} on Linux: {_last(text)}",
                hint="only wheels are installed (an sdist would run its setup.py on the host "
                "as root); pick a version that ships a wheel",
            )
        raise PackageRefused(
            f"pip download failed: {_last(text)}", hint="check that PyPI is reachable"
        )


def _last(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-2:])[:400]


def resolve_python(requirements: Iterable[str], progress: Progress = lambda _: None) -> PythonLock:
    """Resolve ``requirements`` (checked first) to exact wheels and their hashes."""
    asked = tuple(requirements)
    check_names((), asked)
    if not asked:
        return PythonLock((), ())
    progress(f"resolving {', '.join(asked)} to wheels for Python {IMAGE_PYTHON}")
    with tempfile.TemporaryDirectory(prefix="orchestrator-packages-") as tmp:
        folder = Path(tmp)
        _pip_download(["--", *asked], folder, progress)
        wheels = []
        for wheel in sorted(folder.iterdir()):
            if wheel.suffix != ".whl":
                raise PackageRefused(f"{wheel.name} is not a wheel; only wheels are installed")
            name, version = wheel.name.split("-")[:2]
            digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
            wheels.append(LockedWheel(name, version, wheel.name, digest))
    progress(f"{len(wheels)} wheels: " + ", ".join(f"{w.name} {w.version}" for w in wheels))
    return PythonLock(asked, tuple(wheels))


def download_locked(lock: PythonLock, dest: Path, progress: Progress = lambda _: None) -> None:
    """Fetch exactly the locked wheels into ``dest``, each checked against its hash."""
    if not lock.wheels:
        return
    requirements = dest / "requirements.txt"
    requirements.write_text(lock.requirements_txt())
    progress(f"downloading {len(lock.wheels)} locked wheels")
    _pip_download(["--no-deps", "--require-hashes", "-r", str(requirements)], dest, progress)
    for wheel in lock.wheels:
        path = dest / wheel.filename
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != wheel.sha256:
            raise PackageRefused(f"{wheel.filename}: missing or not the locked file")


def read_lock(group_dir: Path) -> PythonLock | None:
    """The group's lock, or None when it has none (or one of another shape)."""
    try:
        data = json.loads((group_dir / LOCK_FILE).read_text(encoding="utf-8"))
        return PythonLock(
            tuple(str(r) for r in data["requirements"]),
            tuple(LockedWheel(**w) for w in data["wheels"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_lock(group_dir: Path, lock: PythonLock) -> None:
    write_atomic(group_dir / LOCK_FILE, json.dumps(lock.to_dict(), indent=2) + "\n")
