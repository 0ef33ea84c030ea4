"""Exact behaviour of memory consolidation's parts (memory/consolidate.py), driven
directly: the days read, sources and their taint, note lines, what memory's files
teach a run, the history's word on writers, the model's prompt, its answer and each
proposal checked, provenance, the recurring fallback, the appended files and the log
entry, character for character."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from orchestrator.confined import ConfinedDir, open_group_dir
from orchestrator.limits import CONSOLIDATE_MAX_DAYS, MEMORY_FILE_BUDGET_CHARS
from orchestrator.memory import consolidate as mc
from orchestrator.memory.history import Change, HistoryError, Provenance
from orchestrator.relay.consolidation import FACTS

A = " — "  # the attribution of memory flushes
SRC = "; chat kitchen; 2026-12-01 14:05"


def line(
    number: int, day: str = "2026-12-01", at: int = 1, text: str = "A fact.", **more: Any
) -> mc.NoteLine:
    return mc.NoteLine(number, day, at, text, **more)


# the days and the sources


def test_the_window_is_today_and_the_days_before_oldest_first() -> None:
    today = date(2026, 12, 3)
    assert mc.window(today, 1) == [today]
    assert mc.window(today, 3) == [date(2026, 12, 1), date(2026, 12, 2), today]
    assert len(mc.window(today, CONSOLIDATE_MAX_DAYS)) == CONSOLIDATE_MAX_DAYS
    for days in (0, CONSOLIDATE_MAX_DAYS + 1):
        with pytest.raises(mc.ConsolidationError) as refused:
            mc.window(today, days)
        assert refused.value.message == f"days must be 1 to {CONSOLIDATE_MAX_DAYS}, not {days}"


def test_a_source_is_three_parts_of_senders_a_chat_and_a_time() -> None:
    assert mc.parse_source(" alice (creator) ,  bob b (member) ; chat k ; t ") == (
        ("alice", "creator"),
        ("bob b", "member"),
    )
    assert mc.parse_source(" unknown ; chat k; t") == ()
    assert mc.parse_source("alice (creator); chatroom; t") is None
    assert mc.parse_source("alice (creator); chat k") is None
    assert mc.parse_source("alice (Creator); chat k; t") is None
    assert mc.parse_source("alice (creator),bob (member); chat k; t") == (
        ("alice (creator),bob", "member"),
    )


def test_the_taint_of_a_lines_senders() -> None:
    assert mc.taint(()) == "no sender recorded"
    assert mc.taint((("a", "creator"), ("e", "guest"), ("z", "visitor"))) == "e (guest) took part"
    assert mc.taint((("a", "creator"), ("z" * 70, "visitor"))) == (
        f"{'z' * 59}… (visitor) is neither a creator nor a member"
    )
    assert mc.taint((("a", "member"),)) is None


def test_a_name_is_shown_escaped_and_cut() -> None:
    assert mc._shown("a\x1bb") == "a\\u{001b}b"
    assert mc._shown("x" * 60) == "x" * 60
    assert mc._shown("x" * 61) == "x" * 59 + "…"
    assert mc._shown("x" * 5, 4) == "xxx…"


# note lines


def test_note_lines_are_numbered_after_those_before_with_their_file_lines() -> None:
    text = (
        "---\ntype: daily-note\n---\n\n# 2026-12-01\n\n"
        f"- Ann is a vet.{A}alice (creator){SRC}\n"
        "\n"
        "- Written by hand.\n"
        f"* Odd source.{A}somebody\n"
        f"1. Guest said.{A}eve (guest){SRC}\n"
    )
    assert mc._note_lines(text, "2026-12-01", 4, FACTS) == [
        mc.NoteLine(5, "2026-12-01", 7, "Ann is a vet.", (("alice", "creator"),)),
        mc.NoteLine(
            6,
            "2026-12-01",
            9,
            "Written by hand.",
            reason="no source (written by hand or by an older release): who said it is unknown",
        ),
        mc.NoteLine(
            7,
            "2026-12-01",
            10,
            "Odd source.",
            reason="its source is not in the shape memory flushes write: who said it is unknown",
        ),
        mc.NoteLine(
            8, "2026-12-01", 11, "Guest said.", (("eve", "guest"),), "eve (guest) took part"
        ),
    ]


def test_a_note_without_or_with_broken_front_matter_counts_from_its_first_line() -> None:
    text = f"- Ann.{A}alice (creator){SRC}\n"
    assert mc._note_lines(text, "d", 0, FACTS) == [
        mc.NoteLine(1, "d", 1, "Ann.", (("alice", "creator"),))
    ]
    broken = f"---\nno end\n- Ann.{A}alice (creator){SRC}\n"
    assert [n.line for n in mc._note_lines(broken, "d", 0, FACTS)] == [2, 3]


def test_a_note_line_says_its_place() -> None:
    assert line(1, "2026-12-01", 7).place == "daily/2026-12-01.md line 7"


# what memory teaches a run


def test_memory_files_teach_their_citations_facts_and_titles() -> None:
    known = mc._Known()
    cited = (
        f"- Ann is a vet.{A}from daily/2026-12-01.md lines 4, 7; "
        "daily/2026-12-02.md line 2; alice (creator)\n"
    )
    mc._learn(known, "people/ann.md", "# Ann\n" + cited + "- plain line\n", FACTS)
    mc._learn(known, "log.md", "# Log\n" + f"- x{A}from daily/2026-12-03.md line 9; a\n", FACTS)
    mc._learn(
        known, "index.md", "# Memory\n" + f"- Bob.{A}from daily/2026-12-04.md line 1\n", FACTS
    )
    mc._learn(known, "notes/index.md", "# Notes\n", FACTS)
    mc._learn(known, "notes/x.md", f"# X\n- y{A}alice (creator)\n", FACTS)
    assert known.cited == {
        ("2026-12-01", 4),
        ("2026-12-01", 7),
        ("2026-12-02", 2),
        ("2026-12-03", 9),
        ("2026-12-04", 1),
    }
    assert known.facts == [("people/ann.md", "ann is a vet"), ("index.md", "bob")]
    assert known.index == "# Memory\n" + f"- Bob.{A}from daily/2026-12-04.md line 1\n"
    assert known.titles == [("people/ann.md", "Ann"), ("notes/x.md", "X")]


def test_a_files_title_is_its_front_matters_its_heading_or_its_name() -> None:
    assert mc._title("p/a.md", '---\ntitle: "  Rosa \n  R "\n---\n# Other\n') == "Rosa R"
    assert mc._title("p/a.md", "---\ntitle: 5\n---\n\n## Sub\n# Head line\n") == "Head line"
    assert mc._title("p/a.md", "---\ntitle: ' '\n---\n") == "a"
    assert mc._title("p/grandma-rosa.md", "#No space\n") == "grandma-rosa"
    assert mc._title("a.md", "# " + "t" * 120) == "t" * 99 + "…"
    assert mc._title("a.md", "# \n") == "a"


# the history's word


def change(kind: str, trust: str = "", also: tuple[str, ...] = (), sender: str = "s") -> Any:
    return SimpleNamespace(provenance=Provenance(kind, sender=sender, trust=trust, also=also))


def test_the_writer_of_a_change_decides_whether_its_lines_may_be_promoted() -> None:
    for kind in ("host", "operator", "baseline", "migration", "revert", "consolidation"):
        assert mc._writer_problem(change(kind)) is None
    for kind in ("turn", "flush"):
        assert mc._writer_problem(change(kind, "creator")) is None
        assert mc._writer_problem(change(kind, "member")) is None
        assert mc._writer_problem(change(kind, "guest", sender="e\x1b")) == (
            "the history shows a turn of e\\u{001b} (guest) wrote it, whatever its source says"
        )
        assert mc._writer_problem(change(kind, "")) == (
            "the history shows a turn of s (no trust) wrote it, whatever its source says"
        )
        assert mc._writer_problem(change(kind, "member", ("other",))) == (
            "the history shows other turns ran while it was written: whose it is is unknown"
        )
    assert mc._writer_problem(change("unattributed")) == (
        "the history shows it was written outside any turn: who wrote it is unknown"
    )
    assert mc._writer_problem(change("weird")) == "the history shows a weird change wrote it"


# the prompt and the answer


def test_the_prompt_shows_the_core_memory_the_concepts_and_the_lines() -> None:
    known = mc._Known(index="  # Memory\n- Ann.\n\n", titles=[("p/a.md", "A"), ("b.md", "B")])
    candidates = [line(3, "2026-12-01", text="One."), line(5, "2026-12-02", text="Two.")]
    message, shown = mc._prompt(candidates, known)
    assert shown == candidates
    assert message == (
        "Core memory (memory/index.md):\n\n# Memory\n- Ann.\n\n"
        "Concept files (path under memory/: title):\n- p/a.md: A\n- b.md: B\n\n"
        "Daily-note lines (number. [day] text):\n3. [2026-12-01] One.\n5. [2026-12-02] Two.\n"
    )
    empty, _ = mc._prompt([], mc._Known())
    assert empty == (
        "Core memory (memory/index.md):\n\n(empty)\n\n"
        "Concept files (path under memory/: title):\n(none yet)\n\n"
        "Daily-note lines (number. [day] text):\n\n"
    )


def test_the_prompt_shows_the_newest_lines_that_fit_and_the_first_concepts() -> None:
    row = mc.LINES_SHOWN_MAX_CHARS // 4
    candidates = [line(n, text="x" * (row - 20)) for n in range(1, 6)]
    _, shown = mc._prompt(candidates, mc._Known())
    assert [n.number for n in shown] == [2, 3, 4, 5]
    _, fit = mc._prompt([*candidates[:3], line(9, text="y" * (row - 21))], mc._Known())
    assert [n.number for n in fit] == [1, 2, 3, 9]
    titles = [(f"t{i}.md", f"T{i}") for i in range(mc.CONCEPTS_SHOWN_MAX + 2)]
    message, _ = mc._prompt([], mc._Known(titles=titles))
    assert f"- t{mc.CONCEPTS_SHOWN_MAX - 1}.md: T{mc.CONCEPTS_SHOWN_MAX - 1}\n(and 2 more)\n" in (
        message
    )
    assert f"t{mc.CONCEPTS_SHOWN_MAX}.md" not in message
    exact, _ = mc._prompt([], mc._Known(titles=titles[: mc.CONCEPTS_SHOWN_MAX]))
    assert "more)" not in exact
    long_index = "i" * (MEMORY_FILE_BUDGET_CHARS + 5)
    cut, _ = mc._prompt([], mc._Known(index=long_index))
    assert f"\n\n{'i' * MEMORY_FILE_BUDGET_CHARS}\n\n" in cut
    assert "i" * (MEMORY_FILE_BUDGET_CHARS + 1) not in cut


def test_an_answer_is_json_of_promotions_fenced_or_not() -> None:
    assert mc.parse_answer(' {"promotions": [1]} ') == [1]
    assert mc.parse_answer('```json\n{"promotions": []}\n```') == []
    assert mc.parse_answer('  ```\n{"promotions": [2]}```  ') == [2]
    with pytest.raises(mc.ConsolidationError) as refused:
        mc.parse_answer("no")
    assert refused.value.message.startswith("the model's answer is not JSON (Expecting value")
    assert refused.value.message.endswith("); nothing was changed")
    assert refused.value.hint == (
        "run again (a model may answer better the next time), or use --dry-run to "
        "see what it proposes"
    )
    for shape in ("[]", '{"promotions": {}}', '{"other": []}'):
        with pytest.raises(mc.ConsolidationError) as wrong:
            mc.parse_answer(shape)
        assert wrong.value.message == (
            'the model\'s answer is not a JSON object {"promotions": [...]}; nothing was changed'
        )


VALID = (
    "valid: index.md, or a concept file under memory/ such as people/grandma-rosa.md "
    "(lower-case names of letters, digits, '-' and '_', ending in .md; not in daily/ or "
    "system/, not log.md)"
)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, f"the target must be a path; {VALID}"),
        ("  ", f"the target must be a path; {VALID}"),
        ("a" * 118 + ".md", f"the target is longer than 120 characters; {VALID}"),
        ("/x.md", f"the target '/x.md' is not a path inside memory/; {VALID}"),
        ("a//x.md", f"the target 'a//x.md' is not a path inside memory/; {VALID}"),
        ("./x.md", f"the target './x.md' is not a path inside memory/; {VALID}"),
        ("a/../x.md", f"the target 'a/../x.md' is not a path inside memory/; {VALID}"),
        ("a/.b.md", f"the target 'a/.b.md' names a dot-file; {VALID}"),
        ("a/b/c/d/e.md", "the target 'a/b/c/d/e.md' is over 4 levels deep"),
        ("a/b.txt", f"the target 'a/b.txt' is not a lower-case .md name; {VALID}"),
        ("A/b.md", f"the target 'A/b.md' is not a lower-case .md name; {VALID}"),
        ("a/-b.md", f"the target 'a/-b.md' is not a lower-case .md name; {VALID}"),
        ("daily/x.md", f"the target 'daily/x.md' is in daily/; {VALID}"),
        ("system/x.md", f"the target 'system/x.md' is in system/; {VALID}"),
        ("a/learned-x.md", f"the target 'a/learned-x.md' names learned behaviors; {VALID}"),
        ("learned/x.md", f"the target 'learned/x.md' names learned behaviors; {VALID}"),
        ("log.md", f"the target 'log.md' is a reserved file; {VALID}"),
        ("a/index.md", f"the target 'a/index.md' is a reserved file; {VALID}"),
    ],
)
def test_a_target_that_is_not_valid_says_why(value: object, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        mc.check_target(value)
    assert str(refused.value) == message


def test_a_valid_target_is_its_path_under_memory() -> None:
    assert mc.check_target(" memory/index.md ") == "index.md"
    assert mc.check_target("a/b/c/d_9.md") == "a/b/c/d_9.md"
    assert mc.check_target("a" * 117 + ".md") == "a" * 117 + ".md"
    assert mc.check_target("notes/log-book.md") == "notes/log-book.md"
    assert mc.check_target("my-learned.md") == "my-learned.md"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "the text must be a string"),
        ("", "the text is empty"),
        ("  ", "the text is empty"),
        ("a" * 301, "the text is 301 characters; at most 300"),
        ("a\nb", "the text contains a line break: it must be one line"),
        ("a\u0085b", "the text contains the control character U+0085: it must be one line"),
        ("a\u2029b", "the text contains a line break: it must be one line"),
        ("a\u202eb", None),
        (f"a{A}b", "the text holds '—' between spaces, which separates a line from its source"),
        ("<b>x</b>", "the text must be plain: no HTML, quote, table, code or link"),
        ("> quote", "the text must be plain: no HTML, quote, table, code or link"),
        ("| a | b |", "the text must be plain: no HTML, quote, table, code or link"),
        ("`code`", "the text must be plain: no HTML, quote, table, code or link"),
        ("[a](b)", "the text must be plain: no HTML, quote, table, code or link"),
        ("a <!-- b", "the text must be plain: no HTML, quote, table, code or link"),
        ("# Head", "the text is not a fact (a heading, a marker or a question)"),
        ("Is it?", "the text is not a fact (a heading, a marker or a question)"),
    ],
)
def test_a_text_that_is_not_one_plain_fact_line_says_why(
    value: object, message: str | None
) -> None:
    with pytest.raises(ValueError) as refused:
        mc.check_text(value, FACTS)
    if message is None:
        assert str(refused.value).startswith("the text ") and "it must be one line" in str(
            refused.value
        )
    else:
        assert str(refused.value) == message


def test_a_valid_text_loses_its_bullet() -> None:
    assert mc.check_text("  - Ann is a vet.  ", FACTS) == "Ann is a vet."
    assert mc.check_text("12) " + "a" * 300, FACTS) == "a" * 300
    assert mc.check_text("a—b", FACTS) == "a—b"


def test_proposals_are_checked_each_with_its_refusal() -> None:
    lines = {
        1: line(1, "2026-12-02", 4, senders=(("alice", "creator"),)),
        2: line(2, "2026-12-01", 9, senders=(("bob", "member"), ("alice", "creator"))),
        3: line(3, reason="no sender recorded"),
        4: line(4, at=5, cited=True),
        5: line(5),
    }
    proposals: list[object] = [
        {"target": "index.md", "text": "Ann.", "from": [1, 2, 1]},
        "text",
        {"target": "x.txt", "text": "Ann.", "from": [1]},
        {"target": "p/a.md", "text": "", "from": [1]},
        {"target": "p/a.md", "text": "Ann.", "from": [3]},
    ]
    good, refused = mc.check_proposals(proposals, lines, {1, 2, 3, 4}, FACTS)
    assert good == [
        mc.Promotion(
            "index.md",
            "Ann.",
            (1, 2),
            f"Ann.{A}from daily/2026-12-01.md line 9; daily/2026-12-02.md line 4; "
            "alice (creator), bob (member)",
        )
    ]
    assert refused == [
        mc.Refusal("proposal 2", "not a JSON object with target, text and from"),
        mc.Refusal("proposal 3", f"the target 'x.txt' is not a lower-case .md name; {VALID}"),
        mc.Refusal("proposal 4 (to p/a.md)", "the text is empty"),
        mc.Refusal(
            "proposal 5 (to p/a.md)",
            "line 3 (daily/2026-12-01.md line 1) is not eligible: no sender recorded",
        ),
    ]


def test_only_the_first_proposals_are_taken() -> None:
    one = {"target": "index.md", "text": "Ann.", "from": [1]}
    lines = {1: line(1)}
    good, refused = mc.check_proposals([one] * (mc.PROPOSALS_MAX + 2), lines, {1}, FACTS)
    assert len(good) == mc.PROPOSALS_MAX
    assert refused == [
        mc.Refusal(f"proposal {n}", f"over the {mc.PROPOSALS_MAX} proposals a run takes")
        for n in (mc.PROPOSALS_MAX + 1, mc.PROPOSALS_MAX + 2)
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "from must be a non-empty list of line numbers"),
        ([], "from must be a non-empty list of line numbers"),
        ((1,), "from must be a non-empty list of line numbers"),
        ([1] * 21, "from cites more than 20 lines"),
        ([True], "from holds True, not a line number"),
        (["1"], "from holds '1', not a line number"),
        ([1.0], "from holds 1.0, not a line number"),
        (["x" * 70], f"from holds {repr('x' * 70)[:59]}…, not a line number"),
        ([9], "line 9 does not exist"),
        ([3], "line 3 (daily/2026-12-01.md line 1) is not eligible: no sender recorded"),
        ([4], "line 4 (daily/2026-12-01.md line 5) was consolidated already"),
        ([5], "line 5 was not among the lines given"),
    ],
)
def test_the_lines_a_proposal_cites_must_be_shown_and_eligible(value: object, message: str) -> None:
    lines = {
        1: line(1),
        3: line(3, reason="no sender recorded"),
        4: line(4, at=5, cited=True),
        5: line(5),
    }
    with pytest.raises(ValueError) as refused:
        mc._check_from(value, lines, {1, 3, 4})
    assert str(refused.value) == message


def test_cited_lines_are_each_once_in_order() -> None:
    lines = {n: line(n) for n in range(1, 21)}
    assert mc._check_from([3, 1, 3, 2], lines, set(lines)) == [1, 2, 3]
    assert mc._check_from(list(range(20, 0, -1)), lines, set(lines)) == list(range(1, 21))


def test_a_promotions_provenance_names_the_lines_by_file_and_each_sender_once() -> None:
    cited = [
        line(1, "2026-12-02", 8, senders=(("a", "creator"),)),
        line(2, "2026-12-01", 3, senders=(("b", "member"), ("a", "creator"))),
        line(3, "2026-12-02", 2, senders=(("a", "creator"),)),
    ]
    assert mc.promotion("t.md", "Fact.", cited, FACTS) == mc.Promotion(
        "t.md",
        "Fact.",
        (1, 2, 3),
        f"Fact.{A}from daily/2026-12-01.md line 3; daily/2026-12-02.md lines 2, 8; "
        "a (creator), b (member)",
    )
    assert mc.Promotion("t.md", "F", (1, 2), "L").to_dict() == {
        "target": "t.md",
        "text": "F",
        "from": [1, 2],
        "line": "L",
    }
    assert mc.Refusal("w", "r").to_dict() == {"what": "w", "reason": "r"}


# the fallback


def test_the_fallback_promotes_a_fact_said_on_two_days_in_its_first_words() -> None:
    said = [
        line(1, "2026-12-01", 1, "Dinner is at 7pm.", senders=(("a", "creator"),)),
        line(2, "2026-12-01", 2, "Once only.", senders=(("a", "creator"),)),
        line(3, "2026-12-01", 3, "dinner is at 7pm", senders=(("b", "member"),)),
        line(4, "2026-12-02", 1, "Twice the same day.", senders=(("a", "creator"),)),
        line(5, "2026-12-02", 2, "DINNER is at 7pm!", senders=(("a", "creator"),)),
        line(6, "2026-12-02", 3, "...", senders=(("a", "creator"),)),
        line(7, "2026-12-02", 4, "Twice the same day.", senders=(("a", "creator"),)),
        line(8, "2026-12-01", 5, "# Heading only", senders=(("a", "creator"),)),
        line(9, "2026-12-03", 1, "# heading only", senders=(("a", "creator"),)),
    ]
    good, refused = mc.recurring(said, FACTS)
    assert good == [
        mc.Promotion(
            "notes/recurring.md",
            "Dinner is at 7pm.",
            (1, 3, 5),
            f"Dinner is at 7pm.{A}from daily/2026-12-01.md lines 1, 3; "
            "daily/2026-12-02.md line 2; a (creator), b (member)",
        )
    ]
    assert refused == [
        mc.Refusal(
            "the recurring fact of daily/2026-12-01.md line 5",
            "the text is not a fact (a heading, a marker or a question)",
        )
    ]
    assert mc.recurring([], FACTS) == ([], [])


# writing


def test_a_new_file_gets_front_matter_a_title_and_the_section() -> None:
    assert mc._appended(None, ["a", "b"], 'The "X"', "people/x.md") == (
        '---\ntype: people\ntitle: "The \\"X\\""\n'
        'description: "Facts consolidated from the daily notes."\n---\n\n'
        '# The "X"\n\n## Consolidated\n\n- a\n- b\n'
    )


def test_lines_go_under_the_files_last_consolidated_section_or_a_new_one() -> None:
    last = "# T\n\n## Consolidated  \n\n- old\n"
    assert mc._appended(last, ["n"], "", "x.md") == last + "- n\n"
    assert mc._appended(last.rstrip("\n"), ["n"], "", "x.md") == last + "- n\n"
    earlier = "# T\n\n## Consolidated\n\n- old\n\n## Later\n"
    assert mc._appended(earlier, ["n"], "", "x.md") == earlier + "\n## Consolidated\n\n- n\n"
    assert mc._appended("# T", ["n"], "", "x.md") == "# T\n\n## Consolidated\n\n- n\n"
    assert mc._appended("", ["n"], "", "x.md") == "## Consolidated\n\n- n\n"
    assert mc._appended("#no heading\n", ["n"], "", "x.md") == (
        "#no heading\n\n## Consolidated\n\n- n\n"
    )


def test_a_new_files_title() -> None:
    assert mc._new_title("notes/recurring.md") == "Recurring facts"
    assert mc._new_title("people/grandma_rosa-2.md") == "Grandma Rosa 2"
    assert mc._new_title("a/--.md") == "--"


def test_the_summary_of_a_run() -> None:
    report = mc.Report("fam", "2026-12-07", mc.MODEL, "p/m", days=["2026-12-01", "2026-12-07"])
    report.promoted = [
        mc.Promotion("index.md", "a", (1,), "a"),
        mc.Promotion("p.md", "b", (2,), "b"),
        mc.Promotion("index.md", "c", (3,), "c"),
    ]
    assert mc._summary(report) == (
        "3 promoted from the daily notes of 2026-12-01 to 2026-12-07 into index.md, p.md "
        "(proposed by p/m)"
    )
    report.mode, report.days = mc.FALLBACK, []
    assert mc._summary(report) == (
        "3 promoted from the daily notes of 2026-12-07 into index.md, p.md "
        "(recurring facts, no model)"
    )


def test_the_log_entry_of_a_run() -> None:
    when = datetime(2026, 12, 7, 20, 30, tzinfo=UTC).timestamp()
    report = mc.Report("fam", "2026-12-07", mc.MODEL, "p/m", days=["2026-12-01", "2026-12-07"])
    report.lines = [line(1), line(2, reason="why \x1b")] + [
        line(n, at=n, reason="r") for n in range(3, 3 + mc.LOG_REFUSED_MAX)
    ]
    report.promoted = [mc.Promotion("index.md", "a", (1,), "a — from x")]
    report.skipped = [mc.Refusal("'b' to x.md", "held")]
    report.refused = [mc.Refusal("proposal 2", "bad")]
    entry = mc.log_entry(report, when, "Europe/Lisbon")
    assert (
        entry
        == "\n".join(
            [
                "## 2026-12-07 20:30 WET: consolidation",
                "",
                "Daily notes 2026-12-01 to 2026-12-07 (2 files): 32 lines, 1 eligible; "
                "proposals by p/m.",
                "",
                "Promoted:",
                "- to index.md: a — from x",
                "",
                "Skipped:",
                "- 'b' to x.md: held",
                "",
                "Refused proposals:",
                "- proposal 2: bad",
                "",
                "Never promoted (note lines):",
                "- daily/2026-12-01.md line 1: why \\u{001b}",
                *(
                    f"- daily/2026-12-01.md line {n}: r"
                    for n in range(3, 3 + mc.LOG_REFUSED_MAX - 1)
                ),
                "- and 1 more",
            ]
        )
        + "\n"
    )
    plain = mc.Report("fam", "2026-12-07", mc.FALLBACK, days=["2026-12-07"])
    plain.promoted = [mc.Promotion("x.md", "a", (1,), "a" * 2100)]
    assert mc.log_entry(plain, when, "UTC") == (
        "## 2026-12-07 20:30 UTC: consolidation\n\n"
        "Daily notes 2026-12-07 to 2026-12-07 (1 files): 0 lines, 0 eligible; "
        "no model: facts said on two days or more.\n\n"
        f"Promoted:\n- to x.md: {'a' * 1988}…\n"
    )


def test_a_reports_dictionary() -> None:
    report = mc.Report("fam", "2026-12-07", mc.FALLBACK, days=["2026-12-06"], seconds=1.23456)
    report.lines = [line(1, cited=True), line(2), line(3, at=3, reason="r")]
    report.shown = [1, 2]
    assert report.eligible == report.lines[:2]
    assert report.rejected == [mc.Refusal("daily/2026-12-01.md line 3", "r")]
    assert report.to_dict() == {
        "group": "fam",
        "today": "2026-12-07",
        "mode": "recurring",
        "model": None,
        "dry_run": False,
        "days": ["memory/daily/2026-12-06.md"],
        "lines": 3,
        "eligible": 2,
        "cited_before": 1,
        "shown": 2,
        "promoted": [],
        "skipped": [],
        "refused": [],
        "rejected_lines": [{"what": "daily/2026-12-01.md line 3", "reason": "r"}],
        "notes": [],
        "writes": [],
        "log_entry": "",
        "change": None,
        "model_calls": 0,
        "prompt_chars": 0,
        "answer_chars": 0,
        "usage": None,
        "seconds": 1.235,
    }
    assert mc.Report("f", "t", mc.MODEL, "p/m").to_dict()["model"] == "p/m"
    json.dumps(report.to_dict())


# the history's word, line by line


class FakeHistory:
    """A memory history of ``changes`` (each a Change), the last record's files and each
    file's blame, keeping what it was asked and what was applied."""

    def __init__(
        self,
        changes: list[Any] | None = None,
        shown: dict[str, bytes] | None = None,
        blames: dict[str, list[tuple[str, Any]]] | None = None,
        head: bool = True,
        dirty: bool = False,
        same: bool = False,
    ) -> None:
        self.same = same  # applying changes nothing (no change is made)
        self.changes = changes or []
        self.shown = shown or {}
        self.blames = blames or {}
        self.head = head
        self.dirty = dirty
        self.logged: list[str] = []
        self.recorded: list[Provenance] = []
        self.applied: list[tuple[dict[str, bytes | None], Provenance]] = []

    def resolve(self, rev: str) -> str:
        assert rev == "HEAD"
        if not self.head:
            raise HistoryError("no history")
        return "r1"

    def log(self, path: str) -> list[Any]:
        self.logged.append(path)
        return self.changes

    def show(self, rev: str, path: str) -> bytes:
        assert rev == "HEAD"
        if path not in self.shown:
            raise HistoryError("not there")
        return self.shown[path]

    def blame(self, path: str) -> list[tuple[str, Any]]:
        return self.blames[path]

    def changed(self) -> bool:
        return self.dirty

    def record(self, provenance: Provenance) -> None:
        self.recorded.append(provenance)

    def apply(self, content: dict[str, bytes | None], provenance: Provenance) -> Any:
        self.applied.append((content, provenance))
        return None if self.same else SimpleNamespace(rev="r2")


