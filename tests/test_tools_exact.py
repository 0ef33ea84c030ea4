"""The agent's built-in tools word for word: the toolbox's dispatch and paths, the file
tools (read, write, edit, append, list, grep, the flush's append_daily), send_message and
send_file, request_packages, web_fetch and web_search, and what they share (schema,
locks, the opening of a regular file). Each behavior on its own, with exact texts and
bounds at their edges."""

from __future__ import annotations

import errno
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.hostlink import HostLink, HostRequestFailed
from orchestrator.agent.tools import (
    BUILT_IN,
    FLUSH,
    TURN,
    FileLocks,
    FunctionTool,
    StaticSource,
    Toolbox,
    ToolError,
    ToolSpec,
    schema,
)
from orchestrator.agent.tools.base import NotRegular, open_regular
from orchestrator.limits import (
    FLUSH_MAX_CHARS,
    MESSAGE_MAX_CHARS,
    TOOL_GREP_MAX_MATCHES,
    TOOL_READ_MAX_CHARS,
    TOOL_WRITE_MAX_CHARS,
)

NOW = datetime(2026, 3, 14, 9, 30, tzinfo=UTC)


class FakeHost(HostLink):
    """A host that records each request and answers ``answer`` (or fails with ``fail``)."""

    def __init__(self, answer: dict[str, Any] | None = None, fail: str | None = None) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.answer = answer if answer is not None else {"ok": True}
        self.fail = fail

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self.requests.append((op, fields))
        if self.fail is not None:
            raise HostRequestFailed(self.fail)
        return self.answer


def box_of(agent: Path, **kwargs: Any) -> Toolbox:
    (agent / "memory").mkdir(parents=True, exist_ok=True)
    (agent / "files").mkdir(parents=True, exist_ok=True)
    return Toolbox(agent, now=NOW, **kwargs)


def refusal(box: Toolbox, name: str, args: dict[str, object]) -> str:
    with pytest.raises(ToolError) as caught:
        box.call(name, args)
    return str(caught.value)


# base: schema, modes, locks


def test_schema_is_a_closed_object_of_the_named_types() -> None:
    assert schema(["a"], a="string", b="boolean") == {
        "type": "object",
        "required": ["a"],
        "additionalProperties": False,
        "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}},
    }


def test_the_modes_are_named_turn_and_flush() -> None:
    assert (TURN, FLUSH) == ("turn", "flush")


def test_file_locks_give_one_lock_per_path() -> None:
    locks = FileLocks()
    first = locks.of(Path("/a/b"))
    assert locks.of(Path("/a/b")) is first
    assert locks.of(Path("/a/c")) is not first
    with first:
        assert not locks.of(Path("/a/b")).acquire(blocking=False)


