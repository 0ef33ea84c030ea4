"""``memory lint``: findings about a group's OKF memory tree, and metadata-only repairs.

Validity follows the OKF v0.1 draft: every non-reserved ``.md`` file has parseable YAML
frontmatter with a non-empty ``type``. Writing ``type`` first and keeping an ``index.md``
per folder are our conventions and are never reported as errors.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote

from orchestrator.fsatomic import write_atomic
from orchestrator.limits import MEMORY_FILE_BUDGET_CHARS
from orchestrator.memory.okf import (
    DAILY_DIR,
    RESERVED_NAMES,
    Frontmatter,
    concept_type,
    split_frontmatter,
)

INJECTED_FILES = ("index.md", "system/definition.md")
FINDING_KINDS = (
    "frontmatter-missing",
    "frontmatter-invalid",
    "type-missing",
    "unreachable",
    "over-budget",
    "symlink",
    "not-utf8",
    "unreadable",
)
_LINK_RE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
_REF_RE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_SCHEME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
_EMPTY_TYPE_RE = re.compile(
    r"^type:[ \t]*(?:\"\"|''|~|null|Null|NULL)?[ \t]*(?:#.*)?$", re.MULTILINE
)


@dataclass(frozen=True)
class Finding:
    kind: str
    path: str  # relative to memory/, POSIX separators
    message: str
    fixable: bool = False


@dataclass
class LintReport:
    memory_dir: str
    files_checked: int = 0
    findings: list[Finding] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "memory_dir": self.memory_dir,
            "files_checked": self.files_checked,
            "findings": [asdict(f) for f in self.findings],
            "fixed": self.fixed,
        }


@dataclass
class _Scanned:
    texts: dict[str, str] = field(default_factory=dict)  # rel path -> text of each .md
    folders: set[str] = field(default_factory=set)


def _scan(memory_dir: Path, report: LintReport) -> _Scanned:
    scanned = _Scanned()
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        scanned.folders.add(rel_dir)
        try:
            entries = sorted(os.scandir(memory_dir / rel_dir), key=lambda e: e.name)
        except OSError as exc:
            report.findings.append(Finding("unreadable", rel_dir or ".", f"{exc.strerror}"))
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            if entry.is_symlink():
                report.findings.append(
                    Finding(
                        "symlink",
                        rel,
                        f"symlink to {os.readlink(entry.path)!r}; memory must hold real "
                        "files (the hook and the agent never follow symlinks)",
                    )
                )
            elif entry.is_dir(follow_symlinks=False):
                stack.append(rel)
            elif entry.name.endswith(".md") and entry.is_file(follow_symlinks=False):
                report.files_checked += 1
                try:
                    raw = Path(entry.path).read_bytes()
                except OSError as exc:
                    report.findings.append(Finding("unreadable", rel, f"{exc.strerror}"))
                    continue
                try:
                    scanned.texts[rel] = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    report.findings.append(
                        Finding(
                            "not-utf8",
                            rel,
                            f"not UTF-8 text (invalid byte at offset {exc.start}); "
                            "save it as UTF-8",
                        )
                    )
    return scanned


def _links(text: str, rel: str, scanned: _Scanned) -> list[str]:
    base = posixpath.dirname(rel)
    out: list[str] = []
    for target in [*_LINK_RE.findall(text), *_REF_RE.findall(text)]:
        if _SCHEME_RE.match(target) or target.startswith("#"):
            continue
        target = unquote(target.split("#", 1)[0].split("?", 1)[0])
        if not target:
            continue
        joined = target.lstrip("/") if target.startswith("/") else posixpath.join(base, target)
        path = posixpath.normpath(joined)
        if path.startswith("../") or path == "..":
            continue
        if path in scanned.folders or path == ".":
            path = "index.md" if path == "." else posixpath.join(path, "index.md")
        out.append(path)
    return out


def _reachable(scanned: _Scanned) -> set[str]:
    seen: set[str] = set()
    todo = ["index.md"] if "index.md" in scanned.texts else []
    while todo:
        rel = todo.pop()
        if rel in seen or rel not in scanned.texts:
            continue
        seen.add(rel)
        todo.extend(_links(scanned.texts[rel], rel, scanned))
    return seen


def derived_type(rel: str) -> str:
    """A ``type`` for a file from its folder: 'projects/x.md' -> 'project'; root -> 'note'."""
    folder = posixpath.basename(posixpath.dirname(rel))
    slug = re.sub(r"[^a-z0-9]+", "-", folder.lower()).strip("-")
    if not slug:
        return "note"
    if len(slug) > 3 and slug.endswith("s") and not slug.endswith("ss"):
        slug = slug[:-1]
    return slug


def _check_file(rel: str, text: str, report: LintReport) -> None:
    name = posixpath.basename(rel)
    if rel in INJECTED_FILES:
        size = len(text.strip())
        if size > MEMORY_FILE_BUDGET_CHARS:
            report.findings.append(
                Finding(
                    "over-budget",
                    rel,
                    f"{size} characters; only the first {MEMORY_FILE_BUDGET_CHARS} are "
                    "injected. Move detail into linked files",
                )
            )
    if name in RESERVED_NAMES:
        return
    front = split_frontmatter(text)
    if front.status == "none":
        report.findings.append(
            Finding(
                "frontmatter-missing",
                rel,
                "no YAML frontmatter; OKF needs one with a type",
                fixable=True,
            )
        )
    elif front.status == "invalid":
        report.findings.append(
            Finding(
                "frontmatter-invalid",
                rel,
                f"frontmatter cannot be parsed: {front.error}",
                fixable=True,
            )
        )
    elif concept_type(front) is None:
        value = (front.data or {}).get("type")
        fixable = value is None or value == ""
        report.findings.append(
            Finding(
                "type-missing",
                rel,
                "frontmatter has no non-empty string 'type'"
                + ("" if fixable else f" (got {value!r}; set it by hand)"),
                fixable=fixable,
            )
        )


def _fixed_text(rel: str, text: str, front: Frontmatter) -> str | None:
    kind = derived_type(rel)
    if front.status == "none":
        return f"---\ntype: {kind}\n---\n\n{text}"
    if front.status == "invalid":
        today = time.strftime("%Y-%m-%d", time.gmtime())
        body = text[front.block_end :].lstrip("\n")
        fence = "````" if "```" in front.raw else "```"
        return (
            f"---\ntype: {kind}\n---\n\n"
            f"> Note ({today}): the frontmatter of this file could not be parsed and was "
            f"moved here unchanged by `memory lint --fix`.\n\n"
            f"{fence}yaml\n{front.raw.rstrip()}\n{fence}\n\n{body}"
        )
    if front.data is not None and "type" not in front.data:
        return f"{text[: front.raw_start]}type: {kind}\n{text[front.raw_start :]}"
    matches = list(_EMPTY_TYPE_RE.finditer(front.raw))
    if len(matches) != 1:
        return None
    start = front.raw_start + matches[0].start()
    end = front.raw_start + matches[0].end()
    return f"{text[:start]}type: {kind}{text[end:]}"


def lint_memory(memory_dir: Path, *, fix: bool = False) -> LintReport:
    """Lint the tree at ``memory_dir``; with ``fix``, repair metadata then lint again."""
    report = LintReport(str(memory_dir))
    try:
        mode = os.lstat(memory_dir).st_mode
    except FileNotFoundError:
        report.findings.append(
            Finding(
                "unreadable", ".", "memory folder is missing; run: orchestrator memory scaffold"
            )
        )
        return report
    if not stat.S_ISDIR(mode):
        report.findings.append(Finding("symlink", ".", "memory is not a real folder"))
        return report
    scanned = _scan(memory_dir, report)
    for rel, text in scanned.texts.items():
        _check_file(rel, text, report)
    reachable = _reachable(scanned)
    for rel in sorted(scanned.texts):
        daily = rel.startswith(DAILY_DIR + "/")  # reached by date, not by links
        if posixpath.basename(rel) not in RESERVED_NAMES and rel not in reachable and not daily:
            report.findings.append(
                Finding(
                    "unreachable",
                    rel,
                    "not reachable by links from index.md; link it from its folder index",
                )
            )
    if fix and any(f.fixable for f in report.findings):
        fixed: list[str] = []
        for finding in report.findings:
            if not finding.fixable:
                continue
            text = scanned.texts[finding.path]
            new = _fixed_text(finding.path, text, split_frontmatter(text))
            if new is None:
                continue
            target = memory_dir / finding.path
            write_atomic(target, new, mode=stat.S_IMODE(os.lstat(target).st_mode))
            fixed.append(finding.path)
        again = lint_memory(memory_dir)
        again.fixed = fixed
        return again
    report.findings.sort(key=lambda f: (f.path, FINDING_KINDS.index(f.kind)))
    return report