def written(kind: str, path: str, trust: str = "creator") -> Change:
    return Change("r", Provenance(kind, sender="s", trust=trust), (path,))


UNKNOWN = "not in the memory history yet (it is consolidated once it is recorded)"


def test_without_a_history_the_writers_are_not_checked() -> None:
    report = mc.Report("fam", "t", mc.FALLBACK)
    lines = [line(1)]
    assert mc._check_writers(cast(Any, FakeHistory(head=False)), lines, {}, report) is lines
    assert report.notes == ["no memory history yet: who wrote the note lines was not checked"]


def test_each_line_takes_the_word_of_the_change_that_wrote_it() -> None:
    d1, d2, d3, d4 = "2026-12-01", "2026-12-02", "2026-12-03", "2026-12-04"
    p1, p2, p4 = (f"memory/daily/{d}.md" for d in (d1, d2, d4))
    guest = written("turn", p2, "guest")
    history = FakeHistory(
        changes=[written("turn", p1), written("host", p1), guest, written("flush", p4)],
        shown={p1: b"- a\n- b\n"},
        blames={p2: [("- x", written("turn", p2)), ("- y", guest)]},
    )
    texts = {d1: ["- new", "- a", "- b"], d2: ["- x", "- y"], d3: ["- z"], d4: ["- w"]}
    lines = [
        line(1, d1, 1),
        line(2, d1, 2),
        line(3, d1, 3),
        line(4, d2, 1),
        line(5, d2, 2),
        line(6, d3, 1),
        line(7, d4, 1),
        line(8, d1, 2, reason="r"),
        line(9, d1, 1, cited=True),
    ]
    report = mc.Report("fam", "t", mc.FALLBACK)
    checked = mc._check_writers(cast(Any, history), lines, texts, report)
    assert history.logged == ["memory/daily"]
    assert [n.reason for n in checked] == [
        UNKNOWN,
        None,
        None,
        None,
        "the history shows a turn of s (guest) wrote it, whatever its source says",
        UNKNOWN,
        UNKNOWN,
        "r",
        None,
    ]
    assert report.notes == []


