"""Fuzzing the readers of Markdown frontmatter, which the container writes: OKF concept
files in the memory tree (orchestrator/memory/okf.py split_frontmatter, read by the
host's ``memory lint`` in orchestrator/memory/lint.py) and a skill's SKILL.md
(orchestrator/skills/manifest.py).

split_frontmatter "never raises" (its docstring) and its offsets describe the text;
``memory lint --fix`` repairs what it calls fixable so that a second lint finds it
fixed. A SKILL.md parses to a Manifest or raises ManifestError ("the message names the
key and says what would be valid"), in bounded time: the alias bombs below name 9**10
values, and a reader that walked them would run into the suite's per-test timeout.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.memory.lint import LintReport, _check_file, _fixed_text
from orchestrator.memory.okf import concept_type, split_frontmatter
from orchestrator.memory.scaffold import scaffold_memory
from orchestrator.skills.manifest import Manifest, ManifestError, parse
from tests.fuzzing import fuzz, mutated_text


def scaffolded() -> list[str]:
    """The memory files a new group starts with (their frontmatter as the release writes
    it)."""
    with tempfile.TemporaryDirectory() as tmp:
        scaffold_memory(Path(tmp), owner=None)
        return [p.read_text() for p in sorted((Path(tmp) / "memory").rglob("*.md"))]


OKF_SEEDS = [
    *scaffolded(),
    "---\ntype: person\ntitle: Alice\naliases: [Al]\nupdated: 2026-01-02\n---\n\n# Alice\n",
    "---\r\ntype: \r\n---\r\nbody\r\n",
    "\ufeff---\ntype: ''\n...\nbody\n",
    "---\n{a: 1}\n---\n",
    "---\n- a\n---\n",
    "---\nunclosed: yes\n",
    "no frontmatter\n---\nx\n",
]
LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
)
texts = st.one_of(mutated_text(OKF_SEEDS, max_edits=8), st.text(max_size=60))


@fuzz(300)
@given(text=texts)
@example(text="---\n" + "[" * 5000 + "\n---\n").via("deep nesting")
@example(text="---\ntype: &a [*a]\n---\n").via("alias loop")
@example(text="---\n" + LAUGHS + "type: *a9\n---\n").via("alias bomb")
@example(text="---\ntype: !!python/name:os.system\n---\n").via("unsafe tag")
@example(text="---\n? [a]\n: b\n---\n").via("complex key")
@example(text="---\ntype: x\n---").via("closing at the end")
def test_frontmatter_is_split_without_raising(text: str) -> None:
    front = split_frontmatter(text)
    assert front.status in ("none", "ok", "invalid")
    assert 0 <= front.raw_start <= front.block_end <= len(text)
    assert text[front.raw_start : front.raw_start + len(front.raw)] == front.raw
    assert (front.data is not None) == (front.status == "ok")
    assert (front.error is not None) == (front.status == "invalid")
    concept_type(front)
    report = LintReport("memory")
    _check_file("people/alice.md", text, report)
    for finding in report.findings:
        assert finding.message


@fuzz(300)
@given(text=texts)
@example(text="---\n{a: 1}\n---\nbody\n").via("a flow mapping without type")
@example(text="---\ntitle: x\n---\n").via("no type")
@example(text="---\ntype:\n---\n").via("an empty type")
@example(text="---\nbroken: [\n---\n```\nbody\n").via("invalid, a fence in the body")
def test_what_lint_fix_repairs_lints_clean(text: str) -> None:
    # lint_memory's --fix: repair what is fixable, then lint again (memory/lint.py).
    report = LintReport("memory")
    _check_file("people/alice.md", text, report)
    if not any(f.fixable for f in report.findings):
        return
    fixed = _fixed_text("people/alice.md", text, split_frontmatter(text))
    if fixed is None:  # an empty type given twice: which to set is unclear, left alone
        return
    front = split_frontmatter(fixed)
    assert front.status == "ok", (fixed, front.error)
    assert concept_type(front) is not None, fixed


SKILL = """---
name: pdf-tools
description: Read, split and merge PDF files; use when a user sends a PDF.
host: false
license: MIT
metadata: {author: someone, version: "1.0"}
---

# pdf-tools

Run `scripts/split.py FILE` to split a PDF into pages.
"""
SKILL_SEEDS = [SKILL, (Path(__file__).parents[1] / "skills/migrate-memory/SKILL.md").read_text()]


@fuzz(300)
@given(text=mutated_text(SKILL_SEEDS, max_edits=8), folder=st.sampled_from([None, "pdf-tools"]))
@example(text=SKILL, folder="pdf-tools")
@example(text="---\n" + LAUGHS + "name: *a9\n---\n", folder=None).via("alias bomb")
@example(text="---\nname: pdf\ndescription: &d [*d]\n---\n", folder=None).via("alias loop")
@example(text="---\nname: pdf\ndescription: " + "[" * 5000 + "\n---\n", folder=None)
@example(text="---\nname: pdf\ndescription: x\nhost: *h\n---\n", folder=None)
def test_a_skill_manifest_parses_or_is_refused_clearly(text: str, folder: str | None) -> None:
    try:
        manifest = parse(text, folder)
    except ManifestError as exc:
        assert str(exc) and len(str(exc)) < 2000, str(exc)[:200]
    else:
        assert isinstance(manifest, Manifest) and manifest.description.strip()
