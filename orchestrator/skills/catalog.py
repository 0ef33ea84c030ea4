"""Where a home's skills are, which a group sees, and installing and removing them.

Three places, looked at in this order (a name is refused at install when it is
already visible to a group that would see the new one):

- built-in: the package's ``skills/`` folder;
- home: ``<home>/skills/<name>/``, for every group;
- group: ``<home>/skills-by-group/<folder>/<name>/``, for one group.

Both installed places are in the home, outside ``groups/`` (whose subfolders a
container writes) and outside ``state/``; each selected skill is bind-mounted
read-only at ``/workspace/skills/<name>``. An install copies the checked folder into a
temporary folder beside its destination, checks the copy again, syncs it and renames
it into place: a skill is there whole or not at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orchestrator
from orchestrator.errors import BadInput
from orchestrator.home import Home
from orchestrator.skills.manifest import MANIFEST, Manifest, ManifestError, load, valid_name
from orchestrator.skills.validate import FOLDER_MAX_BYTES, Checked, check_folder

BUILT_IN, HOME, GROUP = "built-in", "home", "group"
HOME_SKILLS = "skills"
GROUP_SKILLS = "skills-by-group"
LOCK_FILE = "skills.lock"
COPY_CHUNK = 1024 * 1024


def builtin_root() -> Path | None:
    """The package's ``skills/`` folder, when there is one."""
    root = Path(orchestrator.__file__).resolve().parent.parent / "skills"
    return root if root.is_dir() else None


def home_dir(home: Home) -> Path:
    return home.root / HOME_SKILLS


def group_dir(home: Home, folder: str) -> Path:
    return home.root / GROUP_SKILLS / folder


@dataclass(frozen=True)
class Skill:
    """One skill found: where it is from (built-in, home, group) and its manifest, or
    why it could not be read."""

    name: str
    origin: str
    path: Path
    manifest: Manifest | None = None
    problem: str | None = None

    @property
    def description(self) -> str:
        return self.manifest.summary if self.manifest else f"(unreadable: {self.problem})"

    @property
    def runs_on(self) -> str:
        return "host" if self.manifest is not None and self.manifest.host else "container"

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "host": self.runs_on == "host",
            "runs_on": self.runs_on,
            "origin": self.origin,
            "path": str(self.path / MANIFEST),
            **({"problem": self.problem} if self.problem else {}),
        }


def names_in(root: Path | None) -> list[str]:
    """The skill folders of ``root``: real folders with a valid name (hidden entries,
    such as an install in progress, are not skills)."""
    if root is None:
        return []
    try:
        entries = list(os.scandir(root))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(e.name for e in entries if valid_name(e.name) and e.is_dir(follow_symlinks=False))


def places(home: Home, folder: str | None, builtin: Path | None) -> list[tuple[str, Path]]:
    """(origin, folder) of the places a group (None: no group) sees, in order."""
    out = [(BUILT_IN, builtin)] if builtin is not None else []
    out.append((HOME, home_dir(home)))
    if folder is not None:
        out.append((GROUP, group_dir(home, folder)))
    return [(origin, path) for origin, path in out if path is not None]


def visible(home: Home, folder: str | None, builtin: Path | None) -> dict[str, tuple[str, Path]]:
    """name -> (origin, folder) of every skill a group sees; on a clash made by hand
    (an install refuses one) the first place keeps the name."""
    found: dict[str, tuple[str, Path]] = {}
    for origin, root in places(home, folder, builtin):
        for name in names_in(root):
            found.setdefault(name, (origin, root / name))
    return found


def skills(home: Home, folder: str | None, builtin: Path | None) -> list[Skill]:
    """Every skill a group (None: the built-in and home-wide ones) sees, read."""
    out = []
    for name, (origin, path) in visible(home, folder, builtin).items():
        try:
            out.append(Skill(name, origin, path, load(path)))
        except ManifestError as exc:
            out.append(Skill(name, origin, path, problem=f"{MANIFEST}: {exc}"))
    return sorted(out, key=lambda s: s.name)


def installed_in_groups(home: Home, name: str) -> list[str]:
    """The group folders that have their own skill ``name``."""
    root = home.root / GROUP_SKILLS
    return [f for f in names_or_folders(root) if (root / f / name).is_dir()]


def names_or_folders(root: Path) -> list[str]:
    try:
        return sorted(
            e.name
            for e in os.scandir(root)
            if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")
        )
    except (FileNotFoundError, NotADirectoryError):
        return []


def mounts_for(
    home: Home, folder: str, selection: str | Sequence[str], builtin: Path | None
) -> list[tuple[str, Path]] | None:
    """(name, source) of each skill to mount for a group whose ``skills:`` is
    ``selection``; None when the group sees no installed skill (then the built-in
    folder is mounted as before). A name that is nowhere keeps the built-in path (the
    start of the group refuses it)."""
    seen = visible(home, folder, builtin)
    if all(origin == BUILT_IN for origin, _ in seen.values()):
        return None
    names = list(seen) if selection == "all" else list(selection)
    out = []
    for name in names:
        if name in seen:
            out.append((name, seen[name][1]))
        elif builtin is not None:
            out.append((name, builtin / name))
    return out