def test_the_history_is_not_walked_when_no_line_is_eligible() -> None:
    history = FakeHistory()
    lines = [line(1, reason="r"), line(2, cited=True)]
    report = mc.Report("fam", "t", mc.FALLBACK)
    assert mc._check_writers(cast(Any, history), lines, {}, report) == lines
    assert history.logged == []


# reading the group's files


@pytest.fixture
def groups(tmp_path: Path) -> Path:
    (tmp_path / "fam" / "memory" / "daily").mkdir(parents=True)
    return tmp_path


def daily(groups: Path, day: str, text: str) -> None:
    (groups / "fam" / "memory" / "daily" / f"{day}.md").write_text(text, encoding="utf-8")


def memory(groups: Path, path: str, text: str) -> None:
    target = groups / "fam" / "memory" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


TODAY = date(2026, 12, 3)


def test_the_notes_of_the_days_are_read_and_numbered_in_order(groups: Path) -> None:
    daily(groups, "2026-12-01", f"- One.{A}alice (creator){SRC}\n- Two.{A}bob (member){SRC}\n")
    daily(groups, "2026-12-03", f"- Three.{A}alice (creator){SRC}\n")
    daily(groups, "2026-11-30", f"- Old.{A}alice (creator){SRC}\n")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=3)
    assert report.days == ["2026-12-01", "2026-12-03"]
    assert [(n.number, n.day, n.line, n.text) for n in report.lines] == [
        (1, "2026-12-01", 1, "One."),
        (2, "2026-12-01", 2, "Two."),
        (3, "2026-12-03", 1, "Three."),
    ]
    assert report.mode == mc.FALLBACK and report.today == "2026-12-03"
    assert report.proposals == [] and report.refused == [] and report.notes == []
    assert report.seconds >= 0


