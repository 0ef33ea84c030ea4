"""The basic modules, exactly: typed reading of YAML mappings (every refusal word for word,
naming file, line, key and value), the protocol's shapes (turns and answers to and from
the wire, session keys, image references, standing text), money (costs, estimates,
days and months in a zone, formatting), sizes and durations, schedules (delays, ISO
times, intervals on their grid, cron; fixed times, the clock is never read) and the two
functions of limits."""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from orchestrator.errors import InvalidConfig
from orchestrator.limits import (
    CHARS_PER_TOKEN_ESTIMATE,
    DEFAULT_CONCURRENCY_MIN,
    MAX_TOOL_STEPS_PER_TURN,
    MESSAGE_MAX_CHARS,
    RELAY_MODEL_REQUEST_SLACK_BYTES,
    STANDING_TEXT_BUDGET_CHARS,
    TOOL_READ_MAX_CHARS,
    default_concurrency,
    model_request_cap,
)
from orchestrator.money import (
    Prices,
    Tokens,
    cost_of,
    cost_per_minute,
    day_start,
    estimate_input_tokens,
    format_money,
    local_day,
    month_start,
    next_day,
    next_month,
    worst_cost,
)
from orchestrator.money import local_time as money_local_time
from orchestrator.protocol import (
    BadFrame,
    TurnRequest,
    TurnResult,
    cap_standing,
    image_refs,
    session_key,
)
from orchestrator.schedules import (
    TaskRefused,
    check_schedule,
    cron_next,
    local_time,
    next_due,
    parse_at,
    zone,
)
from orchestrator.units import (
    human_bytes,
    human_seconds,
    parse_duration,
    parse_size,
)
from orchestrator.validate import (
    MappingReader,
    Problems,
    escape_not_utf8,
    hiding_problem,
    shown_name,
    text_problem,
)
from orchestrator.versions import FileTooNew
from orchestrator.yamldoc import parse_yaml_text

# --------------------------------------------------------------------------- validate

PATH = Path("/cfg/group.yaml")


def reader(text: str, *prefix: str | int) -> MappingReader:
    doc = parse_yaml_text(text, PATH)
    data: Any = doc.data
    for key in prefix:
        data = data[key]
    return MappingReader(doc, data, tuple(prefix))


def refusal(call: Any) -> str:
    with pytest.raises(InvalidConfig) as info:
        call()
    return info.value.message


def test_text_problem_names_surrogates_controls_and_breaks() -> None:
    assert text_problem("plain\ttext") is None
    assert text_problem("ab\udc80") == "is not valid Unicode (a lone surrogate at character 3)"
    assert text_problem("\ud800") == "is not valid Unicode (a lone surrogate at character 1)"
    assert text_problem("a\x00") == "contains the control character U+0000"
    assert text_problem("a\x08") == "contains the control character U+0008"
    assert text_problem("a\x0b") == "contains the control character U+000B"
    assert text_problem("a\x1f") == "contains the control character U+001F"
    assert text_problem("a\x7f") == "contains the control character U+007F"
    assert text_problem("a\x9f") == "contains the control character U+009F"
    assert text_problem("a\xa0b") is None
    assert text_problem("a\nb") == "contains a line break"
    assert text_problem("a\rb") == "contains the control character U+000D"
    assert text_problem("a\nb", multiline=True) is None
    assert text_problem("a\r\nb", multiline=True) is None
    # a line break allowed does not hide a control character after it
    assert text_problem("a\r\x01", multiline=True) == "contains the control character U+0001"
    assert text_problem("a\n\x1b", multiline=True) == "contains the control character U+001B"


def test_names_are_shown_escaped() -> None:
    assert shown_name("report.pdf") == "report.pdf"
    assert shown_name("a\udcffb") == "a\\xffb"
    assert shown_name("a\udc80") == "a\\x80"
    assert shown_name("a\udc7f") == "a\\u{dc7f}"
    assert shown_name("a\udd00") == "a\\u{dd00}"
    assert shown_name("a\x00b\x1f\x7f\x9f") == "a\\u{0000}b\\u{001f}\\u{007f}\\u{009f}"
    assert shown_name("x\u202ey\u2066z\u2069") == "x\\u{202e}y\\u{2066}z\\u{2069}"
    assert shown_name("\u202a\u202d") == "\\u{202a}\\u{202d}"
    assert shown_name("é\xa0") == "é\xa0"
    assert escape_not_utf8("plain\x01") == "plain\x01"
    assert escape_not_utf8("a\udcfe\x01") == "a\\xfe\x01"
    assert escape_not_utf8("\ud800") == "\\u{d800}"


def test_hiding_problem_names_the_direction_control_and_where() -> None:
    assert hiding_problem("plain text") is None
    assert hiding_problem("ab\u202ec") == (
        "contains U+202E (a direction control) at character 3, which would show other "
        "text than the one approved"
    )
    for mark in "\u202a\u2066\u2069\u200e\u200f\u061c":
        message = hiding_problem("x" + mark)
        assert message is not None
        assert message.startswith(
            f"contains U+{ord(mark):04X} (a direction control) at character 2,"
        )


def test_problems_collects_all_and_keeps_the_first_hint() -> None:
    problems = Problems()
    problems.raise_if_any()  # none: nothing raised
    assert problems.check(lambda: 5, 0) == 5

    def bad(message: str, hint: str | None = None) -> Any:
        def read() -> Any:
            raise InvalidConfig(message, hint=hint)

        return read

    assert problems.check(bad("one"), 7) == 7
    assert problems.messages == ["one"]
    assert problems.hints == []
    with pytest.raises(InvalidConfig) as info:
        problems.raise_if_any()
    assert info.value.message == "one"
    assert info.value.hint is None

    hinted = Problems()
    hinted.check(bad("first", "do this"), None)
    with pytest.raises(InvalidConfig) as info:
        hinted.raise_if_any()
    assert (info.value.message, info.value.hint) == ("first", "do this")

    problems.check(bad("two", "fix two"), None)
    problems.check(bad("three", "fix three"), None)
    assert problems.hints == ["fix two", "fix three"]
    with pytest.raises(InvalidConfig) as info:
        problems.raise_if_any()
    assert info.value.message == "3 problems: one; two; three"
    assert info.value.hint == "fix two"

    unhinted = Problems()
    unhinted.add(InvalidConfig("a"))
    unhinted.add(InvalidConfig("b"))
    with pytest.raises(InvalidConfig) as info:
        unhinted.raise_if_any()
    assert (info.value.message, info.value.hint) == ("2 problems: a; b", None)