# install and remove


@contextlib.contextmanager
def _locked(home: Home) -> Iterator[None]:
    """One install or removal at a time in a home."""
    home.state_dir.mkdir(parents=True, exist_ok=True)
    with open(home.state_dir / LOCK_FILE, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def clash(home: Home, name: str, folder: str | None, builtin: Path | None) -> str | None:
    """Why ``name`` cannot be installed home-wide (folder None) or for group ``folder``:
    another skill of that name would be visible to the same group."""
    if name in names_in(builtin):
        return f"a built-in skill is named {name!r}"
    if name in names_in(home_dir(home)):
        return f"a skill named {name!r} is installed for every group"
    if folder is None:
        groups = installed_in_groups(home, name)
        if groups:
            return f"group(s) {', '.join(groups)} have their own skill named {name!r}"
    elif name in names_in(group_dir(home, folder)):
        return f"group {folder} already has a skill named {name!r}"
    return None


@dataclass(frozen=True)
class Installed:
    checked: Checked
    path: Path
    origin: str


def install(home: Home, source: Path, folder: str | None, builtin: Path | None) -> Installed:
    """Check ``source`` and copy it, whole or not at all, home-wide or for the group
    ``folder``; BadInput (nothing changed) when it is refused or its name is taken."""
    checked = check_folder(source)
    name = checked.manifest.name
    where = f"for group {folder}" if folder else "for every group"
    with _locked(home):
        if (why := clash(home, name, folder, builtin)) is not None:
            raise BadInput(
                f"skill {name!r} is not installed {where}: {why}",
                hint="two skills a group sees cannot share a name; rename the skill (its "
                "folder and name:) or remove the other: orchestrator skill remove "
                f"{name}" + (f" --group {folder}" if folder and why.startswith("group ") else ""),
            )
        parent = group_dir(home, folder) if folder else home_dir(home)
        dest = parent / name
        if os.path.lexists(dest):
            raise BadInput(
                f"{dest} exists but is not a skill; nothing was installed",
                hint="move it away, then add the skill again",
            )
        parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        staging = parent / f".install-{name}-{secrets.token_hex(4)}"
        os.mkdir(staging, 0o755)
        try:
            _copy(source, staging, checked.files)
            again = check_folder(staging, name=name)
            if again.files != checked.files or again.total_bytes != checked.total_bytes:
                raise BadInput(
                    f"{source} changed while it was copied; nothing was installed",
                    hint="add it again once nothing writes to it",
                )
            os.chmod(staging, 0o755)
            _sync(staging)
            os.rename(staging, dest)
            _sync(parent)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return Installed(checked, dest, GROUP if folder else HOME)


def _copy(source: Path, target: Path, files: Sequence[str]) -> None:
    """Copy the checked entries (folders first, as a walk lists them), never through a
    symlink, at most FOLDER_MAX_BYTES in all; each file synced."""
    left = FOLDER_MAX_BYTES
    folders = []
    for relative in files:
        if relative.endswith("/"):
            os.mkdir(target / relative, 0o755)
            folders.append(target / relative)
            continue
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        src = os.open(source / relative, flags)
        try:
            st = os.fstat(src)
            if not stat.S_ISREG(st.st_mode):
                raise BadInput(
                    f"{source / relative} changed into a special file; nothing installed"
                )
            mode = 0o755 if st.st_mode & 0o111 else 0o644
            dst = os.open(
                target / relative, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode
            )
            try:
                while chunk := os.read(src, COPY_CHUNK):
                    left -= len(chunk)
                    if left < 0:
                        raise BadInput(f"{source} grew while it was copied; nothing installed")
                    os.write(dst, chunk)
                os.fchmod(dst, mode)
                os.fsync(dst)
            finally:
                os.close(dst)
        finally:
            os.close(src)
    for folder in reversed(folders):
        _sync(folder)


def _sync(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove(home: Home, name: str, folder: str | None, builtin: Path | None) -> Path:
    """Remove an installed skill (home-wide, or group ``folder``'s); the folder leaves
    at once (renamed aside, then deleted). Built-in skills are refused."""
    parent = group_dir(home, folder) if folder else home_dir(home)
    where = f"group {folder}" if folder else "every group (home-wide)"
    with _locked(home):
        if not valid_name(name) or name not in names_in(parent):
            if name in names_in(builtin):
                raise BadInput(
                    f"{name!r} is a built-in skill; built-in skills cannot be removed",
                    hint="leave it out of a group with skills: [names] in its group.yaml",
                )
            others = installed_in_groups(home, name) if folder is None else []
            raise BadInput(
                f"no skill named {name!r} is installed for {where}",
                hint=f"it is installed for group {others[0]}: add --group {others[0]}"
                if others
                else "see: orchestrator skill list" + (f" --group {folder}" if folder else ""),
            )
        path = parent / name
        aside = parent / f".remove-{name}-{secrets.token_hex(4)}"
        os.rename(path, aside)
        _sync(parent)
        shutil.rmtree(aside)
    return path