def test_no_note_in_the_days_is_no_notes(groups: Path, tmp_path: Path) -> None:
    daily(groups, "2026-11-30", "- x\n")
    with pytest.raises(mc.NoNotes) as none:
        mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=2)
    assert none.value.message == (
        "no daily notes in memory/daily/ of fam from 2026-12-02 to 2026-12-03; "
        "nothing to consolidate"
    )
    assert none.value.hint == (
        "memory flushes write them as conversations go on; --days reads more"
    )
    (groups / "other" / "memory").mkdir(parents=True)
    with pytest.raises(mc.NoNotes):
        mc.prepare(groups, "other", facts=FACTS, today=TODAY)


def test_a_long_note_is_read_to_its_last_whole_line_in_the_bound(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mc, "NOTE_READ_MAX_BYTES", 40)
    daily(groups, "2026-12-03", "- One.\n- Two is long enough to pass the bound\n")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert [n.text for n in report.lines] == ["One."]
    assert report.notes == ["daily/2026-12-03.md: only its first 40 bytes were read"]


def test_a_note_that_is_a_symlink_is_not_read_and_said(groups: Path) -> None:
    daily(groups, "2026-12-02", "- x\n")
    (groups / "fam" / "memory" / "daily" / "2026-12-03.md").symlink_to("2026-12-02.md")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=2)
    assert report.days == ["2026-12-02"]
    assert len(report.notes) == 1
    assert report.notes[0].startswith("daily/2026-12-03.md ")
    assert report.notes[0].endswith("; not read")