def test_a_reader_needs_a_mapping() -> None:
    doc = parse_yaml_text("- 1\n- 2\n", PATH)
    assert refusal(lambda: MappingReader(doc, doc.data)) == (
        "/cfg/group.yaml:1: the document must be a mapping of keys to values, got a list"
    )
    doc = parse_yaml_text("a: 1\nlimits:\n  x: [1]\n  deep: hello\n", PATH)
    assert refusal(lambda: MappingReader(doc, "hello", ("limits", "deep"))) == (
        "/cfg/group.yaml:4: limits.deep must be a mapping of keys to values, got a string"
    )
    assert refusal(lambda: MappingReader(doc, 3, ("a",))) == (
        "/cfg/group.yaml:1: a must be a mapping of keys to values, got a number"
    )
    assert refusal(lambda: MappingReader(doc, 3.5, ("a",))).endswith("got a number")
    assert refusal(lambda: MappingReader(doc, True, ("a",))).endswith("got bool")
    empty = MappingReader(doc, None, ("nothing",))
    assert empty.data == {}
    assert empty.prefix == ("nothing",)
    assert empty.doc is doc
    assert MappingReader(doc, doc.data).prefix == ()


def test_paths_name_keys_and_indexes() -> None:
    doc = parse_yaml_text("items:\n  - name: a\n  - name: 5\n", PATH)
    item = MappingReader(doc, doc.data["items"][1], ("items", 1))
    assert refusal(lambda: item.text("name")) == (
        "/cfg/group.yaml:3: items[1].name: must be a non-empty string, got 5"
    )
    assert item._dotted([0, "a", 2, "b"]) == "[0].a[2].b"


def test_unknown_keys_are_named_with_the_valid_ones() -> None:
    r = reader("alpha: 1\nzeta: 2\nbeta: 3\ngamma: 4\n")
    r.reject_unknown(["gamma", "beta", "zeta", "alpha"])
    assert refusal(lambda: r.reject_unknown(["zeta", "alpha"])) == (
        "/cfg/group.yaml:3: beta: unknown key (and gamma); valid keys here: alpha, zeta"
    )
    assert refusal(lambda: r.reject_unknown(["zeta", "alpha", "gamma"])) == (
        "/cfg/group.yaml:3: beta: unknown key; valid keys here: alpha, gamma, zeta"
    )
    several = reader("a: 1\nb: 2\nc: 3\nd: 4\n")
    assert refusal(lambda: several.reject_unknown(["a"])) == (
        "/cfg/group.yaml:2: b: unknown key (and c, d); valid keys here: a"
    )
    numbered = reader("1: one\ntwo: 2\n3: three\n")
    assert refusal(lambda: numbered.reject_unknown(["two"])) == (
        "/cfg/group.yaml:1: 1: unknown key (and 3); valid keys here: two"
    )
    # a key YAML reads as another type than text is named as it is written
    dated = reader("2024-01-01: x\n")
    assert refusal(lambda: dated.reject_unknown(["a"])) == (
        "/cfg/group.yaml:1: 2024-01-01: unknown key; valid keys here: a"
    )
    quoted = reader("'x': 1\n")
    quoted.data = {None: 1}
    assert "None: unknown key; valid keys here: y" in refusal(lambda: quoted.reject_unknown(["y"]))


def test_raw_required_default_and_null() -> None:
    r = reader("a: 1\nb: null\nc: false\nlimits:\n  x: 1\n", "limits")
    assert r.raw("x") == 1
    assert refusal(lambda: r.raw("y")) == "/cfg/group.yaml:4: limits.y: is required"
    assert r.raw("y", "d") == "d"
    assert r.raw("y", None) is None
    top = reader("a: 1\nb: null\nc: false\n")
    assert top.raw("c") is False
    assert top.raw("b", 9) == 9
    assert refusal(lambda: top.raw("b")) == "/cfg/group.yaml:2: b: is required"


def test_text_limits_and_patterns() -> None:
    r = reader("name: Ann\nblank: '  '\nnum: 3\nlong: abcdef\nbad: \"a\\x01\"\nlist: [1]\n")
    assert r.text("name") == "Ann"
    assert r.text("missing", "fallback") == "fallback"
    assert r.text("name", max_chars=3) == "Ann"
    assert refusal(lambda: r.text("name", max_chars=2)) == (
        "/cfg/group.yaml:1: name: is 3 characters; at most 2 allowed"
    )
    assert refusal(lambda: r.text("blank")) == (
        "/cfg/group.yaml:2: blank: must be a non-empty string, got '  '"
    )
    assert refusal(lambda: r.text("num")) == (
        "/cfg/group.yaml:3: num: must be a non-empty string, got 3"
    )
    assert refusal(lambda: r.text("missing", "")) == (
        "/cfg/group.yaml:1: missing: must be a non-empty string, got ''"
    )
    assert refusal(lambda: r.text("missing")) == "/cfg/group.yaml:1: missing: is required"
    for flag in ("off", "true"):
        flagged = reader(f"mode: {flag}\n")
        said = refusal(lambda: flagged.text("mode"))  # noqa: B023 (called at once)
        assert said == (
            f"/cfg/group.yaml:1: mode: must be a non-empty string, got {flag == 'true'} (YAML "
            "reads an unquoted yes, no, on, off, true or false as true or false: put the "
            "value in quotes)"
        )
    assert r.text("long", max_chars=200) == "abcdef"
    assert refusal(lambda: r.text("bad")) == (
        "/cfg/group.yaml:5: bad: contains the control character U+0001"
    )
    assert r.text("name", pattern="[A-Z][a-z]+") == "Ann"
    assert refusal(lambda: r.text("name", pattern="[a-z]+")) == (
        "/cfg/group.yaml:1: name: 'Ann' does not match [a-z]+"
    )
    assert refusal(lambda: r.text("name", pattern="A")) == (
        "/cfg/group.yaml:1: name: 'Ann' does not match A"
    )
    long = "x" * 201
    assert refusal(lambda: reader(f"k: {long}\n").text("k")) == (
        "/cfg/group.yaml:1: k: is 201 characters; at most 200 allowed"
    )
    assert reader(f"k: {long[:200]}\n").text("k") == long[:200]


