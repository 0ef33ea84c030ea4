"""Agent groups on disk: folder names, the group store under ``groups/``, add/list/remove.

A group is ``groups/<folder>/`` holding ``group.yaml``, ``memory/`` (the OKF tree),
``sessions/``, ``files/``, ``instructions.prepend.md`` and ``learned-behaviors.md``
(the last two host-owned and never mounted: the runner asks the host for them).
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import load_config
from orchestrator.config.providers import ProviderDef
from orchestrator.confined import ConfinedDir, Usage
from orchestrator.errors import (
    GroupExists,
    GroupNotFound,
    HomeNotWritable,
    InvalidConfig,
    InvalidFolderName,
    OrchestratorError,
)
from orchestrator.fsatomic import fsync_dir
from orchestrator.groups.config import GROUP_FILE, GroupConfig, group_config_from_doc
from orchestrator.groups.parsed import MISSING, ParsedYaml
from orchestrator.home import Home
from orchestrator.limits import FOLDER_NAME_MAX, FOLDER_NAME_PATTERN, RESERVED_FOLDER_NAMES
from orchestrator.protocol import INSTRUCTIONS_FILE, LEARNED_FILE
from orchestrator.versions import GROUP_FILE_VERSION, FileTooNew
from orchestrator.yamldoc import YamlDocument, parse_yaml_bytes, read_config_bytes

REMOVED_DIR = ".removed"
# An archive's name: the group's folder, the time of its removal and, for a second removal
# of the same folder within that second, a count from 2.
_ARCHIVE_STAMP = re.compile(r"-(\d{8}T\d{6}Z)(?:-(\d+))?$")
_FOLDER_RE = re.compile(FOLDER_NAME_PATTERN)


def validate_folder_name(folder: str) -> str:
    """Return ``folder`` when it is a valid group folder name; raise InvalidFolderName."""
    rule = "use 1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit"
    if not isinstance(folder, str) or not _FOLDER_RE.fullmatch(folder):
        shown = repr(folder)
        if isinstance(folder, str):
            if folder in ("", ".", "..") or "/" in folder or "\\" in folder:
                reason = "is a path, not a folder name"
            elif folder.startswith((".", "-", "_")):
                reason = "must start with a letter or digit"
            elif any(c.isupper() for c in folder):
                reason = "has uppercase letters"
            elif not folder.isascii():
                reason = "has non-ASCII characters"
            elif len(folder) > FOLDER_NAME_MAX:
                reason = f"is {len(folder)} characters long (at most {FOLDER_NAME_MAX})"
            else:
                reason = "has characters outside a-z, 0-9, '-' and '_'"
        else:
            reason = "is not text"
        raise InvalidFolderName(f"group folder {shown} {reason}", hint=rule)
    if folder in RESERVED_FOLDER_NAMES:
        raise InvalidFolderName(
            f"group folder {folder!r} is reserved",
            hint=f"reserved names: {', '.join(sorted(RESERVED_FOLDER_NAMES))}; pick another",
        )
    return folder


def folder_from_name(name: str) -> str:
    """Derive a folder name from a display name ('Família Silva' -> 'familia-silva')."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9_]+", "-", ascii_name.lower()).strip("-_")
    slug = slug[:FOLDER_NAME_MAX].rstrip("-_")
    if not slug:
        raise InvalidFolderName(
            f"cannot derive a folder name from {name!r}",
            hint="pass --folder with 1-63 of a-z, 0-9, '-' and '_'",
        )
    return validate_folder_name(slug)


@dataclass(frozen=True)
class Group:
    """A group with a valid group.yaml."""

    folder: str
    path: Path
    config: GroupConfig

    @property
    def memory_dir(self) -> Path:
        return self.path / "memory"

    @property
    def sessions_dir(self) -> Path:
        return self.path / "sessions"

    @property
    def files_dir(self) -> Path:
        return self.path / "files"

    @property
    def instructions_file(self) -> Path:
        return self.path / INSTRUCTIONS_FILE

    @property
    def learned_file(self) -> Path:
        return self.path / LEARNED_FILE

    @property
    def config_file(self) -> Path:
        return self.path / GROUP_FILE