def test_a_daily_folder_that_is_a_symlink_stops_the_run(groups: Path) -> None:
    daily_dir = groups / "fam" / "memory" / "daily"
    daily_dir.rename(groups / "elsewhere")
    daily_dir.symlink_to(groups / "elsewhere")
    with pytest.raises(mc.ConsolidationError) as stopped:
        mc.prepare(groups, "fam", facts=FACTS, today=TODAY)
    assert stopped.value.message.endswith("; nothing was read")
    assert stopped.value.hint == (
        "move it away (the confined file layer never follows it), then run again"
    )


def test_memory_is_read_for_titles_and_citations_but_not_daily_or_system(
    groups: Path,
) -> None:
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n- Two.{A}alice (creator){SRC}\n")
    memory(groups, "index.md", "# Memory\n")
    memory(groups, "people/ann.md", f"# Ann\n- One.{A}from daily/2026-12-03.md line 1; a\n")
    memory(groups, "system/s.md", "# S\n")
    memory(groups, "daily/x.md", "# X\n")
    memory(groups, "notes.txt", "# T\n")
    memory(groups, ".hidden/h.md", "# H\n")
    (groups / "fam" / "memory" / "link.md").symlink_to("index.md")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    known = report._known
    assert known is not None
    assert known.index == "# Memory\n"
    assert known.titles == [("people/ann.md", "Ann")]
    assert known.cited == {("2026-12-03", 1)}
    assert [(n.number, n.cited) for n in report.lines] == [(1, True), (2, False)]
    assert report.to_dict()["cited_before"] == 1


def test_memory_past_the_runs_bound_is_not_read_and_said(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mc, "MEMORY_READ_MAX_BYTES", 10)
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    memory(groups, "a.md", "# Aaaa\n# more text\n")
    memory(groups, "b.md", "# B\n")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert report._known is not None and report._known.titles == [("a.md", "Aaaa")]
    assert report.notes == [
        "memory holds more than 10 bytes of Markdown: memory/b.md and the files after it "
        "were not read"
    ]