def test_choice_and_boolean() -> None:
    r = reader("mode: fast\nflag: yes\nnum: 1\nword: 'true'\n")
    assert r.choice("mode", ("slow", "fast"), "slow") == "fast"
    assert r.choice("absent", ("slow", "fast"), "slow") == "slow"
    assert refusal(lambda: r.choice("mode", ("slow", "safe"), "slow")) == (
        "/cfg/group.yaml:1: mode: got 'fast'; valid values: slow, safe"
    )
    assert r.boolean("flag", False) is True
    assert r.boolean("absent", True) is True
    assert r.boolean("absent", False) is False
    assert refusal(lambda: r.boolean("num", False)) == (
        "/cfg/group.yaml:3: num: must be true or false, got 1"
    )
    assert refusal(lambda: r.boolean("word", False)) == (
        "/cfg/group.yaml:4: word: must be true or false, got 'true'"
    )


def test_whole_numbers_within_bounds() -> None:
    r = reader("n: 5\nb: true\nf: 5.0\ns: '5'\nbig: 10\nlow: 1\n")
    assert r.whole_number("n", None, 5, 5, "5") == 5
    assert r.whole_number("n", None, 0, None, "any") == 5
    assert r.whole_number("absent", 7, 0, 10, "0..10") == 7
    assert refusal(lambda: r.whole_number("n", None, 6, None, "from 6")) == (
        "/cfg/group.yaml:1: n: got 5; expected from 6"
    )
    assert refusal(lambda: r.whole_number("n", None, 0, 4, "0..4")) == (
        "/cfg/group.yaml:1: n: got 5; expected 0..4"
    )
    assert refusal(lambda: r.whole_number("b", None, 0, None, "a number")) == (
        "/cfg/group.yaml:2: b: got True; expected a number"
    )
    assert refusal(lambda: r.whole_number("f", None, 0, None, "a number")) == (
        "/cfg/group.yaml:3: f: got 5.0; expected a number"
    )
    assert refusal(lambda: r.whole_number("s", None, 0, None, "a number")) == (
        "/cfg/group.yaml:4: s: got '5'; expected a number"
    )
    assert refusal(lambda: r.whole_number("big", None, 0, 9, "0..9")).endswith(
        "got 10; expected 0..9"
    )
    assert r.whole_number("low", None, 1, 1, "1") == 1
    assert refusal(lambda: r.whole_number("absent", None, 0, 1, "x")) == (
        "/cfg/group.yaml:1: absent: got None; expected x"
    )


def test_id_lists_name_the_item() -> None:
    r = reader(
        "ids: [' a ', 12, b]\nnone: null\nword: abc\nflags: [true]\nfloats: [1.5]\n"
        "empty: ['  ']\nlong: [abcd]\nctl: [\"a\\x01\"]\nok: [abc]\n"
    )
    assert r.id_list("ids", max_chars=5) == ("a", "12", "b")
    assert r.id_list("none", max_chars=5) == ()
    assert r.id_list("absent", max_chars=5) == ()
    assert r.id_list("ok", max_chars=3) == ("abc",)
    assert refusal(lambda: r.id_list("word", max_chars=5)) == (
        "/cfg/group.yaml:3: word: must be a list of ids, got 'abc'"
    )
    assert refusal(lambda: r.id_list("flags", max_chars=5)) == (
        "/cfg/group.yaml:4: flags[0]: must be a string id, got True"
    )
    assert refusal(lambda: r.id_list("floats", max_chars=5)) == (
        "/cfg/group.yaml:5: floats[0]: must be a string id, got 1.5"
    )
    assert refusal(lambda: r.id_list("empty", max_chars=5)) == (
        "/cfg/group.yaml:6: empty[0]: must be 1..5 characters, got '  '"
    )
    assert refusal(lambda: r.id_list("long", max_chars=3)) == (
        "/cfg/group.yaml:7: long[0]: must be 1..3 characters, got 'abcd'"
    )
    assert refusal(lambda: r.id_list("ctl", max_chars=5)) == (
        "/cfg/group.yaml:8: ctl[0]: contains the control character U+0001"
    )
    multi = reader("ids:\n  - a\n  - 7\n  - [x]\n")
    assert refusal(lambda: multi.id_list("ids", max_chars=5)) == (
        "/cfg/group.yaml:4: ids[2]: must be a string id, got ['x']"
    )


def test_child_readers_and_their_paths() -> None:
    r = reader("outer:\n  inner:\n    n: x\n")
    inner = r.child("outer").child("inner")
    assert inner.prefix == ("outer", "inner")
    assert inner.data == {"n": "x"}
    assert refusal(lambda: inner.boolean("n", False)) == (
        "/cfg/group.yaml:3: outer.inner.n: must be true or false, got 'x'"
    )
    assert r.child("absent").data == {}
    assert r.child("absent").prefix == ("absent",)
    assert inner.child_fail("n", 2, "why").message == "/cfg/group.yaml:3: outer.inner.n[2]: why"
    assert inner.fail("n", "why").message == "/cfg/group.yaml:3: outer.inner.n: why"


def test_file_versions() -> None:
    assert reader("a: 1\n").file_version(3) == 1
    assert reader("version: 2\n").file_version(3) == 2
    assert reader("version: 3\n").file_version(3) == 3
    assert refusal(lambda: reader("a: 1\nversion: 0\n").file_version(3)) == (
        "/cfg/group.yaml:2: version: got 0; expected a whole number from 1 (this release writes 3)"
    )
    assert refusal(lambda: reader("version: '2'\n").file_version(1)) == (
        "/cfg/group.yaml:1: version: got '2'; expected a whole number from 1 (this release "
        "writes 1)"
    )
    with pytest.raises(FileTooNew) as info:
        reader("version: 4\n").file_version(3)
    assert info.value.message.startswith("/cfg/group.yaml is at version 4, written by a newer")
    assert "reads up to version 3)" in info.value.message


