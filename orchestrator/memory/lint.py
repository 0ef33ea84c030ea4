"""``memory lint``: findings about a group's OKF memory tree, and metadata-only repairs.

Validity follows the OKF v0.1 draft: every non-reserved ``.md`` file has parseable YAML
frontmatter with a non-empty ``type``. Writing ``type`` first and keeping an ``index.md``
per folder are our conventions and are never reported as errors.
"""

from __future__ import annotations

import os
import posixpath
import re
import reprlib
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote

from orchestrator.confined import INHERIT, ConfinedDir, UnsafePath, kind_of
from orchestrator.limits import MEMORY_FILE_BUDGET_CHARS, MEMORY_FILE_READ_MAX_BYTES
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
    "not-regular",
    "too-large",
    "unreadable",
)
_LINK_RE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*[\"'])?\s*\)")
_REF_RE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_SCHEME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# A frontmatter value shown in a finding: bounded, since YAML aliases let a few hundred
# bytes name a list of 9**9 items, which repr() would write out in full.
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 2, 200, 200
_EMPTY_TYPE_RE = re.compile(  # a line ending in \r\n too (its \r is kept)
    r"^type:[ \t]*(?:\"\"|''|~|null|Null|NULL)?[ \t]*(?:#[^\r\n]*)?(?=\r?$)", re.MULTILINE
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


def _scan(memory: ConfinedDir, report: LintReport) -> _Scanned:
    """Read every Markdown file through the confined layer: nothing is followed, special
    files are reported without being opened for long, reads are capped."""
    scanned = _Scanned()
    for rel_dir, folder, entries in memory.walk(hidden=False):
        scanned.folders.add(rel_dir)
        for entry in entries:
            rel = posixpath.join(rel_dir, entry.name) if rel_dir else entry.name
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue  # removed since it was listed
            if stat.S_ISLNK(mode):
                try:
                    target = os.readlink(entry.name, dir_fd=folder.fd)
                except OSError:
                    target = "?"
                report.findings.append(
                    Finding(
                        "symlink",
                        rel,
                        f"symlink to {target!r}; memory must hold real files (the hook and "
                        "the host never follow symlinks)",
                    )
                )
            elif stat.S_ISDIR(mode):
                continue
            elif not stat.S_ISREG(mode):
                report.findings.append(
                    Finding(
                        "not-regular",
                        rel,
                        f"{kind_of(mode)}; memory holds only regular files and folders",
                    )
                )
            elif entry.name.endswith(".md"):
                report.files_checked += 1
                _read(folder, entry.name, rel, scanned, report)
    return scanned


def _read(folder: ConfinedDir, name: str, rel: str, scanned: _Scanned, report: LintReport) -> None:
    try:
        raw = folder.read_bytes(name, MEMORY_FILE_READ_MAX_BYTES)
    except UnsafePath as exc:
        kind = "not-regular" if exc.kind else "too-large"
        report.findings.append(Finding(kind, rel, exc.reason))
        return
    except OSError as exc:
        report.findings.append(Finding("unreadable", rel, f"{exc.strerror}"))
        return
    try:
        scanned.texts[rel] = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        report.findings.append(
            Finding(
                "not-utf8",
                rel,
                f"not UTF-8 text (invalid byte at offset {exc.start}); save it as UTF-8",
            )
        )


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
                + ("" if fixable else f" (got {_SHOWN.repr(value)}; set it by hand)"),
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
        inserted = f"{text[: front.raw_start]}type: {kind}\n{text[front.raw_start :]}"
        if concept_type(split_frontmatter(inserted)) == kind:
            return inserted
        # a mapping that takes no line before it ({a: 1}, or indented): written anew
        import yaml

        block = yaml.safe_dump({"type": kind, **front.data}, sort_keys=False, allow_unicode=True)
        return f"{text[: front.raw_start]}{block}{text[front.raw_start + len(front.raw) :]}"
    matches = list(_EMPTY_TYPE_RE.finditer(front.raw))
    if len(matches) != 1:
        return None
    start = front.raw_start + matches[0].start()
    end = front.raw_start + matches[0].end()
    fixed = f"{text[:start]}type: {kind}{text[end:]}"
    # the line set may not be the one YAML reads (a type given twice, once quoted)
    return fixed if concept_type(split_frontmatter(fixed)) == kind else None


def lint_memory(memory_dir: Path, *, fix: bool = False) -> LintReport:
    """Lint the tree at ``memory_dir``; with ``fix``, repair metadata then lint again.

    ``memory_dir``'s parent is trusted (the group folder); everything in it is read and
    written through the confined file layer.
    """
    report = LintReport(str(memory_dir))
    try:
        memory = ConfinedDir.open(memory_dir.parent, memory_dir.name)
    except FileNotFoundError:
        report.findings.append(
            Finding(
                "unreadable", ".", "memory folder is missing; run: orchestrator memory scaffold"
            )
        )
        return report
    except UnsafePath as exc:
        report.findings.append(Finding("symlink", ".", f"memory {exc.reason}"))
        return report
    with memory:
        scanned = _scan(memory, report)
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
            fixed = _fix(memory, scanned, report)
            again = lint_memory(memory_dir)
            again.fixed = fixed
            return again
    report.findings.sort(key=lambda f: (f.path, FINDING_KINDS.index(f.kind)))
    return report


def _fix(memory: ConfinedDir, scanned: _Scanned, report: LintReport) -> list[str]:
    """Write the repaired texts; each goes through the folders again without following
    links, so a folder swapped for a symlink since the scan is refused, not written."""
    fixed: list[str] = []
    for finding in report.findings:
        if not finding.fixable:
            continue
        text = scanned.texts[finding.path]
        new = _fixed_text(finding.path, text, split_frontmatter(text))
        if new is None:
            continue
        st = memory.lstat(finding.path)
        if st is None or not stat.S_ISREG(st.st_mode):
            continue  # changed since the scan: left for the next run
        try:
            memory.write_atomic(finding.path, new, mode=stat.S_IMODE(st.st_mode), owner=INHERIT)
        except OSError:
            continue
        fixed.append(finding.path)
    return fixed
