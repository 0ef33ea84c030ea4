"""Exact behaviour of memory consolidation's parts (memory/consolidate.py), driven
directly: the days read, sources and their taint, note lines, what memory's files
teach a run, the history's word on writers, the model's prompt, its answer and each
proposal checked, provenance, the recurring fallback, the appended files and the log
entry, character for character."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.limits import CONSOLIDATE_MAX_DAYS, MEMORY_FILE_BUDGET_CHARS
from orchestrator.memory import consolidate as mc
from orchestrator.memory.history import Provenance
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