def test_long_values_are_shown_cut() -> None:
    value = "y" * 70
    r = reader(f"k: {value}\n")
    assert refusal(lambda: r.boolean("k", False)) == (
        "/cfg/group.yaml:1: k: must be true or false, got '" + "y" * 56 + "..."
    )
    fits = "z" * 58  # its repr is 60 characters: shown whole
    assert refusal(lambda: reader(f"k: {fits}\n").boolean("k", False)).endswith(f"got '{fits}'")
    over = "z" * 59  # 61: cut to 57 and "..."
    assert refusal(lambda: reader(f"k: {over}\n").boolean("k", False)).endswith(
        "got '" + "z" * 56 + "..."
    )


# --------------------------------------------------------------------------- protocol


def test_image_refs() -> None:
    assert image_refs([]) == ()
    assert image_refs(["files/a.png", "files/b/c.jpg"]) == ("files/a.png", "files/b/c.jpg")
    assert image_refs(("files/a.png",)) is None
    assert image_refs("files/a.png") is None
    assert image_refs(None) is None
    assert image_refs(["files/x"] * 16) == ("files/x",) * 16
    assert image_refs(["files/x"] * 17) is None
    assert image_refs([1]) is None
    assert image_refs(["files/"]) is None
    assert image_refs(["other/a.png"]) is None
    assert image_refs(["files/a\x00b"]) is None
    assert image_refs(["files/" + "a" * 400]) == ("files/" + "a" * 400,)
    assert image_refs(["files/" + "a" * 401]) is None
    assert image_refs(["files/../x"]) is None
    assert image_refs(["files/a/.."]) is None
    assert image_refs(["files/a..b"]) == ("files/a..b",)
    assert image_refs(["files/ok", "files/../x"]) is None
    assert image_refs(["files/ok", 5]) is None


def test_session_keys() -> None:
    assert session_key("shared", "telegram", "1", "2") == "shared"
    assert session_key("per-chat", "telegram", "123", "9") == "telegram.chat-123"
    assert session_key("per-thread", "telegram", "123", "9") == "telegram.chat-123-thread-9"
    assert session_key("per-thread", "telegram", "123", None) == "telegram.chat-123"
    assert session_key("per-thread", "telegram", "123", "") == "telegram.chat-123"
    assert session_key("per-chat", "http:dash", "c", None) == "http.dash.chat-c"
    assert session_key("per-chat", "a_b-c", "x.y-z_1", None) == "a_b-c.chat-x.y-z_1"

    def hashed(channel: str, raw: str) -> str:
        return hashlib.sha256(f"{channel}\n{raw}".encode()).hexdigest()[:10]

    assert session_key("per-chat", "Telegram", "1", None) == (
        "telegram.chat-1-" + hashed("Telegram", "chat-1")
    )
    assert session_key("per-chat", "tele gram", "1", None) == (
        "tele.gram.chat-1-" + hashed("tele gram", "chat-1")
    )
    assert session_key("per-chat", "telegram", "a b/c", None) == (
        "telegram.chat-a_b_c-" + hashed("telegram", "chat-a b/c")
    )
    assert session_key("per-thread", "slack", "c", "t/1") == (
        "slack.chat-c-thread-t_1-" + hashed("slack", "chat-c-thread-t/1")
    )
    assert session_key("per-chat", "!!!", "1", None) == (
        "channel.chat-1-" + hashed("!!!", "chat-1")
    )
    assert session_key("per-chat", ".web.", "1", None) == "web.chat-1-" + hashed(".web.", "chat-1")
    long_channel = "c" * 50
    assert session_key("per-chat", long_channel, "1", None) == (
        "c" * 40 + ".chat-1-" + hashed(long_channel, "chat-1")
    )
    long_chat = "9" * 80
    assert session_key("per-chat", "x", long_chat, None) == (
        "x.chat-" + "9" * 67 + "-" + hashed("x", "chat-" + long_chat)
    )
    assert session_key("per-chat", "x", "9" * 67, None) == "x.chat-" + "9" * 67
    assert session_key("per-chat", "x", "ABX", None) == "x.chat-ABX"
    assert session_key("per-chat", "x", "a.", None) == "x.chat-a-" + hashed("x", "chat-a.")
    assert session_key("per-chat", "x", "_", None) == "x.chat--" + hashed("x", "chat-_")


def test_cap_standing() -> None:
    assert cap_standing("  hello \n", "notes") == "hello"
    assert cap_standing("abcd", "notes", budget=4) == "abcd"
    assert cap_standing(" abcd ", "notes", budget=4) == "abcd"
    assert cap_standing("abcde", "the notes", budget=4) == (
        "abcd\n[truncated: the notes is longer than 4 characters and only its beginning was loaded]"
    )
    text = "x" * (STANDING_TEXT_BUDGET_CHARS + 1)
    assert cap_standing(text, "learned") == (
        "x" * STANDING_TEXT_BUDGET_CHARS + f"\n[truncated: learned is longer than "
        f"{STANDING_TEXT_BUDGET_CHARS:,} characters and only its beginning was loaded]"
    )
    assert cap_standing("x" * STANDING_TEXT_BUDGET_CHARS, "learned") == (
        "x" * STANDING_TEXT_BUDGET_CHARS
    )


FULL_TURN = {
    "images": ["files/a.png"],
    "timezone": "Europe/Lisbon",
    "window_tokens": 1000,
    "answer_tokens": 100,
    "deadline_seconds": 30.5,
    "said": "@bot hi",
    "tools": ["memory", "web.fetch"],
    "turn_id": "t1",
    "chat": "c1",
    "thread": "th",
    "channel": "telegram",
    "session": "telegram.chat-c1",
    "sender": "ann",
    "trust": "creator",
    "text": "hi",
}


