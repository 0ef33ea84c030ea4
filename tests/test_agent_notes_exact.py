"""Daily-note lines word for word: the text a line is compared by, which lines are no
facts, when two lines are one fact (at the edges of the similarity and length ratios),
a flushed block sorted against the cap in whole lines, how a line is attributed, and
the recent lines a fresh context is given with the notice of what was left out."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from orchestrator.agent import notes
from orchestrator.agent.notes import (
    ATTRIBUTION,
    NEAR_DUPLICATE,
    RECENT_HEADER,
    Recent,
    Sorted,
    attributed,
    describe_source,
    is_fact,
    normalize,
    recent_lines,
    recent_notes,
    reported,
    same_fact,
    sort_block,
)

# -- the text a line is compared by -------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("- The Cat is GREY.", "the cat is grey"),
        ("* a", "a"),
        ("+ a", "a"),
        ("• a", "a"),
        ("· a", "a"),
        ("  12. a", "a"),
        ("123) a", "a"),
        ("1234. a", "1234 a"),
        ("-a", "a"),
        ("x - a", "x a"),
        ("ﬁne Ⅻ", "fine xii"),
        ("Straße", "strasse"),
        ("a\t\t b\n c", "a b c"),
        ("cost: $5 + 3€!", "cost 5 3"),
        ("said it — alice (creator); chat c; 10:00", "said it"),
        ("a — b — c", "a"),
        ("a—b", "a b"),
        ("", ""),
        ("?!", ""),
    ],
)
def test_normalize(line: str, expected: str) -> None:
    assert normalize(line) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("the cat is grey", True),
        ("- the cat is grey", True),
        ("", False),
        ("   ", False),
        ("- ", False),
        ("-- ...", False),
        ("[memory flush] started", False),
        ("- [Memory Flush] x", False),
        ("[compaction] done", False),
        ("[Summary of the earlier conversation] x", False),
        ("[summary] x", True),
        ("# Heading", False),
        ("## Heading", False),
        ("---", False),
        ("--- x", False),
        ("is it raining?", False),
        ("is it raining ?  ", False),
        ("is it raining\uff1f", False),
        ("did bob ask? — alice (creator); chat c; 10:00", False),
        ("bob asked — who? (member)", True),
        ("what? yes, it rains", True),
        ("is it raining?   — alice (creator); chat c; 10:00", False),
        ("did bob ask? — a — b", False),
    ],
)
def test_is_fact(line: str, expected: bool) -> None:
    assert is_fact(line) is expected


# -- one fact or two --------------------------------------------------------------------------


def test_equal_lines_are_one_fact_even_when_short() -> None:
    assert same_fact("a", "a") is True
    assert same_fact("", "") is True


def test_lines_with_other_numbers_are_two_facts() -> None:
    assert same_fact("meet at 4 pm today", "meet at 5 pm today") is False
    assert same_fact("meet at 4 pm today", "meet at 4 pm todey") is True
    assert same_fact("room 12 3", "room 123") is False


def test_the_length_ratio_edge() -> None:
    # 8 and 10 characters: exactly 0.8, so compared by similarity
    assert same_fact("abcdefgh", "abcdefghij") is True
    # 8 and 11: below 0.8, so two facts however alike
    assert same_fact("abcdefgh", "abcdefghijk") is False
    assert same_fact("abcdefghijk", "abcdefgh") is False


def test_the_similarity_edge() -> None:
    assert NEAR_DUPLICATE == 0.88
    # 25 characters each, 22 matching: a ratio of exactly 0.88
    a = "abcdefghijklmnopqrstuvwxy"
    b = "abcdefghijklmnopqrstuvXYZ"
    assert round(2 * 22 / 50, 2) == 0.88
    assert same_fact(a, b) is True
    # 21 matching: 0.84
    assert same_fact(a, "abcdefghijklmnopqrstuWXYZ") is False


def test_autojunk_is_off_so_long_lines_are_compared_fairly() -> None:
    # from 200 characters SequenceMatcher's autojunk would ignore every common letter
    a = (
        "the meeting with the landlord about the broken heating is moved to the week after "
        "the holidays and alice will call him first thing tomorrow morning to confirm the "
        "new date and the time that suits everyone best okay so we can plan the rest of "
        "the month"
    )
    b = "".join("z" if i % 10 == 3 else c for i, c in enumerate(a))
    assert len(a) == len(b) == 251
    assert same_fact(a, b) is True


def test_the_length_ratio_edge_where_the_similarity_alone_would_pass() -> None:
    a = ("abcdefghij" * 10)[:79]
    longer = a + "klmnopqrstuvwxyzABCDE"
    assert (len(a), len(longer)) == (79, 100)
    # 2 * 79 / 179 is above 0.88, but 79 is under 0.8 of 100: two facts
    assert same_fact(a, longer) is False
    assert same_fact(a + "k", longer) is True  # 80: exactly 0.8 of 100


# -- a block sorted -------------------------------------------------------------------------------


def test_a_block_is_sorted_into_kept_duplicates_and_not_facts() -> None:
    known = ["- the cat is grey — alice (creator); chat c; 10:00", "# 2026-01-01", "", "x?"]
    block = "\r\n".join(
        [
            "- The cat is grey.",
            "",
            "   ",
            "# heading",
            "what now?",
            "the dog is brown",
            "the dog is brown!",
            "[memory flush] kept",
        ]
    )
    out = sort_block(block, known, 1000)
    assert out == Sorted(kept=["the dog is brown"], left=[], duplicates=2, not_facts=3)


def test_the_cap_keeps_whole_lines_and_leaves_the_rest_in_order() -> None:
    # each line costs its length and one for the newline
    out = sort_block("aaaa\nbbbb\ncc\nddd", [], 10)
    assert out == Sorted(kept=["aaaa", "bbbb"], left=["cc", "ddd"])
    out = sort_block("aaaa\nbbbb\ncc", [], 9)
    assert out == Sorted(kept=["aaaa"], left=["bbbb", "cc"])
    assert sort_block("aaaa", [], 5) == Sorted(kept=["aaaa"])
    assert sort_block("aaaa", [], 4) == Sorted(left=["aaaa"])
    assert sort_block("aaaa", [], 0) == Sorted(left=["aaaa"])


def test_lines_are_written_with_their_trailing_space_taken_off() -> None:
    assert sort_block("  indented  \t", [], 100).kept == ["  indented"]


def test_a_duplicate_over_the_cap_is_still_a_duplicate() -> None:
    out = sort_block("aaaa\nbbbb\nbbbb\nAAAA", [], 5)
    assert out == Sorted(kept=["aaaa"], left=["bbbb"], duplicates=2)


def test_front_matter_replayed_is_not_facts() -> None:
    block = "---\ndate: 2026-01-01\ntitle: x\n---\nthe fact\n"
    assert sort_block(block, [], 100) == Sorted(kept=["the fact"], not_facts=4)
    block = " --- \nk: v\n --- \nthe fact"
    assert sort_block(block, [], 100) == Sorted(kept=["the fact"], not_facts=3)


def test_a_lone_rule_is_no_front_matter() -> None:
    assert sort_block("---\nthe fact", [], 100) == Sorted(kept=["the fact"], not_facts=1)
    assert sort_block("a\n---\nb\n---", [], 100) == Sorted(kept=["a", "b"], not_facts=2)


def test_empty_front_matter_ends_at_the_second_line() -> None:
    assert sort_block("---\n---\nfact", [], 100) == Sorted(kept=["fact"], not_facts=2)
    assert sort_block("---\n---\nfact\n---\nmore", [], 100) == Sorted(
        kept=["fact", "more"], not_facts=3
    )


def test_known_lines_that_are_no_facts_do_not_count() -> None:
    out = sort_block("is it", ["is it?", "# is it", "[compaction] is it"], 100)
    assert out == Sorted(kept=["is it"])


# -- attribution ------------------------------------------------------------------------------


def test_attributed() -> None:
    assert attributed("  - the cat  ", "alice (creator); chat c; 10:00") == (
        "- the cat — alice (creator); chat c; 10:00"
    )
    assert attributed("3. x — old source", "new") == "- x — new"
    assert attributed("x", "") == "- x"
    assert attributed("x   — old", "new") == "- x — new"
    assert attributed("a — b — c", "new") == "- a — new"


def test_describe_source() -> None:
    senders = [("alice", "creator"), ("bob", "member"), ("alice", "creator")]
    assert describe_source(senders, "c1", "14:05") == (
        "alice (creator), bob (member); chat c1; 14:05"
    )
    assert describe_source([], "c1", "14:05") == "unknown; chat c1; 14:05"


# -- what a fresh context is given ---------------------------------------------------------


def _line(text: str, who: str, chat: str) -> str:
    return f"- {text}{ATTRIBUTION}{who}; chat {chat}; 10:00"


def test_recent_lines_are_this_chats_and_creators_only() -> None:
    here = _line("here", "bob (member)", "c")
    creator = _line("creator", "alice (creator)", "d")
    mixed = _line("mixed", "alice (creator), bob (member)", "d")
    other = _line("other", "bob (member)", "d")
    bare = "- no source"
    unknown = "- x — unknown; chat d; 1:00"
    text = "\n".join([here, creator, mixed, other, bare, unknown, "- asked? — alice (creator)"])
    found = recent_lines([text], "c", 1000)
    assert found == Recent(f"{RECENT_HEADER}\n\n{here}\n{creator}", True, False)
    assert recent_lines([text], None, 1000) == Recent(f"{RECENT_HEADER}\n\n{creator}", False, False)
    assert recent_lines([text], "e", 1000) == Recent(f"{RECENT_HEADER}\n\n{creator}", False, False)


def test_a_line_of_this_chat_said_by_creators_is_not_others_words() -> None:
    line = _line("x", "alice (creator)", "c")
    assert recent_lines([line], "c", 1000) == Recent(f"{RECENT_HEADER}\n\n{line}", False)


def test_a_source_without_a_chat_counts_only_for_its_trust() -> None:
    line = "- x — bob (member)"
    assert recent_lines([line], "c", 1000) == Recent("", False)
    assert recent_lines(["- x — bob (member); chat c"], "c", 1000).block.endswith("chat c")


def test_no_recent_lines_is_an_empty_block() -> None:
    assert recent_lines([], "c", 1000) == Recent("", False, False)
    assert recent_lines(["- no source\n# h"], "c", 1000) == Recent("", False, False)


def test_the_newest_lines_that_fit_are_given_with_a_notice() -> None:
    old, mid, new = (_line(t, "alice (creator)", "c") for t in ("old", "mid", "new"))
    size = len(mid) + 1 + len(new) + 1
    found = recent_lines([old, f"{mid}\n{new}"], "c", size)
    assert found == Recent(
        f"{RECENT_HEADER}\n\n{mid}\n{new}\n[truncated: 1 older lines of the recent notes are "
        "not shown; memory_search finds them]",
        False,
        True,
    )
    assert recent_lines([old, f"{mid}\n{new}"], "c", size - 1).block == (
        f"{RECENT_HEADER}\n\n{new}\n[truncated: 2 older lines of the recent notes are "
        "not shown; memory_search finds them]"
    )
    everything = recent_lines([old, f"{mid}\n{new}"], "c", size + len(old) + 1)
    assert everything == Recent(f"{RECENT_HEADER}\n\n{old}\n{mid}\n{new}", False, False)


def test_others_words_count_only_among_the_lines_shown() -> None:
    member = _line("member", "bob (member)", "c")
    creator = _line("creator", "alice (creator)", "c")
    found = recent_lines([f"{member}\n{creator}"], "c", len(creator) + 1)
    assert (found.others_words, found.truncated) == (False, True)
    found = recent_lines([f"{creator}\n{member}"], "c", len(member) + 1)
    assert (found.others_words, found.truncated) == (True, True)


def test_recent_notes_reads_yesterday_then_today(tmp_path: Path) -> None:
    y = _line("yesterday", "alice (creator)", "c")
    t = _line("today", "alice (creator)", "c")
    (tmp_path / "2026-03-01.md").write_text(y + "\n", encoding="utf-8")
    (tmp_path / "2026-03-02.md").write_text(t + "\n", encoding="utf-8")
    (tmp_path / "2026-02-28.md").write_text(_line("older", "alice (creator)", "c"))
    (tmp_path / "2026-03-03.md").write_text(_line("tomorrow", "alice (creator)", "c"))
    found = recent_notes(tmp_path, date(2026, 3, 2), "c", 1000)
    assert found == Recent(f"{RECENT_HEADER}\n\n{y}\n{t}", False, False)


def test_recent_notes_skip_links_folders_and_missing_days(tmp_path: Path) -> None:
    t = _line("today", "alice (creator)", "c")
    target = tmp_path / "elsewhere.md"
    target.write_text(_line("linked", "alice (creator)", "c"))
    (tmp_path / "2026-03-01.md").symlink_to(target)
    (tmp_path / "2026-03-02.md").write_bytes(t.encode() + b" \xff\n")
    found = recent_notes(tmp_path, date(2026, 3, 2), "c", 1000)
    assert found.block == f"{RECENT_HEADER}\n\n{t} \ufffd"
    (tmp_path / "2026-03-01.md").unlink()
    (tmp_path / "2026-03-01.md").mkdir()
    assert recent_notes(tmp_path, date(2026, 3, 2), "c", 1000).block == found.block
    assert recent_notes(tmp_path / "none", date(2026, 3, 2), "c", 1000) == Recent("", False)


def test_an_unreadable_note_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = _line("today", "alice (creator)", "c")
    (tmp_path / "2026-03-01.md").write_text(_line("yesterday", "alice (creator)", "c"))
    (tmp_path / "2026-03-02.md").write_text(t)
    real = Path.read_text

    def read(self: Path, *args: object, **kwargs: object) -> str:
        if self.name == "2026-03-01.md":
            raise PermissionError("denied")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read)
    assert recent_notes(tmp_path, date(2026, 3, 2), "c", 1000).block == f"{RECENT_HEADER}\n\n{t}"


def test_reported_counts_the_creators_lines_at_the_cap() -> None:
    creator = _line("c" * 10, "alice (creator)", "x")
    member = _line("m", "bob (member)", "x")
    block = f"{RECENT_HEADER}\n\n{creator}"
    assert reported([f"{creator}\n{member}"]) == (len(block), False)
    long = [_line(f"{i:04d}" + "z" * 60, "alice (creator)", "x") for i in range(80)]
    size, cut = reported(["\n".join(long)])
    assert cut is True
    shown = 4000 // (len(long[0]) + 1)
    assert size == len(recent_lines(["\n".join(long)], None, 4000).block)
    assert recent_lines(["\n".join(long)], None, 4000).block.count("\n- ") == shown
    assert notes.RECENT_HEADER == "## Recent notes (today's and yesterday's daily notes)"


def test_recent_notes_are_read_as_utf8_whatever_the_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import codecs

    (tmp_path / "2026-03-02.md").write_text(_line("today", "alice (creator)", "c"))
    asked: list[dict[str, object]] = []
    real = Path.read_text

    def read(self: Path, *args: object, **kwargs: object) -> str:
        asked.append(dict(kwargs, args=args))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read)
    recent_notes(tmp_path, date(2026, 3, 2), "c", 1000)
    [kwargs] = asked
    assert codecs.lookup(str(kwargs.pop("encoding"))).name == "utf-8"
    assert kwargs == {"errors": "replace", "args": ()}


def test_a_line_without_a_source_does_not_end_the_reading() -> None:
    creator = _line("after", "alice (creator)", "d")
    found = recent_lines([f"- bare\n# heading\n{creator}"], None, 1000)
    assert found.block == f"{RECENT_HEADER}\n\n{creator}"


def test_the_source_is_everything_after_the_first_attribution() -> None:
    # a trust in parentheses in the text itself is not the sender's
    texted = "- met bob (member) — alice (creator); chat d; 10:00"
    assert recent_lines([texted], None, 1000).block == f"{RECENT_HEADER}\n\n{texted}"
    two = "- x — alice (creator) — bob (member); chat d; 10:00"
    assert recent_lines([two], None, 1000) == Recent("", False)
    tail = "- x — alice (creator); chat d — z"
    assert recent_lines([tail], None, 1000).block == f"{RECENT_HEADER}\n\n{tail}"