def test_a_model_is_asked_with_the_eligible_lines_and_its_proposals_checked(
    groups: Path,
) -> None:
    daily(
        groups,
        "2026-12-03",
        f"- One.{A}alice (creator){SRC}\n- Two.{A}eve (guest){SRC}\n- Three.{A}bob (member){SRC}\n",
    )
    asked: list[tuple[str, list[dict[str, Any]], int]] = []

    def complete(system: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        asked.append((system, messages, max_tokens))
        return json.dumps(
            {"promotions": [{"target": "index.md", "text": "One.", "from": [1]}, "x"]}
        )

    report = mc.prepare(
        groups,
        "fam",
        facts=FACTS,
        today=TODAY,
        days=1,
        complete=complete,
        model="p/m",
        max_tokens=77,
    )
    message = asked[0][1][0]["content"]
    assert asked == [(mc.SYSTEM_PROMPT, [{"role": "user", "content": message}], 77)]
    assert message.endswith("1. [2026-12-03] One.\n3. [2026-12-03] Three.\n")
    assert report.shown == [1, 3]
    assert report.mode == mc.MODEL and report.model == "p/m"
    assert report.model_calls == 1
    assert report.prompt_chars == len(mc.SYSTEM_PROMPT) + len(message)
    assert report.answer_chars == len(
        json.dumps({"promotions": [{"target": "index.md", "text": "One.", "from": [1]}, "x"]})
    )
    assert [p.target for p in report.proposals] == ["index.md"]
    assert report.refused == [
        mc.Refusal("proposal 2", "not a JSON object with target, text and from")
    ]


def test_a_model_is_not_asked_without_candidates_and_is_told_of_lines_not_shown(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daily(groups, "2026-12-03", f"- One.{A}eve (guest){SRC}\n")

    def never(system: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        raise AssertionError("asked")

    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1, complete=never)
    assert report.model_calls == 0 and report.proposals == []
    monkeypatch.setattr(mc, "LINES_SHOWN_MAX_CHARS", 30)
    daily(
        groups,
        "2026-12-03",
        f"- One.{A}alice (creator){SRC}\n- Two.{A}alice (creator){SRC}\n",
    )
    shown = mc.prepare(
        groups,
        "fam",
        facts=FACTS,
        today=TODAY,
        days=1,
        complete=lambda s, m, t: '{"promotions": []}',
    )
    assert shown.shown == [2]
    assert shown.notes == [
        "1 older eligible lines were not shown to the model (over 30 characters); "
        "--days reads fewer"
    ]


def test_the_history_is_asked_when_given(groups: Path) -> None:
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    history = FakeHistory(head=False)
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1, history=cast(Any, history))
    assert report.notes == ["no memory history yet: who wrote the note lines was not checked"]


# committing


def ready(groups: Path, *proposals: mc.Promotion, known: mc._Known | None = None) -> mc.Report:
    report = mc.Report("fam", "2026-12-03", mc.MODEL, "prov/mod", days=["2026-12-03"])
    report.proposals = list(proposals)
    report._known = known
    return report


def promo(target: str, text: str) -> mc.Promotion:
    return mc.Promotion(
        target, text, (1,), f"{text}{A}from daily/2026-12-03.md line 1; a (creator)"
    )


WHEN = datetime(2026, 12, 3, 4, 5, tzinfo=UTC).timestamp()


def test_a_run_without_proposals_writes_nothing(groups: Path) -> None:
    history = FakeHistory()
    report = mc.commit(
        groups, ready(groups), facts=FACTS, history=cast(Any, history), when=WHEN, dry_run=True
    )
    assert report.dry_run is True and report.writes == [] and history.applied == []


def test_promotions_are_appended_linked_and_logged_as_one_change(groups: Path) -> None:
    memory(groups, "index.md", "# Memory\n\n- Old fact.\n")
    memory(groups, "log.md", "# Log\n- earlier")
    memory(groups, "people/known.md", "# Known\n")
    history = FakeHistory(dirty=True)
    report = ready(
        groups,
        promo("index.md", "Ann is a vet."),
        promo("people/new-one.md", "Bob likes tea."),
        promo("people/new-one.md", "Bob lives in Porto."),
        promo("people/known.md", "Carol is 9."),
        promo("index.md", "- old fact"),
        promo("people/known.md", "Ann is a vet!"),
    )
    done = mc.commit(
        groups,
        report,
        facts=FACTS,
        history=cast(Any, history),
        when=WHEN,
        zone="UTC",
        sender="alice",
    )
    assert [p.text for p in done.promoted] == [
        "Ann is a vet.",
        "Bob likes tea.",
        "Bob lives in Porto.",
        "Carol is 9.",
    ]
    assert done.skipped == [
        mc.Refusal("'- old fact' to index.md", "memory/index.md holds it already (line 3)"),
        mc.Refusal(
            "'Ann is a vet!' to people/known.md",
            "this run promotes it to memory/index.md already",
        ),
    ]
    assert done.writes == [
        "memory/index.md",
        "memory/log.md",
        "memory/people/known.md",
        "memory/people/new-one.md",
    ]
    assert history.recorded == [
        Provenance(
            "unattributed", note="found before a consolidation", time=history.recorded[0].time
        )
    ]
    [(content, made)] = history.applied
    assert made == Provenance(
        "consolidation",
        sender="alice",
        provider="prov",
        model="mod",
        note="4 promoted from the daily notes of 2026-12-03 to 2026-12-03 into index.md, "
        "people/new-one.md, people/known.md (proposed by prov/mod)",
        time=WHEN,
    )
    assert (
        content["memory/index.md"]
        == (
            "# Memory\n\n- Old fact.\n\n## Consolidated\n\n"
            f"- Ann is a vet.{A}from daily/2026-12-03.md line 1; a (creator)\n"
            "- [New One](people/new-one.md): consolidated from the daily notes\n"
        ).encode()
    )
    assert (
        content["memory/people/new-one.md"]
        == (
            '---\ntype: people\ntitle: "New One"\n'
            'description: "Facts consolidated from the daily notes."\n---\n\n'
            "# New One\n\n## Consolidated\n\n"
            f"- Bob likes tea.{A}from daily/2026-12-03.md line 1; a (creator)\n"
            f"- Bob lives in Porto.{A}from daily/2026-12-03.md line 1; a (creator)\n"
        ).encode()
    )
    assert content["memory/log.md"] == ("# Log\n- earlier\n\n" + done.log_entry).encode()
    assert done.log_entry.startswith("## 2026-12-03 04:05 UTC: consolidation\n")
    assert done.change == "r2"
    assert done.dry_run is False


def test_a_new_log_gets_its_head_and_a_dry_run_writes_nothing(groups: Path) -> None:
    memory(groups, "index.md", "# Memory\n\n- [Recurring](notes/recurring.md)\n")
    history = FakeHistory()
    report = ready(groups, promo("notes/recurring.md", "Ann is a vet."))
    report.mode, report.model = mc.FALLBACK, ""
    done = mc.commit(
        groups, report, facts=FACTS, history=cast(Any, history), when=WHEN, dry_run=True
    )
    assert done.writes == ["memory/log.md", "memory/notes/recurring.md"]
    assert history.applied == [] and history.recorded == []
    assert done.change is None and done.dry_run is True
    done = mc.commit(groups, report, facts=FACTS, history=cast(Any, history), when=WHEN)
    [(content, made)] = history.applied
    assert history.recorded == []
    assert (made.provider, made.model) == ("", "")
    assert (
        content["memory/log.md"]
        == (
            '---\nokf_version: "0.1"\ntitle: Log\ndescription: What memory housekeeping changed '
            "in this memory, oldest first.\n---\n\n# Log\n\n" + done.log_entry
        ).encode()
    )
    assert "memory/index.md" not in content


def test_a_fact_consolidated_before_is_skipped(groups: Path) -> None:
    known = mc._Known(facts=[("people/ann.md", "ann is a vet")])
    report = ready(groups, promo("index.md", "Ann is a vet."), known=known)
    history = FakeHistory()
    done = mc.commit(groups, report, facts=FACTS, history=cast(Any, history), when=WHEN)
    assert done.skipped == [
        mc.Refusal("'Ann is a vet.' to index.md", "consolidated already, into memory/people/ann.md")
    ]
    assert done.promoted == [] and done.writes == [] and history.applied == []
    assert done.log_entry == ""


def test_the_core_memorys_budget_holds(groups: Path) -> None:
    memory(groups, "index.md", "x" * (MEMORY_FILE_BUDGET_CHARS - 40))
    report = ready(
        groups,
        promo("index.md", "Ann is a vet and a long fact that passes the budget."),
        promo("people/zed.md", "Zed is tall."),
    )
    done = mc.commit(groups, report, facts=FACTS, history=cast(Any, FakeHistory()), when=WHEN)
    assert done.skipped == [
        mc.Refusal(
            "'Ann is a vet and a long fact that passes the budget.' to index.md",
            f"index.md would pass its {MEMORY_FILE_BUDGET_CHARS:,}-character budget (it is "
            "injected whole into every fresh context): promote it to a concept file",
        ),
        mc.Refusal(
            "'Zed is tall.' to people/zed.md",
            "index.md has no room left for a link to the new file people/zed.md",
        ),
    ]


def test_fits_counts_the_core_memory_as_written() -> None:
    index = mc._Target("index.md", "")
    room = MEMORY_FILE_BUDGET_CHARS - len("## Consolidated\n\n- ")
    assert mc._fits(index, ["y" * room]) is True
    assert mc._fits(index, ["y" * (room + 1)]) is False
    assert mc._Target("x.md", "a\nb", ["c"]).lines() == ["a", "b", "c"]
    assert mc._Target("x.md", None, ["c"]).lines() == ["", "c"]


def test_a_fact_held_is_found_in_the_target_then_this_run_then_earlier_runs() -> None:
    target = mc._Target("p.md", "# P\n- Ann is a vet.\n", ["Bob."])
    other = mc._Target("q.md", None, ["Carol is 9."])
    targets = {"p.md": target, "q.md": other}
    known = mc._Known(facts=[("r.md", "dave")])

    def held(text: str) -> str | None:
        return mc._held(promo("p.md", text), target, targets, known, FACTS)

    assert held("ann is a vet") == "memory/p.md holds it already (line 2)"
    assert held("Bob") == "memory/p.md holds it already (this run)"
    assert held("Carol is 9") == "this run promotes it to memory/q.md already"
    assert held("Dave") == "consolidated already, into memory/r.md"
    assert held("# P") is None
    assert held("Erin") is None


def _refused_commit(groups: Path, path: str) -> pytest.ExceptionInfo[mc.ConsolidationError]:
    """The refusal of a commit of one promotion to ``path``."""
    with pytest.raises(mc.ConsolidationError) as refused:
        mc.commit(
            groups,
            ready(groups, promo(path, "A.")),
            facts=FACTS,
            history=cast(Any, FakeHistory()),
            when=WHEN,
        )
    return refused


def test_a_target_that_is_not_a_regular_utf8_file_stops_the_run(groups: Path) -> None:
    memory(groups, "people/x.md", "")
    (groups / "fam" / "memory" / "people" / "x.md").write_bytes(b"\xff")
    bad = _refused_commit(groups, "people/x.md")
    assert bad.value.message == "memory/people/x.md is not UTF-8; nothing was changed"
    (groups / "fam" / "memory" / "file").write_text("")
    folder = _refused_commit(groups, "file/x/y.md")
    assert (
        folder.value.message == "memory/file is a regular file, not a folder; nothing was changed"
    )
    assert folder.value.hint == (
        "move it away (the confined file layer never follows it), then run again"
    )
    (groups / "fam" / "memory" / "link.md").symlink_to("index.md")
    link = _refused_commit(groups, "link.md")
    assert link.value.message.endswith("; nothing was changed")
    assert link.value.hint == (
        "move it away (the confined file layer never follows it), then run again"
    )


def test_a_new_target_under_new_folders_is_none(groups: Path) -> None:
    with open_group_dir(groups, "fam") as group:
        assert mc._load(group, "a/b/c.md") is None
        assert mc._load(group, "new.md") is None
        memory(groups, "a/b/c.md", "é")
        assert mc._load(group, "a/b/c.md") == "é"


class Clock:
    """``time`` for the consolidation module: each monotonic reading one of ``readings``."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def monotonic(self) -> float:
        return self.readings.pop(0)


def test_a_runs_seconds_are_its_own(groups: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    monkeypatch.setattr(mc, "time", Clock(10.0, 12.5))
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert report.seconds == 2.5
    report.proposals = [promo("index.md", "Ann is a vet.")]
    report._known = None
    monkeypatch.setattr(mc, "time", Clock(100.0, 101.0, 104.0))
    done = mc.commit(groups, report, facts=FACTS, history=cast(Any, FakeHistory()), when=WHEN)
    assert done.seconds == 2.5 + 1.0 + 4.0
    skipped = ready(groups, promo("index.md", "Ann is a vet."))
    skipped._known = mc._Known(facts=[("x.md", "ann is a vet")])
    monkeypatch.setattr(mc, "time", Clock(7.0, 7.5))
    assert (
        mc.commit(groups, skipped, facts=FACTS, history=cast(Any, FakeHistory()), when=WHEN).seconds
        == 0.5
    )


def test_a_title_from_the_name_is_the_files_own_name() -> None:
    assert mc._title("a/b/c-d.md", "no heading\n") == "c-d"


def test_a_line_of_no_words_or_a_fact_said_once_does_not_end_the_fallback() -> None:
    said = [
        line(1, "2026-12-01", 1, "...", senders=(("a", "creator"),)),
        line(4, "2026-12-01", 3, "Said once.", senders=(("a", "creator"),)),
        line(2, "2026-12-01", 2, "Tea at 5.", senders=(("a", "creator"),)),
        line(3, "2026-12-02", 1, "Tea at 5.", senders=(("a", "creator"),)),
    ]
    good, refused = mc.recurring(said, FACTS)
    assert [p.lines for p in good] == [(2, 3)] and refused == []


def test_a_new_files_title_is_from_its_own_name() -> None:
    assert mc._new_title("a/b/grandma-rosa.md") == "Grandma Rosa"


def test_a_fact_on_the_last_line_of_a_file_without_newline_is_held_there() -> None:
    target = mc._Target("p.md", "# P\n- Ann is a vet.")
    assert mc._held(promo("p.md", "Ann is a vet"), target, {}, mc._Known(), FACTS) == (
        "memory/p.md holds it already (line 2)"
    )


def test_a_new_core_memory_fits_as_it_would_be_written() -> None:
    index = mc._Target("index.md", None)
    room = MEMORY_FILE_BUDGET_CHARS - len(mc._appended(None, ["y"], "", "index.md").strip()) + 1
    assert mc._fits(index, ["y" * room]) is True
    assert mc._fits(index, ["y" * (room + 1)]) is False


def test_the_log_lists_all_the_lines_never_promoted_up_to_its_bound() -> None:
    when = datetime(2026, 12, 7, 20, 30, tzinfo=UTC).timestamp()
    report = mc.Report("fam", "2026-12-07", mc.FALLBACK, days=["2026-12-07"])
    report.lines = [line(n, at=n, reason="r") for n in range(1, mc.LOG_REFUSED_MAX + 1)]
    entry = mc.log_entry(report, when, "UTC")
    assert entry.endswith(f"- daily/2026-12-01.md line {mc.LOG_REFUSED_MAX}: r\n")
    assert "- and " not in entry


def test_one_concept_over_the_shown_ones_is_counted() -> None:
    titles = [(f"t{i}.md", f"T{i}") for i in range(mc.CONCEPTS_SHOWN_MAX + 1)]
    message, _ = mc._prompt([], mc._Known(titles=titles))
    assert "\n(and 1 more)\n" in message


def test_a_memory_folder_that_is_a_file_stops_the_run(tmp_path: Path) -> None:
    (tmp_path / "fam").mkdir()
    (tmp_path / "fam" / "memory").write_text("x")
    stopped = _refused_commit(tmp_path, "index.md")
    assert stopped.value.message == "memory is a regular file, not a folder; nothing was changed"


def test_the_change_names_the_provider_and_the_whole_model_and_no_sender(groups: Path) -> None:
    memory(groups, "log.md", "# Log\n")
    history = FakeHistory(same=True)
    report = ready(groups, promo("index.md", "Ann is a vet."))
    report.model = "prov/org/mod"
    done = mc.commit(groups, report, facts=FACTS, history=cast(Any, history), when=WHEN)
    [(content, made)] = history.applied
    assert (made.sender, made.provider, made.model) == ("", "prov", "org/mod")
    assert content["memory/log.md"] == ("# Log\n\n" + done.log_entry).encode()
    assert done.change is None


def test_a_memory_folder_that_is_a_symlink_stops_the_reading(tmp_path: Path) -> None:
    (tmp_path / "fam").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "fam" / "memory").symlink_to(tmp_path / "elsewhere")
    report = mc.Report("fam", "t", mc.FALLBACK)
    with open_group_dir(tmp_path, "fam") as group, pytest.raises(mc.ConsolidationError) as stopped:
        mc._read_memory(group, FACTS, report)
    assert stopped.value.message.endswith("; nothing was read")
    assert "memory" in stopped.value.message
    assert stopped.value.hint == (
        "move it away (the confined file layer never follows it), then run again"
    )


def test_a_citation_is_found_before_a_later_attribution() -> None:
    known = mc._Known()
    text = f"- Fact.{A}from daily/2026-12-01.md line 4; a (creator){A}later\n"
    mc._learn(known, "p.md", text, FACTS)
    assert known.cited == {("2026-12-01", 4)}


def test_a_nested_index_has_no_title_and_a_plain_file_is_titled_by_its_name() -> None:
    known = mc._Known()
    mc._learn(known, "a/b/index.md", "# Sub index\n", FACTS)
    mc._learn(known, "p/q.md", "text only\n", FACTS)
    assert known.titles == [("p/q.md", "q")]


def test_each_day_is_checked_whatever_the_days_before_it() -> None:
    days = [f"2026-12-0{n}" for n in range(1, 5)]
    paths = [f"memory/daily/{d}.md" for d in days]
    history = FakeHistory(
        changes=[written("turn", paths[1]), written("turn", paths[2]), written("turn", paths[3])],
        shown={paths[1]: b"- a \xff\n", paths[3]: b"- d\n"},
    )
    texts = {days[0]: ["- z"], days[1]: ["- a \ufffd"], days[2]: ["- c"], days[3]: ["- d"]}
    lines = [line(n + 1, d, 1) for n, d in enumerate(days)]
    report = mc.Report("fam", "t", mc.FALLBACK)
    checked = mc._check_writers(cast(Any, history), lines, texts, report)
    # day 1 never recorded, day 3 not in the last record: unknown; days 2 and 4 trusted
    assert [n.reason for n in checked] == [UNKNOWN, None, UNKNOWN, None]


def test_many_equal_lines_are_each_matched_to_the_record() -> None:
    day = "2026-12-01"
    path = f"memory/daily/{day}.md"
    recorded = b"- same\n" * 250 + b"- kept\n"
    history = FakeHistory(changes=[written("turn", path)], shown={path: recorded})
    lines = [line(1, day, 1), line(2, day, 2), line(3, day, 251)]
    report = mc.Report("fam", "t", mc.FALLBACK)
    read = ["- kept", *["- same"] * 250]
    checked = mc._check_writers(cast(Any, history), lines, {day: read}, report)
    # the longest run of equal lines is matched, however common its line is
    assert [n.reason for n in checked] == [UNKNOWN, None, None]


def test_memory_past_the_first_file_of_another_kind_is_read(groups: Path) -> None:
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    for n in range(30):  # other files, listed before and after b.md
        memory(groups, f"a{n}.txt", "# T\n")
    memory(groups, "b.md", "# B \xff\n")
    (groups / "fam" / "memory" / "b.md").write_bytes(b"# B \xff\n")
    memory(groups, "daily/sub/x.md", "# X\n")
    memory(groups, "system/sub/y.md", "# Y\n")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert report._known is not None
    assert report._known.titles == [("b.md", "B \ufffd")]


def test_the_last_byte_of_the_runs_bound_is_read(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mc, "MEMORY_READ_MAX_BYTES", 5)
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    memory(groups, "a.md", "# A\n")
    memory(groups, "b.md", "# B\n")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert report._known is not None
    assert report._known.titles == [("a.md", "A"), ("b.md", "b")]
    assert report.notes == []


def test_a_memory_file_gone_since_it_was_listed_is_passed_over(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    memory(groups, "a.md", "# A\n")
    memory(groups, "b.md", "# B\n")
    real = ConfinedDir.read_bytes

    def read_bytes(self: ConfinedDir, name: str, *args: Any, **kwargs: Any) -> bytes:
        if name == "a.md":
            raise FileNotFoundError(name)
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(ConfinedDir, "read_bytes", read_bytes)
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert report._known is not None and report._known.titles == [("b.md", "B")]


def test_a_symlink_after_the_runs_bound_is_passed_over_unread_and_unsaid(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mc, "MEMORY_READ_MAX_BYTES", 4)
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    memory(groups, "a.md", "# A\n")
    (groups / "fam" / "memory" / "z").mkdir()
    (groups / "fam" / "memory" / "z" / "link.md").symlink_to("../a.md")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert report._known is not None and report._known.titles == [("a.md", "A")]
    assert report.notes == []


@pytest.mark.parametrize(
    ("note", "lines", "cut"),
    [
        # exactly the bound: read whole
        ("- One.\n" + "T" * 32 + "\n", ["One.", "T" * 32], False),
        # a newline just past the bound: the line before it is not kept
        ("- One.\n" + "T" * 33 + "\n", ["One."], True),
        # the last newline inside the bound ends what is read, nothing after it
        ("- One.\n- Two.\nX" + "x" * 40 + "\n", ["One.", "Two."], True),
    ],
)
def test_a_note_is_read_to_its_last_whole_line_in_the_bound(
    groups: Path, monkeypatch: pytest.MonkeyPatch, note: str, lines: list[str], cut: bool
) -> None:
    monkeypatch.setattr(mc, "NOTE_READ_MAX_BYTES", 40)
    daily(groups, "2026-12-03", note)
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert [n.text for n in report.lines] == lines
    assert report.notes == (
        ["daily/2026-12-03.md: only its first 40 bytes were read"] if cut else []
    )


def test_a_note_of_other_bytes_is_read_with_replacements(groups: Path) -> None:
    (groups / "fam" / "memory" / "daily" / "2026-12-03.md").write_bytes(b"- A \xff.\n")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert [n.text for n in report.lines] == ["A \ufffd."]
    assert report.model == ""


def test_a_symlinked_note_does_not_end_the_reading(groups: Path) -> None:
    daily(groups, "2026-12-01", "- x\n")
    daily(groups, "2026-12-03", "- y\n")
    (groups / "fam" / "memory" / "daily" / "2026-12-02.md").symlink_to("2026-12-01.md")
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=3)
    assert report.days == ["2026-12-01", "2026-12-03"]


def test_a_model_shown_every_line_is_not_told_of_lines_left_out(groups: Path) -> None:
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    report = mc.prepare(
        groups,
        "fam",
        facts=FACTS,
        today=TODAY,
        days=1,
        complete=lambda s, m, t: '{"promotions": []}',
    )
    assert report.shown == [1] and report.notes == []


def test_a_recurring_fact_refused_does_not_end_the_fallback() -> None:
    said = [
        line(1, "2026-12-01", 1, "# Heading only", senders=(("a", "creator"),)),
        line(2, "2026-12-02", 1, "# heading only", senders=(("a", "creator"),)),
        line(3, "2026-12-01", 2, "Tea at 5.", senders=(("a", "creator"),)),
        line(4, "2026-12-02", 2, "Tea at 5.", senders=(("a", "creator"),)),
    ]
    good, refused = mc.recurring(said, FACTS)
    assert [p.lines for p in good] == [(3, 4)]
    assert [r.what for r in refused] == ["the recurring fact of daily/2026-12-01.md line 1"]


class Vanished:
    """A listed entry gone before it is looked at."""

    name = "gone.md"

    def stat(self, *, follow_symlinks: bool = True) -> Any:
        raise FileNotFoundError(self.name)


def test_a_memory_file_gone_before_its_stat_is_passed_over(
    groups: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    daily(groups, "2026-12-03", f"- One.{A}alice (creator){SRC}\n")
    memory(groups, "b.md", "# B\n")
    real = ConfinedDir.walk

    def walk(self: ConfinedDir, **kwargs: Any) -> Any:
        for rel, folder, entries in real(self, **kwargs):
            yield rel, folder, [Vanished(), *entries]

    monkeypatch.setattr(ConfinedDir, "walk", walk)
    report = mc.prepare(groups, "fam", facts=FACTS, today=TODAY, days=1)
    assert report._known is not None and report._known.titles == [("b.md", "B")]