def test_a_turn_to_and_from_the_wire() -> None:
    turn = TurnRequest.from_wire(FULL_TURN)
    assert turn == TurnRequest(
        turn_id="t1",
        chat="c1",
        text="hi",
        sender="ann",
        trust="creator",
        thread="th",
        channel="telegram",
        session="telegram.chat-c1",
        tools=("memory", "web.fetch"),
        said="@bot hi",
        window_tokens=1000,
        answer_tokens=100,
        deadline_seconds=30.5,
        timezone="Europe/Lisbon",
        images=("files/a.png",),
    )
    assert turn.to_wire() == FULL_TURN
    minimal = TurnRequest.from_wire({"turn_id": "t", "chat": "c", "text": "x"})
    assert minimal == TurnRequest(turn_id="t", chat="c", text="x")
    assert minimal.sender == ""
    assert minimal.trust == "member"
    assert minimal.channel == "cli"
    assert minimal.tools is None
    assert minimal.images == ()
    assert minimal.to_wire() == {
        "timezone": None,
        "window_tokens": None,
        "answer_tokens": None,
        "deadline_seconds": None,
        "said": None,
        "tools": None,
        "turn_id": "t",
        "chat": "c",
        "thread": None,
        "channel": "cli",
        "session": None,
        "sender": "",
        "trust": "member",
        "text": "x",
    }
    empty_tools = TurnRequest.from_wire({"turn_id": "t", "chat": "c", "text": "x", "tools": []})
    assert empty_tools.tools == ()
    assert empty_tools.to_wire()["tools"] == []


def bad_turn(**changes: Any) -> str:
    raw = {"turn_id": "t", "chat": "c", "text": "x", **changes}
    raw = {k: v for k, v in raw.items() if v is not _DROP}
    with pytest.raises(BadFrame) as info:
        TurnRequest.from_wire(raw)
    return str(info.value)


_DROP = object()


def test_a_bad_turn_names_its_field() -> None:
    with pytest.raises(BadFrame, match=r"^turn must be an object$"):
        TurnRequest.from_wire(["turn"])
    assert bad_turn(turn_id=_DROP) == "turn.turn_id must be a string of 1..200 characters"
    assert bad_turn(turn_id="") == "turn.turn_id must be a string of 1..200 characters"
    assert bad_turn(turn_id="t" * 201) == "turn.turn_id must be a string of 1..200 characters"
    assert TurnRequest.from_wire({"turn_id": "t" * 200, "chat": "c", "text": "x"}).turn_id == (
        "t" * 200
    )
    assert bad_turn(chat=5) == "turn.chat must be a string of 1..200 characters"
    assert bad_turn(text="") == f"turn.text must be a string of 1..{MESSAGE_MAX_CHARS} characters"
    assert bad_turn(text="x" * (MESSAGE_MAX_CHARS + 1)) == (
        f"turn.text must be a string of 1..{MESSAGE_MAX_CHARS} characters"
    )
    ok = TurnRequest.from_wire({"turn_id": "t", "chat": "c", "text": "x" * MESSAGE_MAX_CHARS})
    assert len(ok.text) == MESSAGE_MAX_CHARS
    assert bad_turn(sender=3) == "turn.sender must be a string of 1..200 characters"
    assert bad_turn(sender="s" * 201) == "turn.sender must be a string of 1..200 characters"
    assert bad_turn(trust="t" * 21) == "turn.trust must be a string of 1..20 characters"
    assert bad_turn(thread=1) == "turn.thread must be a string of 1..200 characters"
    assert bad_turn(channel="c" * 201) == "turn.channel must be a string of 1..200 characters"
    assert bad_turn(timezone="z" * 65) == "turn.timezone must be a string of 1..64 characters"
    assert bad_turn(said="s" * (MESSAGE_MAX_CHARS + 1)) == (
        f"turn.said must be a string of 1..{MESSAGE_MAX_CHARS} characters"
    )
    # optional text may be empty; a required one may not
    optional = TurnRequest.from_wire(
        {"turn_id": "t", "chat": "c", "text": "x", "sender": "", "trust": "", "channel": ""}
    )
    assert (optional.sender, optional.trust, optional.channel) == ("", "member", "cli")
    edge = TurnRequest.from_wire(
        {
            "turn_id": "t",
            "chat": "c",
            "text": "x",
            "trust": "t" * 20,
            "timezone": "z" * 64,
            "session": "s" * 128,
        }
    )
    assert (edge.trust, edge.timezone, edge.session) == ("t" * 20, "z" * 64, "s" * 128)
    assert bad_turn(session="s" * 129) == "turn.session must be a string of 1..128 characters"
    assert bad_turn(session="a/b") == (
        "turn.session must be a session key (letters, digits, . _ -)"
    )
    assert bad_turn(session=".a") == "turn.session must be a session key (letters, digits, . _ -)"
    tools_message = (
        "turn.tools must be a list of at most 256 tool or source names (letters, digits, . _ -)"
    )
    assert bad_turn(tools="memory") == tools_message
    assert bad_turn(tools=["a"] * 257) == tools_message
    assert (
        len(
            TurnRequest.from_wire(
                {"turn_id": "t", "chat": "c", "text": "x", "tools": ["a"] * 256}
            ).tools
            or ()
        )
        == 256
    )
    assert bad_turn(tools=["a b"]) == tools_message
    assert bad_turn(tools=["ok", 3]) == tools_message
    assert bad_turn(tools=["t" * 65]) == tools_message
    assert bad_turn(images="files/a") == (
        "turn.images must be a list of at most 16 paths under files/"
    )
    assert bad_turn(images=None) == "turn.images must be a list of at most 16 paths under files/"


def test_a_turns_numbers() -> None:
    def turn(**numbers: Any) -> TurnRequest:
        return TurnRequest.from_wire({"turn_id": "t", "chat": "c", "text": "x", **numbers})

    top = turn(window_tokens=100_000_000, answer_tokens=10_000_000, deadline_seconds=86_400)
    assert (top.window_tokens, top.answer_tokens, top.deadline_seconds) == (
        100_000_000,
        10_000_000,
        86_400,
    )
    assert turn(deadline_seconds=0.5).deadline_seconds == 0.5
    assert (
        bad_turn(window_tokens=100_000_001) == "turn.window_tokens must be a number from 1 to 1e+08"
    )
    assert (
        bad_turn(answer_tokens=10_000_001) == "turn.answer_tokens must be a number from 1 to 1e+07"
    )
    assert (
        bad_turn(deadline_seconds=86_401)
        == "turn.deadline_seconds must be a number from 1 to 86400"
    )
    assert bad_turn(deadline_seconds=0) == "turn.deadline_seconds must be a number from 1 to 86400"
    assert bad_turn(deadline_seconds=-1) == "turn.deadline_seconds must be a number from 1 to 86400"
    assert bad_turn(window_tokens=True) == "turn.window_tokens must be a number from 1 to 1e+08"
    assert bad_turn(answer_tokens="5") == "turn.answer_tokens must be a number from 1 to 1e+07"