@dataclass(frozen=True)
class GroupListing:
    """One folder under groups/: a valid group, or the reason it is not one."""

    folder: str
    path: Path
    group: Group | None
    problem: str | None

    def to_dict(self) -> dict[str, object]:
        """The row ``orchestrator group list --json`` prints."""
        return {
            "folder": self.folder,
            "path": str(self.path),
            "valid": self.group is not None,
            "name": self.group.config.name if self.group else None,
            "provider": self.group.config.provider if self.group else None,
            "problem": self.problem,
        }


def memory_usage(group: Group) -> Usage:
    """Files and bytes under the group's memory/, through the confined file layer."""
    try:
        with ConfinedDir.open(group.path.parent, f"{group.folder}/memory") as memory:
            return memory.usage()
    except OSError:
        return Usage(0, 0, 0)


class GroupStore:
    """The groups of one home."""

    def __init__(self, home: Home) -> None:
        self.home = home
        self.root = home.groups_dir
        self._providers: tuple[object, Mapping[str, ProviderDef] | None] = (None, None)
        # folder -> (group.yaml's bytes and the providers' stamp, the group loaded): a
        # group.yaml is parsed again only when it or orchestrator.yaml changed (every
        # message and every turn loads its group; reading a small file costs far less
        # than parsing it, and file times are too coarse to tell two quick edits apart)
        self._loaded: dict[str, tuple[object, Group]] = {}
        self._parsed = ParsedYaml(home.state_dir)  # the files' data between processes
        self._listing = False  # saved once at the end of a listing, not at each group

    def providers(self) -> Mapping[str, ProviderDef] | None:
        """The providers of orchestrator.yaml that groups may use, read again when the
        file changes; None when it is invalid (that error is reported on its own)."""
        try:
            st = os.stat(self.home.config_file)
            stamp: object = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = "absent"
        if self._providers[0] != stamp:
            try:
                providers: Mapping[str, ProviderDef] | None = load_config(self.home).providers
            except OrchestratorError:
                providers = None
            self._providers = (stamp, providers)
        return self._providers[1]

    def path_of(self, folder: str) -> Path:
        return self.root / validate_folder_name(folder)

    def load(self, folder: str) -> Group:
        """Load the group in ``folder``; GroupNotFound or InvalidConfig when it cannot."""
        path = self.path_of(folder)
        if path.is_symlink():
            raise InvalidConfig(
                f"{path} is a symlink; group folders must be real folders under {self.root}"
            )
        config_file = path / GROUP_FILE
        try:
            st = os.stat(config_file)
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            self._loaded.pop(folder, None)
            if path.is_dir():
                raise InvalidConfig(
                    f"{path} has no {GROUP_FILE}",
                    hint=f"create one with: orchestrator group add NAME --folder {folder}",
                )
            raise GroupNotFound(
                f"no group with folder {folder!r} in {self.root}",
                hint="list groups with: orchestrator group list",
            )
        providers = self.providers()
        raw = read_config_bytes(config_file)
        stamp = (raw, self._providers[0])
        known = self._loaded.get(folder)
        if known is not None and known[0] == stamp:
            return known[1]
        group = Group(folder, path, self._config(folder, config_file, raw, providers))
        self._loaded[folder] = (stamp, group)
        return group

    def _config(
        self,
        folder: str,
        config_file: Path,
        raw: bytes,
        providers: Mapping[str, ProviderDef] | None,
    ) -> GroupConfig:
        """The configuration in ``raw``: its data from the parsed cache when it holds
        these bytes (validated all the same), else parsed; an invalid file is always
        parsed in full, so its error names the line."""
        data = self._parsed.get(folder, raw)
        if data is not MISSING:
            try:
                return group_config_from_doc(YamlDocument(config_file, data, None), providers)
            except InvalidConfig:
                pass  # parsed again below, for the error's line
        doc = parse_yaml_bytes(raw, config_file)
        config = group_config_from_doc(doc, providers)
        self._parsed.put(folder, raw, doc.data)
        if not self._listing:
            self._parsed.save()
        return config

    def listing(self) -> list[GroupListing]:
        """Every folder under groups/, valid or not, sorted; hidden folders are skipped."""
        out: list[GroupListing] = []
        try:
            entries = sorted(os.scandir(self.root), key=lambda e: e.name)
        except FileNotFoundError:
            return out
        self._listing = True
        try:
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                    continue
                path = Path(entry.path)
                try:
                    group = self.load(entry.name)
                except (InvalidConfig, InvalidFolderName, GroupNotFound, FileTooNew) as exc:
                    out.append(GroupListing(entry.name, path, None, exc.message))
                else:
                    out.append(GroupListing(entry.name, path, group, None))
        finally:
            self._listing = False
        self._parsed.forget({item.folder for item in out})
        self._parsed.save()
        return out

    def groups(self) -> list[Group]:
        return [item.group for item in self.listing() if item.group is not None]

    def find(self, name: str) -> Group:
        """Resolve NAME as a folder first, then as a display name (case-insensitive)."""
        if _FOLDER_RE.fullmatch(name) and (self.root / name).is_dir():
            return self.load(name)
        matches = [g for g in self.groups() if g.config.name.casefold() == name.casefold()]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            folders = ", ".join(g.folder for g in matches)
            raise GroupNotFound(
                f"{len(matches)} groups are named {name!r} (folders: {folders})",
                hint="name the group by its folder",
            )
        raise GroupNotFound(
            f"no group named {name!r} in {self.root}",
            hint="list groups with: orchestrator group list",
        )

    def add(self, config: GroupConfig, folder: str | None = None) -> Group:
        """Create groups/<folder>/ with group.yaml and the memory scaffold.

        Nothing is left behind when it fails: a retry with the same name works.
        """
        from orchestrator.groups.config import parse_group_config
        from orchestrator.memory.scaffold import scaffold_memory
        from orchestrator.templates import render

        folder = validate_folder_name(folder) if folder else folder_from_name(config.name)
        text = render(
            "group.yaml.j2",
            config=config,
            version=GROUP_FILE_VERSION,
            dumps=lambda v: json.dumps(v, ensure_ascii=False),
        )
        # Validate what we are about to write, so a bad flag never leaves a bad file.
        target = self.root / folder / GROUP_FILE
        try:
            parse_group_config(text, target, self.providers())
        except InvalidConfig as exc:  # name the setting, not a line of an unwritten file
            setting = re.sub(rf"^{re.escape(str(target))}:\d+: ", "", exc.message)
            raise InvalidConfig(f"cannot add the group: {setting}", hint=exc.hint) from None
        data = text.encode("utf-8")
        self.home.ensure_writable()
        path = self.root / folder
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            raise GroupExists(
                f"{path} already exists",
                hint="pick another --folder, or remove it with: orchestrator group remove",
            ) from None
        try:
            with ConfinedDir.open(self.root, folder) as group_dir:
                group_dir.create_exclusive(GROUP_FILE, data, owner=None)
                for name in (INSTRUCTIONS_FILE, LEARNED_FILE):  # host-owned, never mounted
                    group_dir.make_file(name, owner=None)
            scaffold_memory(path)
        except BaseException as exc:
            with ConfinedDir.open(self.root) as groups:
                groups.remove_tree(folder)
            if isinstance(exc, OSError):
                raise HomeNotWritable(
                    f"cannot create {path}: {exc.strerror or exc}", hint="nothing was left behind"
                ) from None
            raise
        fsync_dir(self.root)
        return self.load(folder)

    def remove(self, group: Group, *, purge: bool) -> Path | None:
        """Archive groups/<folder>/ under groups/.removed/ (or delete it when ``purge``);
        its runtime folder (state/run/<folder>/) goes either way.

        Returns the archive path, or None when purged.
        """
        mode = os.lstat(group.path).st_mode
        if not stat.S_ISDIR(mode):
            raise InvalidConfig(f"{group.path} is not a real folder; refusing to remove it")
        self.remove_runtime_dir(group.folder)
        if purge:
            with ConfinedDir.open(self.root) as groups:
                groups.remove_tree(group.folder)
            fsync_dir(self.root)
            self._set_aside_skills(group.folder, None)
            return None
        archive_root = self.root / REMOVED_DIR
        archive_root.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        target = archive_root / f"{group.folder}-{stamp}"
        suffix = 1
        while target.exists():
            suffix += 1
            target = archive_root / f"{group.folder}-{stamp}-{suffix}"
        os.rename(group.path, target)
        fsync_dir(self.root)
        self._set_aside_skills(group.folder, target.name)
        return target

    def _skills_dir(self, folder: str) -> Path:
        from orchestrator.skills.catalog import GROUP_SKILLS

        return self.home.root / GROUP_SKILLS / folder

    def _set_aside_skills(self, folder: str, archive: str | None) -> None:
        """The skills installed for a removed group go with it (beside its archive, or
        deleted with a purge): a later group of the same folder must not see them."""
        import shutil

        skills = self._skills_dir(folder)
        if not skills.is_dir() or skills.is_symlink():
            return
        if archive is None:
            shutil.rmtree(skills)
            return
        aside = skills.parent / REMOVED_DIR
        aside.mkdir(exist_ok=True)
        os.rename(skills, aside / archive)
        fsync_dir(skills.parent)

    def removed(self) -> list[Path]:
        """Archives of removed groups, oldest first."""
        archive_root = self.root / REMOVED_DIR
        if not archive_root.is_dir():
            return []
        return sorted(
            (p for p in archive_root.iterdir() if p.is_dir() and not p.is_symlink()),
            key=_archive_age,
        )

    def restore(self, name: str) -> Group:
        """Bring back a removed group: NAME is an archive folder's name, or a group folder
        (its newest archive). The folder must be free again."""
        archives = self.removed()
        matches = [a for a in archives if a.name == name] or [
            a
            for a in archives
            if re.fullmatch(rf"{re.escape(name)}-\d{{8}}T\d{{6}}Z(-\d+)?", a.name)
        ]
        if not matches:
            shown = ", ".join(a.name for a in archives[-10:]) or "none"
            raise GroupNotFound(
                f"no removed group {name!r} in {self.root / REMOVED_DIR}",
                hint=f"removed groups: {shown}",
            )
        archive = matches[-1]
        folder = re.sub(r"-\d{8}T\d{6}Z(-\d+)?$", "", archive.name)
        validate_folder_name(folder)
        target = self.root / folder
        if target.exists():
            raise GroupExists(
                f"{target} exists; restoring {archive.name} would replace it",
                hint="remove or rename that group first",
            )
        os.rename(archive, target)
        fsync_dir(self.root)
        skills = self._skills_dir(folder)
        aside = skills.parent / REMOVED_DIR / archive.name
        if aside.is_dir() and not skills.exists():
            os.rename(aside, skills)
            fsync_dir(skills.parent)
        return self.load(folder)

    def remove_runtime_dir(self, folder: str) -> None:
        """Delete state/run/<folder>/ (the container could write it: done by descriptor)
        and the group's search index."""
        from orchestrator.memory.search import remove_index

        remove_index(self.home.state_dir, folder)  # derived: rebuilt if the group returns
        run_root = self.home.runtime_dir(folder).parent
        if not run_root.is_dir():
            return
        with ConfinedDir.open(run_root) as runs:
            runs.remove_tree(folder)


def _archive_age(archive: Path) -> tuple[str, str, int]:
    """Sort key of an archive, oldest first: its time, its folder, then its count (so "-10"
    comes after "-2"); a folder not named like an archive comes first."""
    match = _ARCHIVE_STAMP.search(archive.name)
    if not match:
        return ("", archive.name, 0)
    return (match[1], archive.name[: match.start()], int(match[2] or 1))
