"""Check a skill folder the operator installs, and say what its scripts do that an
operator should look at.

A folder is refused, with every problem named (the file, the key or value, and what
would be valid), when: its SKILL.md is missing, too large, not UTF-8 or its frontmatter
is wrong (``name`` and ``description`` are required text; ``name`` follows the Agent
Skills grammar and is the folder's name; ``host: true`` is refused, since a third-party
skill never runs on the host); it holds a symlink, a FIFO, a device or a socket; a
file's name is not plain text; or it passes the size or file-count caps. Nothing is
changed by a check.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import BadInput
from orchestrator.skills.manifest import (
    MANIFEST,
    MANIFEST_MAX_BYTES,
    Manifest,
    ManifestError,
    parse,
    read_text,
)
from orchestrator.validate import shown_name, text_problem

FOLDER_MAX_BYTES = 8 * 1024 * 1024  # every file of a skill together
FOLDER_MAX_FILES = 512  # files and folders
FOLDER_MAX_DEPTH = 8
SCAN_MAX_BYTES = 256 * 1024  # of one file, looked at for warnings
WARNINGS_MAX = 40

# what a script does that the operator should read before installing
# Each pattern takes time linear in the line (a line may be 256 KiB): a pipe is found
# from the segment it ends, at the first fetch of that segment (atomic, so no other is
# tried: a later one has the same pipe ahead of it), and a decode from the line's first.
RISKS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), what)
    for pattern, what in (
        (
            r"(?:^|\|)(?>[^|\n]*?\b(?:curl|wget|fetch)\b)[^|\n]*+\|\s*(sudo\s+)?(ba|z|da|k)?sh\b",
            "fetches code and runs it",
        ),
        (
            r"(?:^|\|)(?>[^|\n]*?\b(?:curl|wget)\b)[^|\n]*+\|\s*(sudo\s+)?python[0-9.]*\b",
            "fetches code and runs it",
        ),
        (r"^(?>.*?base64\s+(?:-d|--decode))[^\n]*\|\s*(ba|z)?sh\b", "decodes code and runs it"),
        (r"\b(pip[0-9.]*|uv\s+pip|pipx)\s+install\b", "installs Python packages"),
        (r"\b(npm|pnpm|yarn)\s+(install|add|i)\b|\bnpx\s", "installs or runs npm packages"),
        (r"\b(apt|apt-get|apk|dnf|yum)\s+(install|add)\b", "installs system packages"),
        (r"(^|[^\w.])eval\b", "evaluates text as code (eval)"),
        (r"\bexec\s*\(", "evaluates text as code (exec)"),
        (r"~/\.ssh|\$HOME/\.ssh|\.ssh/(id_|authorized_keys|known_hosts)", "reads SSH keys"),
        (r"\.aws/credentials|\.aws/config", "reads AWS credentials"),
        (r"/etc/(shadow|passwd|sudoers)", "reads system account files"),
        (
            r"\.netrc|\.docker/config\.json|\.kube/config|\.gnupg|\.git-credentials",
            "reads credential files",
        ),
        (r"(^|[\s\"'/])\.env\b|\w\.env\b", "reads .env files"),
        (
            r"/secrets?\b|\bsecrets?/|\bsecrets?\.(json|ya?ml|toml|txt|env)\b",
            "reads a secrets file",
        ),
        (
            r"\b(private[_-]?key|id_rsa|id_ed25519|credentials\.json)\b",
            "reads private keys or credentials",
        ),
        (r"/var/run/docker\.sock|docker\.sock", "talks to a Docker socket"),
        (r"\bnc\b\s+-e|/dev/tcp/", "opens a raw network connection"),
    )
)


@dataclass(frozen=True)
class Checked:
    """A folder that passed: its manifest, its files (relative paths, folders with a
    trailing slash), their total size and what the operator should look at."""

    manifest: Manifest
    files: tuple[str, ...]
    total_bytes: int
    scripts: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)


class SkillRefused(BadInput):
    """A skill folder that cannot be installed; the message lists every reason."""

    def __init__(self, folder: Path, problems: list[str]) -> None:
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"skill folder {shown_name(str(folder))} is refused; nothing was installed:\n{lines}",
            hint="fix what is listed and run the command again; a skill is a folder "
            "NAME/ with a SKILL.md whose frontmatter has name: NAME and description:",
        )
        self.problems = problems


def check_folder(folder: Path, *, installed: bool = True, name: str | None = None) -> Checked:
    """Check the skill in ``folder``; SkillRefused listing every problem.
    ``installed``: a skill the operator adds (``host: true`` refused); ``name``: the
    name it must have (default: the folder's)."""
    problems: list[str] = []
    shown = shown_name(str(folder))
    try:
        st = os.lstat(folder)
    except OSError as exc:
        raise SkillRefused(folder, [f"{shown}: {exc.strerror}; expected a folder"]) from None
    if stat.S_ISLNK(st.st_mode):
        raise SkillRefused(folder, [f"{shown}: is a symlink; give the real folder"])
    if not stat.S_ISDIR(st.st_mode):
        raise SkillRefused(
            folder, [f"{shown}: is not a folder; a skill is a folder with a SKILL.md"]
        )
    files, total, scripts = _walk(folder, problems)
    manifest = _manifest(folder, name or folder.name, installed, problems)
    if problems or manifest is None:
        raise SkillRefused(folder, problems)
    warnings = _warnings(folder, files)
    if not manifest.body.strip():
        warnings.insert(0, f"{MANIFEST}: the body is empty: the model gets no instructions")
    return Checked(manifest, tuple(files), total, tuple(scripts), tuple(warnings[:WARNINGS_MAX]))


def _manifest(folder: Path, name: str, installed: bool, problems: list[str]) -> Manifest | None:
    try:
        text = read_text(folder / MANIFEST, MANIFEST_MAX_BYTES)
        manifest = parse(text, name)
    except ManifestError as exc:
        problems.append(f"{MANIFEST}: {exc}")
        return None
    if installed and manifest.front.get("host") is True:
        problems.append(
            f"{MANIFEST}: host: true is refused: an installed skill runs only in the "
            "group's container, never on the host; remove the key (or set host: false)"
        )
    return manifest


def _walk(folder: Path, problems: list[str]) -> tuple[list[str], int, list[str]]:
    files: list[str] = []
    scripts: list[str] = []
    total = 0
    for parent, dirs, names in os.walk(folder, followlinks=False):
        base = Path(parent)
        depth = len(base.relative_to(folder).parts)
        for name in sorted(dirs) + sorted(names):
            path = base / name
            relative = path.relative_to(folder).as_posix()
            if problem := text_problem(name):
                problems.append(f"{shown_name(relative)}: refused: its name {problem}")
                continue
            try:
                st = os.lstat(path)
            except OSError as exc:
                problems.append(f"{relative}: cannot be read ({exc.strerror})")
                continue
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                target = os.readlink(path)
                problems.append(
                    f"{relative}: is a symlink (to {shown_name(target)}); a skill may hold "
                    "no symlinks: replace it with the file itself"
                )
            elif stat.S_ISDIR(mode):
                files.append(relative + "/")
                if depth + 1 >= FOLDER_MAX_DEPTH:
                    problems.append(
                        f"{relative}/: nested deeper than {FOLDER_MAX_DEPTH} folders; "
                        "keep it flatter"
                    )
            elif stat.S_ISREG(mode):
                files.append(relative)
                total += st.st_size
                if mode & 0o111 or _shebang(path):
                    scripts.append(relative)
            else:
                problems.append(
                    f"{relative}: is {_kind(mode)}; a skill holds only regular files and folders"
                )
        dirs[:] = [d for d in dirs if (base / d).is_dir() and not (base / d).is_symlink()]
        if len(files) > FOLDER_MAX_FILES:
            problems.append(f"more than {FOLDER_MAX_FILES} files and folders; keep at most that")
            break
    if total > FOLDER_MAX_BYTES:
        problems.append(
            f"the files come to {total} bytes; a skill may hold at most "
            f"{FOLDER_MAX_BYTES // (1024 * 1024)} MiB"
        )
    return files, total, scripts


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _shebang(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == b"#!"
    except OSError:
        return False


def _warnings(folder: Path, files: list[str]) -> list[str]:
    """``file:line: what it does`` for each risky line (one per kind and file)."""
    out: list[str] = []
    for relative in files:
        if relative.endswith("/"):
            continue
        try:
            with open(folder / relative, "rb") as handle:
                data = handle.read(SCAN_MAX_BYTES)
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            out.append(f"{relative}: a binary file: it cannot be read here; know where it is from")
            continue
        seen: set[str] = set()
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            for pattern, what in RISKS:
                if what not in seen and pattern.search(line):
                    seen.add(what)
                    out.append(f"{shown_name(relative)}:{number}: {what}: {_snippet(line)}")
    return out


def _snippet(line: str, limit: int = 100) -> str:
    text = shown_name(" ".join(line.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"