def test_a_result_to_and_from_the_wire() -> None:
    result = TurnResult(
        session="s", replies=["a", "b"], fresh_context="new", compacted=True, duplicate=True,
        shown=1, cut=True,
    )  # fmt: skip
    wire = result.to_wire("t9")
    assert wire == {
        "ok": True,
        "turn_id": "t9",
        "session": "s",
        "replies": ["a", "b"],
        "fresh_context": "new",
        "compacted": True,
        "duplicate": True,
        "shown": 1,
        "cut": True,
    }
    assert TurnResult.from_wire(wire) == result
    plain = TurnResult.from_wire({"replies": []})
    assert plain == TurnResult(session="")
    assert (plain.fresh_context, plain.compacted, plain.duplicate, plain.shown, plain.cut) == (
        None,
        False,
        False,
        0,
        False,
    )
    assert TurnResult(session="x").to_wire("t") == {
        "ok": True,
        "turn_id": "t",
        "session": "x",
        "replies": [],
        "fresh_context": None,
        "compacted": False,
        "duplicate": False,
        "shown": 0,
        "cut": False,
    }
    loose = TurnResult.from_wire(
        {"replies": ["a"], "session": 5, "fresh_context": 1, "compacted": 1, "duplicate": "yes",
         "cut": 1, "shown": 1}
    )  # fmt: skip
    assert loose == TurnResult(session="", replies=["a"], shown=1)
    assert TurnResult.from_wire({"replies": ["a", "b"], "shown": 2}).shown == 2
    assert TurnResult.from_wire({"replies": ["a"], "shown": 0}).shown == 0
    replies_message = "the runner's answer has no list of text replies"
    for replies in (None, "a", ["a", 1]):
        with pytest.raises(BadFrame) as info:
            TurnResult.from_wire({"replies": replies})
        assert str(info.value) == replies_message
    shown_message = "the runner's answer says a number of shown replies it does not have"
    for shown in (3, -1, True, 1.0, "1", None):
        with pytest.raises(BadFrame) as info:
            TurnResult.from_wire({"replies": ["a", "b"], "shown": shown})
        assert str(info.value) == shown_message


# --------------------------------------------------------------------------- money

LISBON = "Europe/Lisbon"


def stamp(text: str, tz: str = LISBON) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz)).timestamp()


def test_prices_and_costs() -> None:
    assert Prices(input=2.0, output=8.0).to_dict() == {
        "input": 2.0,
        "output": 8.0,
        "cache_read": 2.0,
        "cache_write": 2.0,
    }
    assert Prices(input=2.0, output=8.0, cache_read=0.5, cache_write=3.0).to_dict() == {
        "input": 2.0,
        "output": 8.0,
        "cache_read": 0.5,
        "cache_write": 3.0,
    }
    assert Prices(input=2.0, output=8.0, cache_read=0.0, cache_write=0.0).to_dict() == {
        "input": 2.0,
        "output": 8.0,
        "cache_read": 0.0,
        "cache_write": 0.0,
    }
    assert cost_of(None, Tokens(input=5)) is None
    prices = Prices(input=1.0, output=10.0, cache_read=100.0, cache_write=1000.0)
    tokens = Tokens(input=1, output=2, cache_read=3, cache_write=4)
    assert cost_of(prices, tokens) == 4321 / 1_000_000
    assert cost_of(prices, Tokens()) == 0
    assert cost_of(Prices(input=3.0, output=0.0), Tokens(input=1_000_000)) == 3.0
    assert Tokens() == Tokens(input=0, output=0, cache_read=0, cache_write=0)


def test_minutes_estimates_and_worst_costs() -> None:
    assert cost_per_minute(None, 60) is None
    assert cost_per_minute(2.0, None) is None
    assert cost_per_minute(3.0, 90) == 4.5
    assert cost_per_minute(0.0, 90) == 0.0
    assert [estimate_input_tokens(n) for n in (0, 1, 3, 4, 5, 8, 9)] == [0, 1, 1, 1, 2, 2, 3]
    prices = Prices(input=2.0, output=10.0, cache_read=0.0, cache_write=0.0)
    assert worst_cost(prices, 5, 3) == (2 * 2.0 + 3 * 10.0) / 1_000_000
    assert worst_cost(prices, 0, 0) == 0.0


def test_days_and_months_in_a_zone() -> None:
    noon = stamp("2026-03-15T12:30:00")
    assert day_start(noon, LISBON) == stamp("2026-03-15T00:00:00")
    assert next_day(noon, LISBON) == stamp("2026-03-16T00:00:00")
    assert month_start(noon, LISBON) == stamp("2026-03-01T00:00:00")
    assert next_month(noon, LISBON) == stamp("2026-04-01T00:00:00")
    december = stamp("2026-12-31T23:59:00")
    assert day_start(december, LISBON) == stamp("2026-12-31T00:00:00")
    assert next_day(december, LISBON) == stamp("2027-01-01T00:00:00")
    assert month_start(december, LISBON) == stamp("2026-12-01T00:00:00")
    assert next_month(december, LISBON) == stamp("2027-01-01T00:00:00")
    november = stamp("2026-11-30T10:00:00")
    assert next_month(november, LISBON) == stamp("2026-12-01T00:00:00")
    # a day of 23 hours where the clocks move forward
    assert (
        next_day(stamp("2026-03-29T00:30:00"), LISBON)
        - day_start(stamp("2026-03-29T00:30:00"), LISBON)
        == 23 * 3600
    )
    # the same instant is another day in another zone
    utc_late = stamp("2026-05-31T23:30:00", "UTC")
    assert day_start(utc_late, "Asia/Tokyo") == stamp("2026-06-01T00:00:00", "Asia/Tokyo")
    assert month_start(utc_late, "Asia/Tokyo") == stamp("2026-06-01T00:00:00", "Asia/Tokyo")
    assert next_month(utc_late, "UTC") == stamp("2026-06-01T00:00:00", "UTC")
    assert next_day(utc_late, "Asia/Tokyo") == stamp("2026-06-02T00:00:00", "Asia/Tokyo")
    assert next_month(utc_late, "Asia/Tokyo") == stamp("2026-07-01T00:00:00", "Asia/Tokyo")
    assert local_day(utc_late, "Asia/Tokyo") == "2026-06-01"
    assert local_day(utc_late, "UTC") == "2026-05-31"
    assert money_local_time(utc_late, "UTC") == "2026-05-31 23:30 UTC"
    assert money_local_time(noon, LISBON) == "2026-03-15 12:30 WET"