def test_a_regular_file_is_opened_with_its_size(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    handle, size = open_regular(tmp_path / "f")
    with handle:
        assert (handle.read(), size) == (b"abc", 3)


def test_a_link_a_folder_and_a_fifo_are_not_opened_as_regular_files(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "f")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")  # no writer: an open that blocked would never end
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(OSError) as linked:
        open_regular(tmp_path / "link")
    assert linked.value.errno == errno.ELOOP
    for name, is_kind in (("dir", stat.S_ISDIR), ("fifo", stat.S_ISFIFO)):
        with pytest.raises(NotRegular) as refused:
            open_regular(tmp_path / name)
        assert is_kind(refused.value.mode)
        assert (refused.value.errno, refused.value.strerror, refused.value.filename) == (
            errno.EINVAL,
            "not a regular file",
            str(tmp_path / name),
        )
    assert len(os.listdir("/proc/self/fd")) == before


# box: dispatch


def test_a_toolbox_starts_in_a_turn_with_nothing_sent_and_utc_time(tmp_path: Path) -> None:
    box = Toolbox(tmp_path)
    assert box.mode == TURN
    assert box.now.tzinfo is UTC
    assert (box.outbox, box.flushed_chars, box.memory_changed) == ([], 0, False)
    assert (box.host, box.allowed, box.session_key, box.deadline) == (None, None, None, None)
    assert (box.source, box.sender) == ("", None)
    assert box.sources == BUILT_IN
    assert [s.name for s in box.specs[:2]] == ["read_file", "write_file"]


def test_bad_arguments_are_refused_with_the_tools_name(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    assert refusal(box, "read_file", {}) == (
        "bad arguments for read_file: missing a required argument: 'path'"
    )
    assert refusal(box, "read_file", {"path": "x", "mode": "r"}) == (
        "bad arguments for read_file: got an unexpected keyword argument 'mode'"
    )


def test_a_type_error_inside_the_call_is_refused_as_bad_arguments(tmp_path: Path) -> None:
    def broken(box: Toolbox) -> str:
        raise TypeError("no good")

    spec = ToolSpec("broken", "", schema([]))
    box = Toolbox(tmp_path, sources=[StaticSource("s", (FunctionTool(spec, broken),))])
    assert refusal(box, "broken", {}) == "bad arguments for broken: no good"


def test_a_call_answers_the_functions_value_as_text(tmp_path: Path) -> None:
    def count(box: Toolbox) -> Any:
        return 7

    spec = ToolSpec("count", "", schema([]))
    box = Toolbox(tmp_path, sources=[StaticSource("s", (FunctionTool(spec, count),))])
    assert box.call("count", {}) == "7"


def test_the_first_source_to_name_a_tool_keeps_it(tmp_path: Path) -> None:
    spec = ToolSpec("t", "", schema([]))
    first = FunctionTool(spec, lambda b: "first")
    second = FunctionTool(spec, lambda b: "second")
    box = Toolbox(
        tmp_path,
        sources=[StaticSource("a", (first,)), StaticSource("b", (second,))],
        allowed=frozenset({"b"}),
    )
    assert box.specs == ()
    assert refusal(box, "t", {}) == "t is not granted on this turn"


def test_allowed_names_a_source_or_a_tool(tmp_path: Path) -> None:
    by_source = box_of(tmp_path, allowed=frozenset({"web"}))
    assert [s.name for s in by_source.specs] == ["web_fetch", "web_search"]
    by_tool = box_of(tmp_path, allowed=frozenset({"web_search", "nothing"}))
    assert [s.name for s in by_tool.specs] == ["web_search"]
    assert refusal(by_tool, "web_fetch", {"url": "x"}) == "web_fetch is not granted on this turn"


def test_an_unknown_tool_is_refused_by_name(tmp_path: Path) -> None:
    assert refusal(box_of(tmp_path), "nope", {}) == "unknown tool 'nope'"


def test_a_flush_refuses_every_write_but_append_daily(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    assert refusal(box, "write_file", {"path": "memory/a.md", "content": "x"}) == (
        "write_file is refused during a memory flush: the only write allowed is "
        "append_daily to today's daily note"
    )
    assert not (tmp_path / "memory" / "a.md").exists()
    assert "append_daily" in [s.name for s in box.specs]
    assert "write_file" not in [s.name for s in box.specs]


def test_append_daily_is_unknown_outside_a_flush(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    assert "append_daily" not in [s.name for s in box.specs]
    assert refusal(box, "append_daily", {"content": "x"}) == "unknown tool 'append_daily'"


def test_a_flush_tool_not_granted_is_refused_as_not_granted(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH, allowed=frozenset({"messages"}))
    assert refusal(box, "read_file", {"path": "x"}) == "read_file is not granted on this turn"


def test_the_tool_gets_a_copy_of_the_arguments(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def keep(box: Toolbox, **args: Any) -> str:
        seen.append(args)
        return ""

    spec = ToolSpec("keep", "", schema([]))
    box = Toolbox(tmp_path, sources=[StaticSource("s", (FunctionTool(spec, keep),))])
    args: dict[str, object] = {"a": 1}
    box.call("keep", args)
    assert seen == [{"a": 1}]


# box: paths


@pytest.mark.parametrize("path", ["", "a\x00b", 3])
def test_a_path_must_be_a_non_empty_string(tmp_path: Path, path: Any) -> None:
    assert refusal(box_of(tmp_path), "read_file", {"path": path}) == (
        "path must be a non-empty string"
    )


def test_a_path_with_a_control_character_is_refused_with_its_problem(tmp_path: Path) -> None:
    assert refusal(box_of(tmp_path), "read_file", {"path": "a\x1bb"}) == (
        "a\\u{001b}b: refused: the path contains the control character U+001B"
    )
    assert refusal(box_of(tmp_path), "read_file", {"path": "a\nb"}) == (
        "a\\u{000a}b: refused: the path contains a line break"
    )


def test_an_absolute_path_inside_the_agent_folder_is_taken(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "a.txt").write_text("hello")
    assert box.call("read_file", {"path": str(tmp_path / "files" / "a.txt")}) == "hello"
    assert box.call("read_file", {"path": "files/../files/a.txt"}) == "hello"


def test_paths_outside_the_agent_folder_are_refused(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    box = box_of(agent)
    (tmp_path / "secret").write_text("s")
    assert refusal(box, "read_file", {"path": "/etc/passwd"}) == (
        "/etc/passwd: outside /workspace/agent"
    )
    assert refusal(box, "read_file", {"path": "../secret"}) == (
        "../secret: outside /workspace/agent"
    )
    assert refusal(box, "read_file", {"path": "files/../../secret"}) == (
        "files/../../secret: outside /workspace/agent"
    )
    (agent / "files" / "out").symlink_to(tmp_path / "secret")
    assert refusal(box, "read_file", {"path": "files/out"}) == (
        "files/out: resolves outside /workspace/agent (symlink refused)"
    )


def test_the_agent_folder_itself_is_readable_but_not_writable(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    assert box.call("list_dir", {"path": "."}) == "files/\nmemory/"
    assert box.call("list_dir", {"path": str(tmp_path)}) == "files/\nmemory/"
    assert refusal(box, "write_file", {"path": ".", "content": "x"}) == (
        ".: writes are allowed only under memory/ and files/"
    )


def test_the_sessions_folder_is_not_readable(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "a.jsonl").write_text("{}")
    assert refusal(box, "read_file", {"path": "sessions/a.jsonl"}) == (
        "sessions/a.jsonl: sessions/ holds the conversations; it is not readable"
    )
    assert refusal(box, "list_dir", {"path": "sessions"}) == (
        "sessions: sessions/ holds the conversations; it is not readable"
    )
    (tmp_path / "files" / "sessions").mkdir()
    assert box.call("list_dir", {"path": "files/sessions"}) == "(empty)"


def test_writes_go_only_under_memory_and_files(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    assert refusal(box, "write_file", {"path": "skills/x.md", "content": "x"}) == (
        "skills/x.md: writes are allowed only under memory/ and files/"
    )
    assert box.call("write_file", {"path": "memory/x.md", "content": "x"}).startswith("PERSISTED")
    assert box.call("write_file", {"path": "files/x.md", "content": "x"}).startswith("PERSISTED")


# files: read


def test_read_file_refuses_a_missing_file_and_a_folder(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    assert refusal(box, "read_file", {"path": "files/none"}) == "files/none: no such file"
    assert refusal(box, "read_file", {"path": "files"}) == "files: is a folder; use list_dir"


def test_read_file_cuts_at_the_limit_and_says_so(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "exact").write_text("a" * TOOL_READ_MAX_CHARS)
    (tmp_path / "files" / "over").write_text("a" * TOOL_READ_MAX_CHARS + "b")
    assert box.call("read_file", {"path": "files/exact"}) == "a" * TOOL_READ_MAX_CHARS
    assert box.call("read_file", {"path": "files/over"}) == (
        "a" * TOOL_READ_MAX_CHARS + f"\n[cut at {TOOL_READ_MAX_CHARS} characters]"
    )


def test_read_file_shows_bytes_that_are_not_utf8_as_replacements(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "bin").write_bytes(b"a\xffb")
    assert box_of(tmp_path).call("read_file", {"path": "files/bin"}) == "a\ufffdb"


# files: write


def test_write_file_persists_and_counts_bytes(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    assert box.call("write_file", {"path": "memory/new/deep/é.md", "content": "héllo"}) == (
        "PERSISTED: memory/new/deep/é.md (6 bytes)"
    )
    assert (tmp_path / "memory" / "new" / "deep" / "é.md").read_text() == "héllo"
    assert box.memory_changed is True


def test_write_file_takes_content_up_to_the_limit(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    assert box.call("write_file", {"path": "files/a", "content": "a" * TOOL_WRITE_MAX_CHARS})
    message = f"content must be text of at most {TOOL_WRITE_MAX_CHARS} characters"
    over: dict[str, object] = {"path": "files/b", "content": "a" * (TOOL_WRITE_MAX_CHARS + 1)}
    assert refusal(box, "write_file", over) == message
    assert refusal(box, "write_file", {"path": "files/b", "content": 5}) == message
    assert not (tmp_path / "files" / "b").exists()


def test_write_file_refuses_a_folder(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "dir").mkdir()
    assert refusal(box, "write_file", {"path": "files/dir", "content": "x"}) == (
        "files/dir: is a folder"
    )
    assert box.memory_changed is False


# files: edit


def test_edit_file_replaces_the_one_occurrence(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "memory" / "a.md").write_text("one two three")
    assert box.call("edit_file", {"path": "memory/a.md", "old_text": "two", "new_text": "2"}) == (
        "PERSISTED: memory/a.md (11 bytes)"
    )
    assert (tmp_path / "memory" / "a.md").read_text() == "one 2 three"
    assert box.memory_changed is True


def test_edit_file_refuses_a_missing_file_and_text_not_there_exactly_once(
    tmp_path: Path,
) -> None:
    box = box_of(tmp_path)
    args: dict[str, object] = {"path": "memory/a.md", "old_text": "x", "new_text": "y"}
    assert refusal(box, "edit_file", args) == "memory/a.md: no such file"
    (tmp_path / "memory" / "a.md").write_text("x x")
    assert refusal(box, "edit_file", args) == (
        "memory/a.md: old_text occurs 2 times; it must occur exactly once"
    )
    assert refusal(box, "edit_file", {**args, "old_text": "z"}) == (
        "memory/a.md: old_text occurs 0 times; it must occur exactly once"
    )
    assert refusal(box, "edit_file", {**args, "old_text": ""}) == (
        "memory/a.md: old_text occurs 0 times; it must occur exactly once"
    )
    assert (tmp_path / "memory" / "a.md").read_text() == "x x"


def test_edit_file_takes_a_result_up_to_the_limit(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "a").write_text("x")
    fits = "a" * TOOL_WRITE_MAX_CHARS
    assert box.call("edit_file", {"path": "files/a", "old_text": "x", "new_text": fits})
    (tmp_path / "files" / "b").write_text("x")
    assert refusal(
        box, "edit_file", {"path": "files/b", "old_text": "x", "new_text": fits + "a"}
    ) == (f"files/b: the result would pass {TOOL_WRITE_MAX_CHARS} characters")
    assert (tmp_path / "files" / "b").read_text() == "x"


def test_edit_file_refuses_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "bin").write_bytes(b"\xff")
    assert refusal(box, "edit_file", {"path": "files/bin", "old_text": "a", "new_text": "b"}) == (
        "files/bin: not a UTF-8 text file"
    )
    (tmp_path / "files" / "dir").mkdir()
    assert refusal(box, "edit_file", {"path": "files/dir", "old_text": "a", "new_text": "b"}) == (
        "files/dir: not a UTF-8 text file"
    )


# files: append


def test_append_file_creates_with_create_with_and_a_line_break(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    args: dict[str, object] = {"path": "memory/log.md", "content": "first", "create_with": "# Log"}
    assert box.call("append_file", args) == "PERSISTED: memory/log.md (11 bytes)"
    assert (tmp_path / "memory" / "log.md").read_text() == "# Log\nfirst"
    assert box.memory_changed is True
    box.call("append_file", {**args, "content": "second\n"})
    assert (tmp_path / "memory" / "log.md").read_text() == "# Log\nfirst\nsecond\n"
    box.call("append_file", {**args, "content": "third"})
    assert (tmp_path / "memory" / "log.md").read_text() == "# Log\nfirst\nsecond\nthird"


def test_append_file_to_a_missing_file_without_create_with_starts_with_the_content(
    tmp_path: Path,
) -> None:
    box = box_of(tmp_path)
    box.call("append_file", {"path": "files/a", "content": "x"})
    assert (tmp_path / "files" / "a").read_text() == "x"
    (tmp_path / "files" / "empty").write_text("")
    box.call("append_file", {"path": "files/empty", "content": "y", "create_with": "z"})
    assert (tmp_path / "files" / "empty").read_text() == "y"


def test_append_file_skips_text_already_there_only_when_asked(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "a").write_text("keep this\n")
    args = {"path": "files/a", "content": "  keep this \n", "skip_if_present": True}
    assert box.call("append_file", args) == ("NOTHING APPENDED: files/a already contains that text")
    assert box.memory_changed is False
    box.call("append_file", {**args, "skip_if_present": False})
    assert (tmp_path / "files" / "a").read_text() == "keep this\n  keep this \n"
    assert box.call("append_file", {"path": "files/new", "content": "x", "skip_if_present": True})
    assert (tmp_path / "files" / "new").read_text() == "x"


def test_append_file_refuses_content_that_is_not_text(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    message = "content and create_with must be text"
    assert refusal(box, "append_file", {"path": "files/a", "content": 1}) == message
    assert refusal(box, "append_file", {"path": "files/a", "content": "", "create_with": 1}) == (
        message
    )


def test_append_file_takes_a_result_up_to_the_limit(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "a").write_text("a\n")
    fits = "a" * (TOOL_WRITE_MAX_CHARS - 2)
    assert box.call("append_file", {"path": "files/a", "content": fits})
    (tmp_path / "files" / "b").write_text("a\n")
    assert refusal(box, "append_file", {"path": "files/b", "content": fits + "a"}) == (
        f"files/b: the result would pass {TOOL_WRITE_MAX_CHARS} characters"
    )


# files: list and grep


def test_list_dir_lists_names_sorted_with_folders_marked(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    for name in ("b.md", "A.md", "c\x1b.md"):
        (tmp_path / "files" / name).write_text("")
    (tmp_path / "files" / "d").mkdir()
    assert box.call("list_dir", {"path": "files"}) == "A.md\nb.md\nc\\u{001b}.md\nd/"
    (tmp_path / "files" / "e").mkdir()
    assert box.call("list_dir", {"path": "files/e"}) == "(empty)"
    assert refusal(box, "list_dir", {"path": "files/b.md"}) == "files/b.md: not a folder"
    assert refusal(box, "list_dir", {"path": "files/none"}) == "files/none: not a folder"


def test_list_dir_lists_the_agent_folder_by_default(tmp_path: Path) -> None:
    assert box_of(tmp_path).call("list_dir", {}) == "files/\nmemory/"


def test_grep_finds_lines_case_insensitively_with_path_and_number(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "memory" / "b.md").write_text("nothing\nRex the DOG\n")
    (tmp_path / "memory" / "a.md").write_text("a dog\n")
    (tmp_path / "memory" / "sub").mkdir()
    (tmp_path / "memory" / "sub" / "c.md").write_text("dog\n")
    (tmp_path / "files" / "d.md").write_text("dog\n")
    assert box.call("grep", {"pattern": "dog"}) == (
        "memory/a.md:1: a dog\nmemory/b.md:2: Rex the DOG\nmemory/sub/c.md:1: dog"
    )
    assert box.call("grep", {"pattern": "cat"}) == "(no matches)"


def test_grep_skips_hidden_folders_symlinks_and_the_conversations(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "memory" / ".git").mkdir()
    (tmp_path / "memory" / ".git" / "x").write_text("dog\n")
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "s.jsonl").write_text("dog\n")
    (tmp_path / "memory" / "real.md").write_text("dog\n")
    (tmp_path / "memory" / "link.md").symlink_to(tmp_path / "memory" / "real.md")
    (tmp_path / "files" / "sessions").mkdir()
    (tmp_path / "files" / "sessions" / "s.md").write_text("dog\n")
    (tmp_path / "files" / ".hidden.md").write_text("dog\n")
    assert box.call("grep", {"pattern": "dog", "path": "."}) == (
        "files/.hidden.md:1: dog\nfiles/sessions/s.md:1: dog\nmemory/real.md:1: dog"
    )


def test_grep_shows_names_escaped(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "memory" / "a\x1b.md").write_text("dog\n")
    assert box.call("grep", {"pattern": "dog"}) == "memory/a\\u{001b}.md:1: dog"


def test_grep_stops_at_the_most_matches(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "memory" / "a.md").write_text("dog\n" * TOOL_GREP_MAX_MATCHES)
    lines = [f"memory/a.md:{n}: dog" for n in range(1, TOOL_GREP_MAX_MATCHES + 1)]
    assert box.call("grep", {"pattern": "dog"}) == ("\n".join(lines) + "\n[more matches not shown]")
    (tmp_path / "memory" / "a.md").write_text("dog\n" * (TOOL_GREP_MAX_MATCHES - 1))
    assert box.call("grep", {"pattern": "dog"}) == "\n".join(lines[:-1])


def test_grep_refuses_a_bad_pattern(tmp_path: Path) -> None:
    assert refusal(box_of(tmp_path), "grep", {"pattern": "("}) == (
        "bad pattern '(': missing ), unterminated subpattern at position 0"
    )


def test_grep_reads_bytes_that_are_not_utf8_as_replacements(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "memory" / "a.md").write_bytes(b"dog \xff\n")
    assert box.call("grep", {"pattern": "dog"}) == "memory/a.md:1: dog \ufffd"


# files: append_daily


def test_append_daily_starts_todays_note_with_its_header(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH, source="alice (creator); chat c; 09:30")
    said = box.call("append_daily", {"content": "Rex is a dog.\nhe likes walks"})
    assert said == "PERSISTED: appended 2 lines to memory/daily/2026-03-14.md"
    note = tmp_path / "memory" / "daily" / "2026-03-14.md"
    assert note.read_text() == (
        '---\ntype: daily-note\ndate: "2026-03-14"\n---\n\n# 2026-03-14\n\n'
        "- Rex is a dog. — alice (creator); chat c; 09:30\n"
        "- he likes walks — alice (creator); chat c; 09:30\n"
    )
    assert box.memory_changed is True
    assert box.flushed_chars == len("Rex is a dog.") + 1 + len("he likes walks") + 1


def test_append_daily_appends_after_a_line_break_without_a_header(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    note = tmp_path / "memory" / "daily" / "2026-03-14.md"
    note.parent.mkdir(parents=True)
    note.write_bytes(b"# today\r\n- old")
    assert box.call("append_daily", {"content": "new fact"}) == (
        "PERSISTED: appended 1 lines to memory/daily/2026-03-14.md"
    )
    assert note.read_bytes() == b"# today\r\n- old\n- new fact\n"


def test_append_daily_skips_what_todays_or_yesterdays_note_holds(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    daily = tmp_path / "memory" / "daily"
    daily.mkdir(parents=True)
    (daily / "2026-03-13.md").write_text("- from yesterday\n")
    (daily / "2026-03-14.md").write_text("- from today\n")
    assert box.call("append_daily", {"content": "from yesterday\nfrom today\nwhy?"}) == (
        "NOTHING APPENDED: every line is already in today's or yesterday's note, or is "
        "not a fact (a question, a heading, a flush or compaction marker)"
    )
    assert box.memory_changed is False
    assert box.call("append_daily", {"content": "from yesterday\nnew\n# Heading"}) == (
        "PERSISTED: appended 1 lines to memory/daily/2026-03-14.md (1 already noted; 1 not facts)"
    )


def test_append_daily_ignores_a_yesterday_that_is_a_symlink_or_a_folder(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    daily = tmp_path / "memory" / "daily"
    daily.mkdir(parents=True)
    (tmp_path / "memory" / "elsewhere.md").write_text("- linked fact\n")
    (daily / "2026-03-13.md").symlink_to(tmp_path / "memory" / "elsewhere.md")
    assert box.call("append_daily", {"content": "linked fact"}) == (
        "PERSISTED: appended 1 lines to memory/daily/2026-03-14.md"
    )
    (daily / "2026-03-13.md").unlink()
    (daily / "2026-03-13.md").mkdir()
    assert box.call("append_daily", {"content": "another fact"}) == (
        "PERSISTED: appended 1 lines to memory/daily/2026-03-14.md"
    )


def test_append_daily_keeps_to_the_flushs_cap_in_whole_lines(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    box.flushed_chars = FLUSH_MAX_CHARS - 4
    assert box.call("append_daily", {"content": "abc\ndef"}) == (
        "PERSISTED: appended 1 lines to memory/daily/2026-03-14.md "
        "(1 over this flush's cap, left for the next one)"
    )
    assert box.flushed_chars == FLUSH_MAX_CHARS
    assert box.call("append_daily", {"content": "def"}) == (
        f"NOTHING APPENDED: this flush has used its {FLUSH_MAX_CHARS} characters; "
        "1 lines are left for the next flush"
    )


def test_append_daily_refuses_content_that_is_not_text(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    assert refusal(box, "append_daily", {"content": 3}) == "content must be text"


def test_append_daily_refuses_a_note_that_is_a_symlink(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    daily = tmp_path / "memory" / "daily"
    daily.mkdir(parents=True)
    (tmp_path / "memory" / "other.md").write_text("")
    (daily / "2026-03-14.md").symlink_to(tmp_path / "memory" / "other.md")
    assert refusal(box, "append_daily", {"content": "x"}) == (
        "the daily note is a symlink; refusing to write through it"
    )
    assert (tmp_path / "memory" / "other.md").read_text() == ""


def test_append_daily_refuses_a_dangling_symlink_note(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    daily = tmp_path / "memory" / "daily"
    daily.mkdir(parents=True)
    (daily / "2026-03-14.md").symlink_to(tmp_path / "memory" / "gone.md")
    assert refusal(box, "append_daily", {"content": "x"}) == (
        "the daily note is a symlink; refusing to write through it"
    )
    assert not (tmp_path / "memory" / "gone.md").exists()


def test_append_daily_writes_the_note_with_mode_0644(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    old = os.umask(0)
    try:
        box.call("append_daily", {"content": "a fact"})
    finally:
        os.umask(old)
    note = tmp_path / "memory" / "daily" / "2026-03-14.md"
    assert note.stat().st_mode & 0o777 == 0o644


# messages


def test_send_message_hands_the_reply_to_the_host_numbered(tmp_path: Path) -> None:
    host = FakeHost()
    box = box_of(tmp_path, host=host)
    assert box.call("send_message", {"text": "hi"}) == "SENT"
    assert box.call("send_message", {"text": "again"}) == "SENT"
    assert host.requests == [
        ("reply", {"seq": 0, "text": "hi"}),
        ("reply", {"seq": 1, "text": "again"}),
    ]
    assert box.outbox == ["hi", "again"]


def test_send_message_cuts_text_at_the_limit(tmp_path: Path) -> None:
    host = FakeHost()
    box = box_of(tmp_path, host=host)
    box.call("send_message", {"text": "a" * MESSAGE_MAX_CHARS + "b"})
    assert box.outbox == ["a" * MESSAGE_MAX_CHARS]
    assert host.requests[0][1]["text"] == "a" * MESSAGE_MAX_CHARS


@pytest.mark.parametrize("text", ["", " \n", 5])
def test_send_message_refuses_empty_text(tmp_path: Path, text: Any) -> None:
    box = box_of(tmp_path, host=FakeHost())
    assert refusal(box, "send_message", {"text": text}) == "text must be a non-empty string"
    assert box.outbox == []


def test_send_message_not_sent_is_said_and_not_kept(tmp_path: Path) -> None:
    box = box_of(tmp_path, host=FakeHost(fail="reply: busy"))
    assert refusal(box, "send_message", {"text": "hi"}) == "the message was not sent: reply: busy"
    assert box.outbox == []


def test_send_message_without_a_host_is_kept_in_the_outbox(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    assert box.call("send_message", {"text": "hi"}) == "SENT"
    assert box.outbox == ["hi"]


def test_send_file_asks_the_host_with_the_files_path_and_caption(tmp_path: Path) -> None:
    host = FakeHost({"ok": True, "text": "[file: r.txt]", "size": 3})
    box = box_of(tmp_path, host=host)
    box.outbox.append("before")
    (tmp_path / "files" / "r.txt").write_text("abc")
    assert box.call("send_file", {"path": "files/r.txt", "caption": "c"}) == (
        "SENT: files/r.txt (3 bytes)"
    )
    assert host.requests == [("file.send", {"seq": 1, "path": "files/r.txt", "caption": "c"})]
    assert box.outbox == ["before", "[file: r.txt]"]


def test_send_file_keeps_the_caption_or_else_the_path_when_the_host_says_no_text(
    tmp_path: Path,
) -> None:
    host = FakeHost({"ok": True})
    box = box_of(tmp_path, host=host)
    (tmp_path / "files" / "r.txt").write_text("abc")
    assert box.call("send_file", {"path": "files/r.txt", "caption": "the numbers"}) == (
        "SENT: files/r.txt"
    )
    box.call("send_file", {"path": "files/r.txt"})
    assert box.outbox == ["the numbers", "files/r.txt"]
    assert host.requests[1] == ("file.send", {"seq": 1, "path": "files/r.txt", "caption": ""})


@pytest.mark.parametrize("size", [True, "3", 3.0])
def test_send_file_shows_a_size_only_when_the_host_answers_a_whole_number(
    tmp_path: Path, size: object
) -> None:
    box = box_of(tmp_path, host=FakeHost({"ok": True, "size": size}))
    (tmp_path / "files" / "r.txt").write_text("abc")
    assert box.call("send_file", {"path": "files/r.txt"}) == "SENT: files/r.txt"


def test_send_file_refusals(tmp_path: Path) -> None:
    box = box_of(tmp_path, host=FakeHost(fail="file.send: too big"))
    (tmp_path / "memory" / "m.md").write_text("x")
    (tmp_path / "files" / "r.txt").write_text("x")
    (tmp_path / "files" / "dir").mkdir()
    assert refusal(box, "send_file", {"path": "files/r.txt", "caption": 1}) == (
        "caption must be a string"
    )
    assert refusal(box, "send_file", {"path": "memory/m.md"}) == (
        "memory/m.md: only files under files/ can be sent"
    )
    assert refusal(box, "send_file", {"path": "filesx/a"}) == (
        "filesx/a: only files under files/ can be sent"
    )
    assert refusal(box, "send_file", {"path": "files/dir"}) == "files/dir: not a file"
    assert refusal(box, "send_file", {"path": "files/none"}) == "files/none: not a file"
    assert refusal(box, "send_file", {"path": "files/r.txt"}) == (
        "the file was not sent: file.send: too big"
    )
    assert box.outbox == []
    assert refusal(box_of(tmp_path), "send_file", {"path": "files/r.txt"}) == (
        "files are sent through the host; this turn runs without one"
    )


# packages


def test_request_packages_asks_the_host_and_answers_its_result(tmp_path: Path) -> None:
    host = FakeHost({"ok": True, "result": "HELD: request 3"})
    box = box_of(tmp_path, host=host)
    args: dict[str, object] = {"reason": "charts", "debian": ["gnuplot"], "python": ["rich"]}
    assert box.call("request_packages", args) == "HELD: request 3"
    assert host.requests == [
        ("packages.request", {"debian": ["gnuplot"], "python": ["rich"], "reason": "charts"})
    ]


def test_request_packages_sends_empty_lists_for_none_given(tmp_path: Path) -> None:
    host = FakeHost({"ok": True})
    box = box_of(tmp_path, host=host)
    assert box.call("request_packages", {"reason": "r"}) == ""
    assert host.requests == [("packages.request", {"debian": [], "python": [], "reason": "r"})]


def test_request_packages_refusals(tmp_path: Path) -> None:
    assert refusal(box_of(tmp_path), "request_packages", {"reason": "r"}) == (
        "packages are granted by the orchestrator; no host here"
    )
    box = box_of(tmp_path, host=FakeHost(fail="packages.request: not allowed"))
    assert refusal(box, "request_packages", {"reason": "r"}) == "packages.request: not allowed"


# web


def test_web_fetch_asks_the_host_for_the_url_stripped(tmp_path: Path) -> None:
    host = FakeHost({"ok": True, "result": "# Page"})
    box = box_of(tmp_path, host=host)
    assert box.call("web_fetch", {"url": " https://x.test/ \n"}) == "# Page"
    assert host.requests == [("web.fetch", {"url": "https://x.test/"})]


def test_web_search_asks_the_host_for_the_query_as_given(tmp_path: Path) -> None:
    host = FakeHost({"ok": True})
    box = box_of(tmp_path, host=host)
    assert box.call("web_search", {"query": " dogs "}) == ""
    assert host.requests == [("web.search", {"query": " dogs "})]


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("web_fetch", {"url": " "}, "url must be a non-empty string"),
        ("web_fetch", {"url": 1}, "url must be a non-empty string"),
        ("web_search", {"query": ""}, "query must be a non-empty string"),
        ("web_search", {"query": None}, "query must be a non-empty string"),
    ],
)
def test_web_tools_refuse_empty_arguments(
    tmp_path: Path, tool: str, args: dict[str, object], message: str
) -> None:
    host = FakeHost()
    assert refusal(box_of(tmp_path, host=host), tool, args) == message
    assert host.requests == []


def test_web_tools_refusals_from_the_host_and_without_one(tmp_path: Path) -> None:
    assert refusal(box_of(tmp_path), "web_search", {"query": "q"}) == (
        "the web is reached through the orchestrator; no host here"
    )
    box = box_of(tmp_path, host=FakeHost(fail="web.fetch: blocked"))
    assert refusal(box, "web_fetch", {"url": "http://x"}) == "web.fetch: blocked"


def test_append_daily_reads_notes_holding_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    daily = tmp_path / "memory" / "daily"
    daily.mkdir(parents=True)
    (daily / "2026-03-13.md").write_bytes(b"- seen \xff yesterday\n")
    (daily / "2026-03-14.md").write_bytes(b"- seen \xff today\n")
    assert box.call("append_daily", {"content": "new fact"}) == (
        "PERSISTED: appended 1 lines to memory/daily/2026-03-14.md"
    )
    assert (daily / "2026-03-14.md").read_bytes() == b"- seen \xff today\n- new fact\n"


class RecordingLocks(FileLocks):
    """Locks that record the path each one was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[Path] = []

    def of(self, path: Path) -> Any:
        self.asked.append(path)
        return super().of(path)


def test_each_write_holds_the_lock_of_its_own_file(tmp_path: Path) -> None:
    locks = RecordingLocks()
    box = box_of(tmp_path, locks=locks)
    box.call("write_file", {"path": "files/a", "content": "x"})
    box.call("edit_file", {"path": "files/a", "old_text": "x", "new_text": "y"})
    box.call("append_file", {"path": "files/a", "content": "z"})
    box.mode = FLUSH
    box.call("append_daily", {"content": "a fact"})
    real = Path(os.path.realpath(tmp_path))
    assert locks.asked == [real / "files" / "a"] * 3 + [real / "memory" / "daily" / "2026-03-14.md"]


def test_a_source_is_asked_for_its_tools_with_the_toolbox(tmp_path: Path) -> None:
    asked: list[object] = []

    class Source:
        name = "s"

        def tools(self, box: Toolbox) -> tuple[FunctionTool, ...]:
            asked.append(box)
            return ()

    box = Toolbox(tmp_path, sources=[Source()])
    assert asked == [box]


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("edit_file", {"path": "skills/x.md", "old_text": "x", "new_text": "y"}),
        ("append_file", {"path": "skills/x.md", "content": "y"}),
    ],
)
def test_edits_and_appends_go_only_under_memory_and_files(
    tmp_path: Path, tool: str, args: dict[str, object]
) -> None:
    box = box_of(tmp_path)
    (tmp_path / "skills").mkdir()
    (tmp_path / "skills" / "x.md").write_text("x")
    assert refusal(box, tool, args) == (
        "skills/x.md: writes are allowed only under memory/ and files/"
    )
    assert (tmp_path / "skills" / "x.md").read_text() == "x"


def test_append_file_refuses_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "bin").write_bytes(b"\xff")
    assert refusal(box, "append_file", {"path": "files/bin", "content": "x"}) == (
        "files/bin: not a UTF-8 text file"
    )


def test_append_file_appends_text_already_there_unless_asked_to_skip(tmp_path: Path) -> None:
    box = box_of(tmp_path)
    (tmp_path / "files" / "a").write_text("same\n")
    box.call("append_file", {"path": "files/a", "content": "same"})
    assert (tmp_path / "files" / "a").read_text() == "same\nsame"


def test_append_daily_makes_the_memory_folders_it_needs(tmp_path: Path) -> None:
    box = Toolbox(tmp_path, mode=FLUSH, now=NOW)
    assert box.call("append_daily", {"content": "a fact"}) == (
        "PERSISTED: appended 1 lines to memory/daily/2026-03-14.md"
    )
    assert (tmp_path / "memory" / "daily" / "2026-03-14.md").is_file()


def test_append_daily_refuses_a_daily_folder_that_leads_out_of_memory(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    (tmp_path / "skills" / "daily").mkdir(parents=True)
    (tmp_path / "memory" / "daily").symlink_to(tmp_path / "skills" / "daily")
    note = tmp_path / "memory" / "daily" / "2026-03-14.md"
    assert refusal(box, "append_daily", {"content": "a fact"}) == (
        f"{note}: writes are allowed only under memory/ and files/"
    )
    assert list((tmp_path / "skills" / "daily").iterdir()) == []


@pytest.mark.parametrize("yesterday", ["missing", "symlink", "folder"])
def test_a_yesterday_that_cannot_be_read_holds_no_lines(tmp_path: Path, yesterday: str) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    daily = tmp_path / "memory" / "daily"
    daily.mkdir(parents=True)
    if yesterday == "symlink":
        (daily / "2026-03-13.md").symlink_to(tmp_path / "memory" / "gone.md")
    elif yesterday == "folder":
        (daily / "2026-03-13.md").mkdir()
    # a line of four X's: the text that would stand in for a note that holds nothing
    assert box.call("append_daily", {"content": "XXXX"}) == (
        "PERSISTED: appended 1 lines to memory/daily/2026-03-14.md"
    )


def test_grep_skips_a_file_it_cannot_read_and_searches_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = box_of(tmp_path)
    (tmp_path / "memory" / "a.md").write_text("dog\n")
    (tmp_path / "memory" / "b.md").write_text("dog\n")
    read_text = Path.read_text

    def unreadable_a(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.name == "a.md":
            raise PermissionError(13, "Permission denied")
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", unreadable_a)
    assert box.call("grep", {"pattern": "dog"}) == "memory/b.md:1: dog"


def test_append_daily_reads_a_note_with_crlf_line_ends_line_by_line(tmp_path: Path) -> None:
    box = box_of(tmp_path, mode=FLUSH)
    note = tmp_path / "memory" / "daily" / "2026-03-14.md"
    note.parent.mkdir(parents=True)
    note.write_bytes(b"- Rex\r\n")
    assert box.call("append_daily", {"content": "Rex"}).startswith("NOTHING APPENDED")
    assert note.read_bytes() == b"- Rex\r\n"