def test_money_formatting() -> None:
    assert format_money(None, "USD") == "-"
    assert format_money(0.0, "USD") == "0.0000 USD"
    assert format_money(1.23456, "EUR") == "1.2346 EUR"
    assert format_money(99.99, "USD") == "99.9900 USD"
    assert format_money(100, "USD") == "100.00 USD"
    assert format_money(1234.567, "USD") == "1234.57 USD"


# --------------------------------------------------------------------------- units


def test_sizes() -> None:
    assert parse_size(512) == 512
    assert parse_size(0) == 0
    assert parse_size(True) is None
    assert parse_size(1.5) is None
    assert parse_size(None) is None
    assert parse_size("1048576") == 1048576
    assert parse_size("7b") == 7
    assert parse_size("2k") == 2048
    assert parse_size("512m") == 512 * 1024**2
    assert parse_size("1g") == 1024**3
    assert parse_size(" 1 GiB ") == 1024**3
    assert parse_size("10KB") == 10 * 1024
    assert parse_size("3Mi") == 3 * 1024**2
    assert parse_size("1t") is None
    assert parse_size("1.5g") is None
    assert parse_size("") is None
    assert parse_size("g") is None
    assert parse_size("-1k") is None


def test_durations() -> None:
    assert parse_duration(90) == 90
    assert parse_duration(False) is None
    assert parse_duration(2.0) is None
    assert parse_duration("90") == 90
    assert parse_duration("90s") == 90
    assert parse_duration("30m") == 1800
    assert parse_duration(" 2 H ") == 7200
    assert parse_duration("1d") == 86400
    assert parse_duration("1w") is None
    assert parse_duration("1ms") is None
    assert parse_duration("") is None


def test_human_sizes_and_seconds() -> None:
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1024) == "1.0 KiB"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(1024**2 - 1) == "1024.0 KiB"
    assert human_bytes(1024**2) == "1.0 MiB"
    assert human_bytes(5 * 1024**3) == "5.0 GiB"
    assert human_bytes(2048 * 1024**3) == "2048.0 GiB"
    assert human_seconds(0) == "0s"
    assert human_seconds(90.9) == "90s"
    assert human_seconds(119) == "119s"
    assert human_seconds(120) == "2m"
    assert human_seconds(600) == "10m"
    assert human_seconds(7199) == "119m"
    assert human_seconds(7200) == "2h00m"
    assert human_seconds(7300) == "2h01m"
    assert human_seconds(10740) == "2h59m"
    assert human_seconds(10800) == "3h00m"
    assert human_seconds(172799) == "47h59m"
    assert human_seconds(172800) == "2d"
    assert human_seconds(200000) == "2d"
    assert human_seconds(259200) == "3d"


# --------------------------------------------------------------------------- schedules

NOW = stamp("2026-06-10T12:00:00", "UTC")


def task_refusal(call: Any) -> tuple[str, str | None]:
    with pytest.raises(TaskRefused) as info:
        call()
    return info.value.message, info.value.hint


def test_schedule_times_and_zones() -> None:
    assert local_time(None, "UTC") == "-"
    assert local_time(NOW, "UTC") == "2026-06-10 12:00 UTC"
    assert local_time(NOW, LISBON) == "2026-06-10 13:00 WEST"
    assert zone("UTC") == ZoneInfo("UTC")
    unknown = ("unknown time zone 'Mars/Olympus'", "use an IANA name such as Europe/Lisbon or UTC")
    assert task_refusal(lambda: zone("Mars/Olympus")) == unknown
    assert task_refusal(lambda: zone("../etc"))[0] == "unknown time zone '../etc'"


def test_one_off_times() -> None:
    assert parse_at("20m", "UTC", NOW) == NOW + 1200
    assert parse_at(" 2h ", "UTC", NOW) == NOW + 7200
    assert parse_at("90 s", "UTC", NOW) == NOW + 90
    assert parse_at("1d", "UTC", NOW) == NOW + 86400
    assert parse_at("1s", "UTC", NOW) == NOW + 1
    assert task_refusal(lambda: parse_at("0m", "UTC", NOW)) == (
        "--at '0m': a delay must be more than 0",
        None,
    )
    not_a_time = (
        "--at '20': not a time",
        "give a delay such as 20m or 2h, or a time such as 2026-12-24T18:00",
    )
    assert task_refusal(lambda: parse_at("20", "UTC", NOW)) == not_a_time
    assert task_refusal(lambda: parse_at("soon", "UTC", NOW))[0] == "--at 'soon': not a time"
    assert parse_at("2026-06-10T18:00", LISBON, NOW) == stamp("2026-06-10T18:00:00", LISBON)
    assert parse_at("2026-06-10T18:00+00:00", LISBON, NOW) == stamp("2026-06-10T18:00:00", "UTC")
    assert task_refusal(lambda: parse_at("2026-06-10T12:00", "UTC", NOW)) == (
        "--at '2026-06-10T12:00': that time has passed",
        None,
    )
    assert parse_at("2026-06-10T12:00:01", "UTC", NOW) == NOW + 1
    assert task_refusal(lambda: parse_at("2026-06-10T12:00", "Mars/X", NOW))[0] == (
        "unknown time zone 'Mars/X'"
    )


def test_cron_next() -> None:
    assert cron_next("0 8 * * *", "UTC", NOW) == stamp("2026-06-11T08:00:00", "UTC")
    assert cron_next("0 8 * * *", LISBON, NOW) == stamp("2026-06-11T08:00:00", LISBON)
    assert cron_next("0 12 * * *", "UTC", NOW) == stamp("2026-06-11T12:00:00", "UTC")


def test_checked_schedules() -> None:
    assert check_schedule("at", " 20m ", "UTC", NOW, 1200) == ("20m", NOW + 1200)
    assert task_refusal(lambda: check_schedule("at", "20m", "UTC", NOW, 1201)) == (
        "--at '20m': sooner than this group allows (at least 1201s from now)",
        "give a later time, or lower tasks.min_interval in its group.yaml",
    )
    # a time without an offset is in the task's zone
    assert check_schedule("at", "2026-06-10T18:00", LISBON, NOW, 0) == (
        "2026-06-10T18:00",
        stamp("2026-06-10T18:00:00", LISBON),
    )
    assert task_refusal(lambda: check_schedule("at", "20m", "Mars/X", NOW, 0))[0] == (
        "unknown time zone 'Mars/X'"
    )
    assert check_schedule("every", " 30m ", "UTC", NOW, 1800) == ("30m", NOW + 1800)
    assert check_schedule("every", "1s", "UTC", NOW, 0) == ("1s", NOW + 1)
    assert task_refusal(lambda: check_schedule("every", "30m", "UTC", NOW, 1801)) == (
        "--every '30m': more often than this group allows (at least 1801s apart)",
        "raise the interval, or tasks.min_interval in its group.yaml",
    )
    for spec in ("often", "0m"):
        assert task_refusal(lambda spec=spec: check_schedule("every", spec, "UTC", NOW, 0)) == (
            f"--every {spec!r}: not a duration",
            "give one such as 30m, 2h or 1d",
        )
    assert check_schedule("cron", " 0  8 * * * ", LISBON, NOW, 86400) == (
        "0 8 * * *",
        stamp("2026-06-11T08:00:00", LISBON),
    )
    assert task_refusal(lambda: check_schedule("cron", "0 8 * * *", "UTC", NOW, 86401)) == (
        "--cron '0 8 * * *': runs 86400s apart, more often than this group allows "
        "(at least 86401s)",
        "raise tasks.min_interval in its group.yaml, or run less often",
    )
    # the smallest gap of the first five runs counts: Mondays and Tuesdays at 08:00
    assert task_refusal(lambda: check_schedule("cron", "0 8 * * 1,2", "UTC", NOW, 86401))[0] == (
        "--cron '0 8 * * 1,2': runs 86400s apart, more often than this group allows "
        "(at least 86401s)"
    )
    # 2026-06-10 is a Wednesday: the 5 runs are Mon 15, Tue 16, Mon 22, Tue 23, Mon 29
    assert check_schedule("cron", "0 8 * * 1,2", "UTC", NOW, 86400) == (
        "0 8 * * 1,2",
        stamp("2026-06-15T08:00:00", "UTC"),
    )
    # five runs a day apart, then a sixth much later: only the first five are looked at
    assert check_schedule("cron", "0 8 11-15,30 6 *", "UTC", NOW, 86400)[1] == stamp(
        "2026-06-11T08:00:00", "UTC"
    )
    # exactly the first five runs: a closer sixth is not looked at, a closer fifth is
    two_days = 2 * 86400
    assert check_schedule("cron", "0 8 11,13,15,17,19,20 6 *", "UTC", NOW, two_days)[1] == (
        stamp("2026-06-11T08:00:00", "UTC")
    )
    assert task_refusal(
        lambda: check_schedule("cron", "0 8 11,13,15,17,18 6 *", "UTC", NOW, two_days)
    )[0].startswith("--cron '0 8 11,13,15,17,18 6 *': runs 86400s apart")
    assert task_refusal(lambda: check_schedule("cron", "*/5 * * * *", "UTC", NOW, 301))[0] == (
        "--cron '*/5 * * * *': runs 300s apart, more often than this group allows (at least 301s)"
    )
    assert task_refusal(lambda: check_schedule("cron", "61 * * * *", "UTC", NOW, 0)) == (
        "--cron '61 * * * *': not a cron expression",
        "five fields: minute hour day month weekday, such as '0 8 * * 1-5'",
    )
    assert task_refusal(lambda: check_schedule("weekly", "x", "UTC", NOW, 0)) == (
        "unknown schedule kind 'weekly'; known: at, every, cron",
        None,
    )
    assert task_refusal(lambda: check_schedule("weekly", "x", "Mars/X", NOW, 0))[0] == (
        "unknown time zone 'Mars/X'"
    )


def test_next_due_times() -> None:
    assert next_due("at", "20m", "UTC", NOW, NOW) is None
    assert next_due("every", "1m", "UTC", None, NOW) == NOW + 60
    assert next_due("every", "10m", "UTC", NOW + 5, NOW) == NOW + 5
    assert next_due("every", "10m", "UTC", NOW, NOW) == NOW + 600
    # on the grid of the last due time after a long downtime
    assert next_due("every", "1m", "UTC", 100.0, 1000.0) == 1060.0
    assert next_due("every", "1m", "UTC", 100.0, 1060.0) == 1120.0
    assert next_due("every", "1m", "UTC", 100.0, 1059.0) == 1060.0
    # a spec that is no duration runs every minute
    assert next_due("every", "0", "UTC", None, NOW) == NOW + 60
    assert next_due("every", "soon", "UTC", None, NOW) == NOW + 60
    assert next_due("cron", "0 8 * * *", LISBON, None, NOW) == stamp("2026-06-11T08:00:00", LISBON)


# --------------------------------------------------------------------------- limits


def test_default_concurrency_and_model_request_cap() -> None:
    assert default_concurrency(None) == DEFAULT_CONCURRENCY_MIN == 8
    assert default_concurrency(0) == 8
    assert default_concurrency(1) == 8
    assert default_concurrency(2) == 8
    assert default_concurrency(3) == 12
    assert default_concurrency(16) == 64
    tools = MAX_TOOL_STEPS_PER_TURN * TOOL_READ_MAX_CHARS
    assert model_request_cap(1000) == (
        4 * (CHARS_PER_TOKEN_ESTIMATE * 1000 + tools) + RELAY_MODEL_REQUEST_SLACK_BYTES
    )
    assert model_request_cap(0) == 4 * 12 * 100_000 + 256 * 1024
    assert model_request_cap(1) - model_request_cap(0) == 4 * 3


def test_an_error_about_a_mapping_as_a_whole_names_its_key_and_line() -> None:
    r = reader("top: 1\nmcp:\n  tools:\n    a: 1\n", "mcp", "tools")
    assert r.fail_here("too many").message == "/cfg/group.yaml:3: mcp.tools: too many"
