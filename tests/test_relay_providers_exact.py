"""The provider adapters, exactly: the request bodies they build from a runner's request,
the answers they read from whole and streamed responses (text, tool calls, usage, stop
reasons, the server's own time), a stream cut at its deadline, and how each failure is
mapped (its message, status, and whether it is worth trying again). Deadlines run on
fake clocks; the adapters' own calls go to the fake servers of tests/fakeproviders."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.config.providers import ProviderDef
from orchestrator.relay.providers import adapter_for, anthropic, openai
from orchestrator.relay.providers.base import (
    STOP_CUT,
    STOP_END,
    STOP_LENGTH,
    STOP_TOOLS,
    Deadline,
    HostProvider,
    ModelAnswer,
    ModelCall,
    ProviderFailure,
)
from tests.fakeproviders import Cut, Error, FakeProvider, Malformed, QuietStream, Text, ToolUse

KEY = "sk-test-0123456789abcdefghij"
IMAGE = {"media_type": "image/png", "base64": "iVBORw0KGgo="}
TOOL = {
    "name": "write_file",
    "description": "Write a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}


class Steps:
    """A clock for a Deadline: each reading is the next value given (the last repeats)."""

    def __init__(self, *values: float) -> None:
        self.values = list(values)

    def __call__(self) -> float:
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


class Chunks:
    """A stream of chunks without a close(): the chunks given, then ``error`` if any."""

    def __init__(self, chunks: list[dict[str, Any]], error: Exception | None = None) -> None:
        self.chunks = chunks
        self.error = error
        self.read = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for chunk in self.chunks:
            self.read += 1
            yield chunk
        if self.error is not None:
            raise self.error


def answer(
    text: str | None,
    calls: list[dict[str, Any]],
    tokens: tuple[int, int],
    stop: str | None,
    server_ms: float | None = None,
    cache: tuple[int, int] = (0, 0),
) -> ModelAnswer:
    return ModelAnswer(text, calls, *tokens, stop, server_ms, *cache)


def failure(exc: pytest.ExceptionInfo[ProviderFailure]) -> tuple[object, ...]:
    f = exc.value
    return (f.message, f.status, f.retry_after, f.retryable, f.overflow)


# ---------------------------------------------------------------- OpenAI: requests


def test_openai_body_for_every_kind_of_message() -> None:
    call = ModelCall(
        "sys ✓",
        [
            {"role": "user", "content": "hi", "sender": "alice"},
            {"role": "user", "content": None},
            {"role": "user", "content": "see", "image_data": [IMAGE]},
            {"role": "user", "content": None, "image_data": [IMAGE]},
            {"role": "assistant", "content": None},
            {"role": "assistant", "content": "ok", "tool_calls": []},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "t1", "name": "a", "arguments": {"x": "é"}},
                    {"id": "t2", "name": "b"},
                    {"id": "t3", "name": "c", "arguments": None},
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": None},
            {"role": "tool", "tool_call_id": "t2", "content": 5, "image_data": [IMAGE]},
            {"role": "system", "content": "dropped"},
            {"content": "no role"},
        ],
    )
    url = "data:image/png;base64,iVBORw0KGgo="
    image = {"type": "image_url", "image_url": {"url": url}}
    assert openai.to_openai(call) == {
        "messages": [
            {"role": "system", "content": "sys ✓"},
            {"role": "user", "content": "hi"},
            {"role": "user", "content": ""},
            {"role": "user", "content": [{"type": "text", "text": "see"}, image]},
            {"role": "user", "content": [{"type": "text", "text": ""}, image]},
            {"role": "assistant", "content": ""},
            {"role": "assistant", "content": "ok"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "a", "arguments": '{"x": "é"}'},
                    },
                    {"id": "t2", "type": "function", "function": {"name": "b", "arguments": "{}"}},
                    {"id": "t3", "type": "function", "function": {"name": "c", "arguments": "{}"}},
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": ""},
            {"role": "tool", "tool_call_id": "t2", "content": "5"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "(the images of the tool result above)"},
                    image,
                ],
            },
        ]
    }
    assert "tool_calls" not in openai.to_openai(call)["messages"][6]


def test_openai_tools_and_none() -> None:
    assert openai.to_openai(ModelCall("s", [], [TOOL])) == {
        "messages": [{"role": "system", "content": "s"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "write_file",
                    "description": "Write a file.",
                    "parameters": TOOL["parameters"],
                },
            }
        ],
    }
    assert openai.to_openai(ModelCall("s", [])) == {
        "messages": [{"role": "system", "content": "s"}]
    }
    # a tool result without a tool_call_id sends null
    assert openai.to_openai(ModelCall("s", [{"role": "tool", "content": "r"}]))["messages"][1] == {
        "role": "tool",
        "tool_call_id": None,
        "content": "r",
    }


def test_openai_request_body_streamed_or_whole() -> None:
    call = ModelCall("s", [{"role": "user", "content": "q"}])
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    whole = openai.request_body(call, model="m", max_tokens=9, stream=False)
    assert whole == {"model": "m", "max_tokens": 9, "messages": messages}
    assert list(whole) == ["model", "max_tokens", "messages"]
    streamed = openai.request_body(call, model="m", max_tokens=9, stream=True)
    assert streamed == {
        "model": "m",
        "max_tokens": 9,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


# ---------------------------------------------------------------- OpenAI: answers


def delta(content: Any = None, finish: str | None = None, **more: Any) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if content is not None:
        d["content"] = content
    d.update(more)
    return {"choices": [{"delta": d, "finish_reason": finish}]}


def usage(prompt: int, completion: int, **more: Any) -> dict[str, Any]:
    return {
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, **more},
    }


def test_openai_stream_text_pieces_usage_and_the_stop() -> None:
    shown: list[str] = []
    chunks = [delta("Hel"), delta(""), delta(7), delta("lo", "stop"), usage(10, 3)]
    got = openai.read_stream(Chunks(chunks), on_text=shown.append)
    assert got == answer("Hel7lo", [], (10, 3), STOP_END)
    assert shown == ["Hel", "7", "lo"]
    assert openai.read_stream(Chunks(chunks)) == got  # no sink: the same answer


def test_openai_stream_usage_cached_tokens_and_odd_counts() -> None:
    def read(*more: dict[str, Any]) -> ModelAnswer:
        return openai.read_stream(Chunks([delta("x", "stop"), *more]))

    cached = {"prompt_tokens_details": {"cached_tokens": 4}}
    assert read(usage(10, 3, **cached)) == answer("x", [], (6, 3), STOP_END, cache=(4, 0))
    assert read(usage(3, 3, **cached)) == answer("x", [], (0, 3), STOP_END, cache=(4, 0))
    nulls = {"prompt_tokens_details": {"cached_tokens": None}}
    assert read(usage(10, 3, **nulls)) == answer("x", [], (10, 3), STOP_END)
    assert read(usage(10, 3, prompt_tokens_details=None)) == answer("x", [], (10, 3), STOP_END)
    assert read(usage(10, 3, prompt_tokens_details=[4])) == answer("x", [], (10, 3), STOP_END)
    odd = {"choices": [], "usage": {"prompt_tokens": None, "completion_tokens": None}}
    assert read(odd) == answer("x", [], (0, 0), STOP_END)
    # a later chunk without usage (or with an empty one) keeps the one reported
    assert read(usage(10, 3), {"choices": [], "usage": {}}, {"choices": []}) == answer(
        "x", [], (10, 3), STOP_END
    )
    assert read(usage(10, 3), usage(20, 5)) == answer("x", [], (20, 5), STOP_END)


def test_openai_stream_without_usage_is_estimated() -> None:
    call = ModelCall("é" * 10, [{"role": "user", "content": "ü" * 7}])
    sent = len(json.dumps(openai.to_openai(call), ensure_ascii=False))
    assert sent == 99 and -(-sent // 4) == 25
    args = '{"a": 1}'  # 8 characters
    chunks = [
        delta("hello"),
        delta(tool_calls=[{"index": 0, "id": "c", "function": {"name": "f", "arguments": args}}]),
        delta(finish="tool_calls"),
    ]
    got = openai.read_stream(Chunks(chunks), call)
    calls = [{"id": "c", "name": "f", "arguments": {"a": 1}}]
    assert got == answer("hello", calls, (25, 4), STOP_TOOLS)  # (5 + 8) / 4, up
    assert openai.read_stream(Chunks([delta("hello", "stop")])) == answer(
        "hello", [], (0, 2), STOP_END
    )
    assert openai.read_stream(Chunks([delta("hell", "stop")])) == answer(
        "hell", [], (0, 1), STOP_END
    )
    assert openai.read_stream(Chunks([delta(finish="stop")])) == answer(None, [], (0, 0), STOP_END)


def test_openai_stream_tool_calls_merged_by_index() -> None:
    chunks = [
        delta(tool_calls=[{"index": 1, "id": "b1", "function": {"name": "second"}}]),
        delta(tool_calls=[{"id": "a1", "function": {"name": "first", "arguments": '{"p"'}}]),
        delta(tool_calls=[{"index": 0, "id": "z", "function": {"name": "x", "arguments": ": 1}"}}]),
        delta(tool_calls=[{"index": 1, "function": {"name": "other", "arguments": "[1]"}}]),
        delta(tool_calls=[{"index": None, "function": None}]),
        delta(tool_calls=[{"index": 2, "function": {"arguments": "  "}}]),
        delta(tool_calls=[{"index": 3, "id": 7, "function": {"name": "bad", "arguments": "{"}}]),
        delta(tool_calls=None),
        delta(finish="stop"),
    ]  # fmt: skip
    got = openai.read_stream(Chunks(chunks))
    assert got == answer(
        None,
        [
            {"id": "a1", "name": "first", "arguments": {"p": 1}},
            {"id": "b1", "name": "second", "arguments": {"_unparsed_arguments": "[1]"}},
            {"id": "call_2", "name": "", "arguments": {}},
            {"id": "7", "name": "bad", "arguments": {"_unparsed_arguments": "{"}},
        ],
        (0, 4),  # no usage: the arguments' 8 + 3 + 2 + 1 characters / 4, up
        STOP_TOOLS,  # "stop" with tool calls
    )


def test_openai_stop_reasons_and_the_last_one_given() -> None:
    call = [delta(tool_calls=[{"index": 0, "id": "c", "function": {"name": "f"}}])]
    tool = [{"id": "c", "name": "f", "arguments": {}}]
    assert openai.read_stream(Chunks([*call, delta(finish="length")])).stop_reason == STOP_LENGTH
    assert openai.read_stream(Chunks([*call, delta(finish="odd")])).stop_reason == "odd"
    got = openai.read_stream(Chunks([delta("a", "length"), delta("b"), usage(1, 1)]))
    assert got == answer("ab", [], (1, 1), STOP_LENGTH)
    got = openai.read_stream(Chunks([*call, delta(finish="tool_calls"), usage(1, 1)]))
    assert got == answer(None, tool, (1, 1), STOP_TOOLS)
    got = openai.read_stream(Chunks([{"choices": [{}]}, delta("z", "stop"), {}]))
    assert got == answer("z", [], (0, 1), STOP_END)


def test_openai_stream_timings_are_the_servers_time() -> None:
    def ms(*timings: object) -> float | None:
        chunks = [delta("x", "stop"), *({"choices": [], "timings": t} for t in timings)]
        return openai.read_stream(Chunks(chunks)).server_ms

    assert ms({"prompt_ms": 1.5, "predicted_ms": 2.25}) == 3.75
    assert ms({"prompt_ms": None, "predicted_ms": 2}) == 2.0
    assert ms({"prompt_ms": 1, "predicted_ms": None}) == 1.0
    assert ms({"prompt_ms": 1}, "not a dict") == 1.0
    assert ms({"prompt_ms": 1}, {"predicted_ms": 4}) == 4.0
    assert ms({"prompt_ms": "x"}) is None
    assert ms({"prompt_ms": [1]}) is None
    assert ms({}) is None
    assert ms() is None


def test_openai_stream_that_is_empty_or_ends_early_fails_retryably() -> None:
    with pytest.raises(ProviderFailure) as caught:
        openai.read_stream(Chunks([]))
    assert failure(caught) == (
        "the answer was malformed: no chunks in the stream",
        None,
        None,
        True,
        False,
    )
    with pytest.raises(ProviderFailure) as caught:
        openai.read_stream(Chunks([delta("half")]))
    assert failure(caught) == ("the stream ended before the answer did", None, None, True, False)
    with pytest.raises(ProviderFailure) as caught:  # a deadline not near changes nothing
        openai.read_stream(Chunks([delta("half")]), deadline=Deadline(100, Steps(0)))
    assert failure(caught) == ("the stream ended before the answer did", None, None, True, False)


def test_openai_stream_cut_at_its_deadline() -> None:
    call = ModelCall("s", [{"role": "user", "content": "q"}])
    estimate = -(-len(json.dumps(openai.to_openai(call), ensure_ascii=False)) // 4)
    chunks = Chunks([
        {**delta("abcde"), "timings": {"prompt_ms": 1, "predicted_ms": 2}},
        delta(tool_calls=[{"index": 0, "id": "c", "function": {"name": "f"}}]),
        delta("more", "stop"),
    ])  # fmt: skip
    shown: list[str] = []
    # the clock: the deadline is an hour away at the start, reached after the second chunk
    deadline = Deadline(3600, Steps(0, 3600))
    got = openai.read_stream(chunks, call, deadline=deadline, on_text=shown.append)
    assert got == answer("abcde", [], (estimate, 2), STOP_CUT, 3.0)
    assert chunks.read == 2 and shown == ["abcde"]
    # the text so far is its pieces joined
    two = Chunks([delta("ab"), delta("cd"), delta("e", "stop")])
    got = openai.read_stream(two, deadline=Deadline(3600, Steps(0, 3600)))
    assert got == answer("abcd", [], (0, 1), STOP_CUT)
    # a deadline passed once the answer has finished does not cut it
    deadline = Deadline(10, Steps(11))
    got = openai.read_stream(Chunks([delta("a", "stop"), usage(1, 1)]), deadline=deadline)
    assert got == answer("a", [], (1, 1), STOP_END)
    # cut before any text: no text, no tokens
    got = openai.read_stream(Chunks([delta(tool_calls=[])]), deadline=Deadline(1, Steps(1)))
    assert got == answer(None, [], (0, 0), STOP_CUT)


def test_openai_stream_whose_read_fails_near_its_deadline_is_cut() -> None:
    error = OSError("closed")
    near = Deadline(10, Steps(0, 9.9))  # 0.1 s left when the read fails
    got = openai.read_stream(Chunks([delta("abc")], error), deadline=near)
    assert got == answer("abc", [], (0, 1), STOP_CUT)
    # the same failure with time left is the stream's failure
    with pytest.raises(OSError):
        openai.read_stream(Chunks([delta("abc")], error), deadline=Deadline(10, Steps(0)))
    # and after the answer's finish, an answer that ended early is not "cut"
    got = openai.read_stream(Chunks([delta("abc", "stop")], error), deadline=near)
    assert got == answer("abc", [], (0, 1), STOP_END)


def test_openai_stream_is_closed_at_its_deadline() -> None:
    """The stream's own close() is what ends a read waiting at the deadline."""
    quiet = QuietStream([delta("so far")])
    # due at once, not passed between chunks, and 0.1 s left when the read fails
    got = openai.read_stream(quiet, deadline=Deadline(10, Steps(10, 0, 9.9)))
    assert quiet.closed.is_set() and got == answer("so far", [], (0, 2), STOP_CUT)


def test_openai_whole_completion() -> None:
    completion = {
        "choices": [
            {
                "message": {
                    "content": "hi",
                    "tool_calls": [
                        {"id": "a", "function": {"name": "f", "arguments": '{"k": 2}'}},
                        {"id": None, "function": None},
                    ],
                },
                "finish_reason": None,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        "timings": {"prompt_ms": 1, "predicted_ms": 1},
    }
    assert openai.read_completion(completion) == answer(
        "hi",
        [
            {"id": "a", "name": "f", "arguments": {"k": 2}},
            {"id": "call_1", "name": "", "arguments": {}},
        ],
        (5, 2),
        STOP_TOOLS,  # no finish reason is "stop", with tool calls
        2.0,
    )
    plain = {"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]}
    call = ModelCall("s", [])
    estimate = -(-len(json.dumps(openai.to_openai(call), ensure_ascii=False)) // 4)
    assert openai.read_completion(plain, call) == answer("x", [], (estimate, 1), STOP_LENGTH)
    assert openai.read_completion({"choices": [{"message": None}]}) == answer(
        None, [], (0, 0), STOP_END
    )
    with pytest.raises(ProviderFailure, match="ended before"):
        openai.read_completion({"choices": None})


# ---------------------------------------------------------------- OpenAI: the SDK's stream


class Network:
    def __init__(self, sock: object) -> None:
        self.sock = sock

    def get_extra_info(self, name: str) -> object:
        return self.sock if name == "socket" else None


def test_the_rest_of_a_stream_is_read_only_where_its_wait_is_bounded() -> None:
    from orchestrator.relay.providers.base import CLOSER

    left, right = socket.socketpair()
    try:
        events = iter([1, 2, 3])
        before = set(CLOSER._closes)
        openai._drain(events, SimpleNamespace(extensions={"network_stream": Network(left)}))
        assert list(events) == []
        assert set(CLOSER._closes) - before == set()  # its timer is cancelled once read
        for extensions in ({}, {"network_stream": Network("not a socket")}):
            events = iter([1, 2, 3])
            openai._drain(events, SimpleNamespace(extensions=extensions))
            assert list(events) == [1, 2, 3]

        def failing() -> Iterator[int]:
            yield 1
            raise OSError("gone")

        openai._drain(failing(), SimpleNamespace(extensions={"network_stream": Network(left)}))

        due: list[float] = []

        def looking() -> Iterator[int]:  # the drain's timer, as set before the first read
            due.append(max(CLOSER._due, key=lambda entry: entry[1])[0])
            yield 1

        now = time.monotonic()
        openai._drain(looking(), SimpleNamespace(extensions={"network_stream": Network(left)}))
        assert due[0] >= now + openai.DRAIN_SECONDS  # from the drain's start, not before it

        def waiting() -> Iterator[int]:  # reads until the socket is shut
            while left.recv(1):
                yield 1

        openai._drain(waiting(), SimpleNamespace(extensions={"network_stream": Network(left)}))
        assert left.recv(1) == b""  # shut
    finally:
        left.close()
        right.close()
    assert openai.DRAIN_SECONDS == 0.5


def test_the_openai_detail_of_an_error() -> None:
    detail = openai._detail
    assert detail(SimpleNamespace(body={"error": {"message": "m1"}}, message="x")) == "m1"
    assert detail(SimpleNamespace(body={"message": "m2"}, message="x")) == "m2"
    assert detail(SimpleNamespace(body={"error": {"message": ""}}, message="x")) == "x"
    assert detail(SimpleNamespace(body={"error": "text"}, message="x")) == "x"
    assert detail(SimpleNamespace(body={"error": {"message": 3}}, message="x")) == "3"
    assert detail(SimpleNamespace(body="text", message="x")) == "x"
    assert detail(ValueError("plain")) == "plain"


def test_the_anthropic_detail_of_an_error() -> None:
    detail = anthropic._detail
    assert detail(SimpleNamespace(body={"error": {"message": "m1"}}, message="x")) == "m1"
    assert detail(SimpleNamespace(body={"message": "m2"}, message="x")) == "x"
    assert detail(SimpleNamespace(body={"error": {"message": ""}}, message="x")) == "x"
    assert detail(SimpleNamespace(body={"error": "text"}, message="x")) == "x"
    assert detail(SimpleNamespace(body={"error": {"message": 3}}, message="x")) == "3"
    assert detail(SimpleNamespace(body=None, message="x")) == "x"
    assert detail(ValueError("plain")) == "plain"


# ---------------------------------------------------------------- Anthropic: requests


def test_anthropic_body_for_every_kind_of_message() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    call = ModelCall(
        "sys",
        [
            {"role": "assistant", "content": "first"},
            {"role": "user", "content": "hi", "sender": "alice"},
            {"role": "user", "content": None, "image_data": [IMAGE]},
            {"role": "assistant", "content": None},
            {"role": "assistant", "content": "", "tool_calls": []},
            {
                "role": "assistant",
                "content": "calling",
                "tool_calls": [
                    {"id": "t1", "name": "a", "arguments": {"x": 1}},
                    {"id": "t2", "name": "b", "arguments": None},
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": None},
            {"role": "tool", "tool_call_id": "t2", "content": "seen", "image_data": [IMAGE]},
            {"role": "tool", "content": None, "image_data": [IMAGE]},
            {"role": "system", "content": "dropped"},
        ],
        [TOOL],
    )
    assert anthropic.to_anthropic(call) == {
        "system": "sys",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "(start)"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "first"}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "text", "text": ""},
                    image,
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "(no reply)"},
                    {"type": "text", "text": "(no reply)"},
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "t1", "name": "a", "input": {"x": 1}},
                    {"type": "tool_use", "id": "t2", "name": "b", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": ""},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "content": [{"type": "text", "text": "seen"}, image],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": None,
                        "content": [{"type": "text", "text": "(image)"}, image],
                    },
                ],
            },
        ],
        "tools": [
            {
                "name": "write_file",
                "description": "Write a file.",
                "input_schema": TOOL["parameters"],
            }
        ],
    }


def test_anthropic_body_without_messages_or_tools() -> None:
    assert anthropic.to_anthropic(ModelCall("s", [])) == {"system": "s", "messages": []}
    user = ModelCall("s", [{"role": "user", "content": 5}])
    assert anthropic.to_anthropic(user) == {
        "system": "s",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "5"}]}],
    }


# ---------------------------------------------------------------- Anthropic: answers


def start(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "message_start", "message": {"usage": usage or {}}}


def block(index: int | None, **content: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": "content_block_start", "content_block": content}
    if index is not None:
        event["index"] = index
    return event


def text(index: int | None, piece: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "content_block_delta",
        "delta": {"type": "text_delta", "text": piece},
    }
    if index is not None:
        event["index"] = index
    return event


def json_piece(index: int, piece: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": piece},
    }


def end(stop: str | None = "end_turn", usage: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    return [
        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": usage or {}},
        {"type": "message_stop"},
    ]


def test_anthropic_stream_text_usage_and_cache() -> None:
    shown: list[str] = []
    events = [
        start({"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 3,
               "cache_creation_input_tokens": 4}),
        block(0, type="text", text=""),
        text(0, "Hel"),
        text(0, ""),
        text(0, 7),
        text(0, "lo"),
        {"type": "ping"},
        {"type": "content_block_stop", "index": 0},
        *end("end_turn", {"output_tokens": 6}),
    ]  # fmt: skip
    got = anthropic.read_stream(Chunks(events), on_text=shown.append)
    assert got == answer("Hel7lo", [], (10, 6), STOP_END, cache=(3, 4))
    assert shown == ["Hel", "7", "lo"]
    assert anthropic.read_stream(Chunks(events)) == got


def test_anthropic_message_delta_counts_replace_those_it_repeats() -> None:
    def read(first: dict[str, Any], last: dict[str, Any]) -> ModelAnswer:
        return anthropic.read_stream(Chunks([start(first), *end("max_tokens", last)]))

    first = {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 3,
             "cache_creation_input_tokens": 4}  # fmt: skip
    assert read(first, {}) == answer(None, [], (10, 1), STOP_LENGTH, cache=(3, 4))
    last = {"input_tokens": 20, "output_tokens": 9, "cache_read_input_tokens": 5,
            "cache_creation_input_tokens": 6}  # fmt: skip
    assert read(first, last) == answer(None, [], (20, 9), STOP_LENGTH, cache=(5, 6))
    nulls = dict.fromkeys(last)
    assert read(first, nulls) == answer(None, [], (10, 1), STOP_LENGTH, cache=(3, 4))
    assert read({k: None for k in first}, {}) == answer(None, [], (0, 0), STOP_LENGTH)
    got = anthropic.read_stream(
        Chunks([{"type": "message_start", "message": None}, {"type": "message_delta"},
                {"type": "message_stop"}])
    )  # fmt: skip
    assert got == answer(None, [], (0, 0), None)
    # a stop reason stays when a later delta has none
    got = anthropic.read_stream(Chunks([start(), *end("tool_use")[:1], *end(None)]))
    assert got.stop_reason == STOP_TOOLS


def test_anthropic_stream_tool_calls_and_blocks_by_index() -> None:
    events = [
        start(),
        block(None, type="text", text="A"),  # index: the blocks so far (0)
        block(2, type="tool_use", id="t1", name="f", input={}),
        json_piece(2, '{"a": '),
        json_piece(2, "1}"),
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta"}},
        block(None, type="tool_use", id="t2", name="g", input={"k": "v"}),  # index 2: replaces
        block(4, type="tool_use", id=None, name="h"),
        json_piece(4, "[1]"),
        block(5, type="tool_use", id="t5", name="i"),
        json_piece(5, "{bad"),
        block(6, type="tool_use", id="t6", name="j", input={"z": 1}),
        json_piece(6, "  "),
        block(7, type="other"),
        text(None, "B"),  # no index: block 0
        text(8, "C"),  # a block that never started is text
        {"type": "content_block_delta", "index": 8, "delta": {"type": "text_delta"}},
        {"type": "content_block_delta", "index": 8, "delta": {"type": "odd", "text": "X"}},
        {"type": "content_block_delta", "index": 9, "delta": None},
        *end("tool_use"),
    ]
    got = anthropic.read_stream(Chunks(events))
    assert got == answer(
        "ABC",
        [
            {"id": "t2", "name": "g", "arguments": {"k": "v"}},
            {"id": "None", "name": "h", "arguments": {"_unparsed_arguments": "[1]"}},
            {"id": "t5", "name": "i", "arguments": {"_unparsed_arguments": "{bad"}},
            {"id": "t6", "name": "j", "arguments": {"z": 1}},
        ],
        (0, 0),
        STOP_TOOLS,
    )


def test_anthropic_tool_arguments_from_json_pieces() -> None:
    events = [
        start(),
        block(0, type="tool_use", id="t1", name="f", input={"ignored": 1}),
        json_piece(0, '{"a"'),
        json_piece(0, ": 1}"),
        block(1, type="text"),
        *end("tool_use"),
    ]
    got = anthropic.read_stream(Chunks(events))
    assert got == answer(
        None, [{"id": "t1", "name": "f", "arguments": {"a": 1}}], (0, 0), STOP_TOOLS
    )


def test_anthropic_stream_errors() -> None:
    with pytest.raises(ProviderFailure) as caught:
        anthropic.read_stream(Chunks([]))
    assert failure(caught) == (
        "the answer was malformed: no events in the stream",
        None,
        None,
        True,
        False,
    )
    with pytest.raises(ProviderFailure) as caught:
        anthropic.read_stream(Chunks([start(), *end()[:1]]))
    assert failure(caught) == ("the stream ended before the message did", None, None, True, False)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(ProviderFailure) as caught:
        anthropic.read_stream(Chunks([start(), error, *end()]))
    assert failure(caught) == ("the stream reported an error: Overloaded", None, None, True, False)
    with pytest.raises(ProviderFailure) as caught:
        anthropic.read_stream(Chunks([{"type": "error", "error": {"type": "x"}}]))
    assert caught.value.message == "the stream reported an error: {'type': 'x'}"
    with pytest.raises(ProviderFailure) as caught:
        anthropic.read_stream(Chunks([{"type": "error"}]))
    assert caught.value.message == "the stream reported an error: {}"


def test_anthropic_stream_cut_at_its_deadline() -> None:
    events = Chunks([
        start({"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 2,
               "cache_creation_input_tokens": 3}),
        block(1, type="text", text="B"),
        block(0, type="text", text="A"),
        block(2, type="tool_use", id="t", name="f"),
        block(3, type="text"),
        text(0, "a"),
        *end(),
    ])  # fmt: skip
    deadline = Deadline(3600, Steps(0, 0, 0, 0, 0, 3600))
    got = anthropic.read_stream(events, deadline=deadline)
    assert got == answer("AaB", [], (5, 1), STOP_CUT, cache=(2, 3))
    assert events.read == 6
    # not cut once the message has stopped
    got = anthropic.read_stream(Chunks([start(), *end()]), deadline=Deadline(10, Steps(0, 0, 11)))
    assert got == answer(None, [], (0, 0), STOP_END)
    got = anthropic.read_stream(Chunks([start(), *end()]), deadline=Deadline(10, Steps(0, 11)))
    assert got == answer(None, [], (0, 0), STOP_CUT)


def test_anthropic_stream_whose_read_fails_near_its_deadline_is_cut() -> None:
    events = [start({"input_tokens": 4}), block(0, type="text", text="so far")]
    near = Deadline(10, Steps(0, 0, 9.9))
    got = anthropic.read_stream(Chunks(events, OSError("closed")), deadline=near)
    assert got == answer("so far", [], (4, 0), STOP_CUT)
    with pytest.raises(OSError):
        anthropic.read_stream(Chunks(events, OSError("closed")), deadline=Deadline(10, Steps(0)))
    near = Deadline(10, Steps(0, 0, 0, 9.9))
    got = anthropic.read_stream(Chunks([*events, *end()], OSError("closed")), deadline=near)
    assert got == answer("so far", [], (4, 0), STOP_END)


def test_anthropic_stream_is_closed_at_its_deadline() -> None:
    quiet = QuietStream([start({"input_tokens": 4}), block(0, type="text", text="so far")])
    got = anthropic.read_stream(quiet, deadline=Deadline(10, Steps(10, 0, 0, 9.9)))
    assert quiet.closed.is_set() and got == answer("so far", [], (4, 0), STOP_CUT)


def test_anthropic_whole_message() -> None:
    message = {
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"é": 1}},
            {"type": "tool_use", "id": "t2", "name": "g", "input": None},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 1},
    }
    assert anthropic.read_message(message) == answer(
        "hi",
        [
            {"id": "t1", "name": "f", "arguments": {"é": 1}},
            {"id": "t2", "name": "g", "arguments": {}},
        ],
        (3, 2),
        STOP_TOOLS,
        cache=(1, 0),
    )
    assert message["content"][1] == {"type": "tool_use", "id": "t1", "name": "f", "input": {"é": 1}}
    assert anthropic.read_message({"content": None}) == answer(None, [], (0, 0), None)
    # a tool call's input goes through its JSON as a streamed one's would: not an object,
    # it is kept as text
    odd = {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": [1]}]}
    assert anthropic.read_message(odd).tool_calls == [
        {"id": "t", "name": "f", "arguments": {"_unparsed_arguments": "[1]"}}
    ]


# ---------------------------------------------------------------- the adapters on the wire


@pytest.fixture(params=["anthropic", "openai"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(kind: str) -> Iterator[FakeProvider]:
    fake = FakeProvider(kind, KEY)
    yield fake
    fake.close()


@pytest.fixture
def providers() -> Iterator[list[HostProvider]]:
    made: list[HostProvider] = []
    yield made
    for provider in made:
        provider.close()


def make(
    server: FakeProvider, made: list[HostProvider], *, stream: bool = True, key: str | None = KEY
) -> HostProvider:
    definition = ProviderDef(
        "p", server.kind, base_url=server.base_url, key_env="K", max_tokens=100, stream=stream
    )
    made.append(adapter_for(definition, key))
    return made[-1]


CALL = ModelCall("sys", [{"role": "user", "content": "q"}], [TOOL], max_tokens=50)


def test_the_clients_have_no_retries_of_their_own_and_a_placeholder_key(
    server: FakeProvider, providers: list[HostProvider]
) -> None:
    provider = make(server, providers, key=None)
    client: Any = provider.client  # type: ignore[attr-defined]
    assert (client.api_key, client.max_retries) == ("none", 0)
    assert str(client.base_url).rstrip("/") == server.base_url
    client = make(server, providers).client  # type: ignore[attr-defined]
    assert client.api_key == KEY


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_the_exact_body_sent(
    server: FakeProvider, providers: list[HostProvider], stream: bool
) -> None:
    server.script.append(Text("Hello there", input_tokens=8, output_tokens=3, cache_read_tokens=2))
    shown: list[str] = []
    got = make(server, providers, stream=stream).complete(
        CALL, model="m-1", timeout=30, on_text=shown.append
    )
    body = server.seen[-1].body
    if server.kind == "openai":
        assert body == openai.request_body(CALL, model="m-1", max_tokens=50, stream=stream)
        assert got == answer("Hello there", [], (8, 3), STOP_END, cache=(2, 0))
    else:
        expected = {"model": "m-1", "max_tokens": 50, **anthropic.to_anthropic(CALL)}
        assert body == ({**expected, "stream": True} if stream else expected)
        assert got == answer("Hello there", [], (8, 3), STOP_END, cache=(2, 0))
    assert shown == (["Hello", " there"] if stream else [])


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_tool_call_on_the_wire(
    server: FakeProvider, providers: list[HostProvider], stream: bool
) -> None:
    server.script.append(ToolUse("write_file", {"path": "a ✓"}, text="ok", pieces=4))
    got = make(server, providers, stream=stream).complete(CALL, model="m", timeout=30)
    calls = [{"id": "call_1", "name": "write_file", "arguments": {"path": "a ✓"}}]
    assert got == answer("ok", calls, (13, 9), STOP_TOOLS)


def test_a_streamed_call_is_cut_at_its_deadline(
    server: FakeProvider, providers: list[HostProvider]
) -> None:
    """The deadline reaches the reading of the stream: an hour away at the start, it is
    reached after the first chunk, and the answer is cut there."""
    server.script.append(Text("abcdefgh"))
    # the readings before the first text's: the start's, and Anthropic's two events
    reads = 1 if server.kind == "openai" else 3
    deadline = Deadline(3600, Steps(*[0.0] * reads, 3600.0))
    got = make(server, providers).complete(CALL, model="m", timeout=30, deadline=deadline)
    assert (got.text, got.tool_calls, got.stop_reason) == ("abcd", [], STOP_CUT)


@pytest.mark.parametrize(
    ("step", "status", "retryable", "detail"),
    [
        (Error(429, "slow down", retry_after="3"), 429, True, "slow down"),
        (Error(400, "bad request"), 400, False, "bad request"),
        (Error(500, "boom"), 500, True, "boom"),
    ],
)
def test_error_answers_on_the_wire(
    server: FakeProvider,
    providers: list[HostProvider],
    step: Error,
    status: int,
    retryable: bool,
    detail: str,
) -> None:
    server.script.append(step)
    for stream in (True, False):
        server.script.append(step)
        with pytest.raises(ProviderFailure) as caught:
            make(server, providers, stream=stream).complete(CALL, model="m", timeout=30)
        assert failure(caught) == (
            f"provider 'p' answered HTTP {status}: {detail}",
            status,
            3.0 if step.retry_after else None,
            retryable,
            False,
        )
        assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_a_malformed_or_cut_answer_on_the_wire(
    server: FakeProvider, providers: list[HostProvider]
) -> None:
    server.script.extend([Malformed(), Cut()])
    with pytest.raises(ProviderFailure) as caught:
        make(server, providers, stream=False).complete(CALL, model="m", timeout=30)
    assert caught.value.retryable and "provider 'p' sent a malformed answer" in caught.value.message
    assert caught.value.__suppress_context__
    with pytest.raises(ProviderFailure) as caught:
        make(server, providers).complete(CALL, model="m", timeout=30)
    ending = "answer did" if server.kind == "openai" else "message did"
    assert failure(caught) == (f"the stream ended before the {ending}", None, None, True, False)
    assert caught.value.__cause__ is None


# ---------------------------------------------------------------- the adapters' HTTP, in process


def mocked(kind: str, answer_with: Any, *, stream: bool) -> tuple[HostProvider, list[Any]]:
    """An adapter whose client sends its requests to ``answer_with`` (a handler of its
    SDK's HTTP package), and the requests it sent."""
    httpx = http_of(kind)
    sent: list[Any] = []

    def handler(request: Any) -> Any:
        sent.append(request)
        return answer_with(request)

    url = "http://model.test" + ("/v1" if kind == "openai" else "")
    definition = ProviderDef("p", kind, base_url=url, key_env="K", max_tokens=100, stream=stream)
    provider: Any = adapter_for(definition, KEY)
    provider.client.close()
    provider.client = provider.client.with_options(
        http_client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    return provider, sent


def http_of(kind: str) -> Any:
    """The HTTP package the kind's SDK uses (Anthropic's has its own fork of httpx)."""
    import importlib

    return importlib.import_module("httpx" if kind == "openai" else "httpx2")


def sse(kind: str, *events: str) -> Any:
    httpx = http_of(kind)
    # Anthropic's events are named (the SDK reads those it knows), OpenAI's are not
    named = (f"event: {json.loads(e)['type']}\n" if kind == "anthropic" else "" for e in events)
    body = "".join(f"{n}data: {e}\n\n" for n, e in zip(named, events, strict=True)).encode()
    return lambda _: httpx.Response(
        200, headers={"content-type": "text/event-stream"}, content=body
    )


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_an_openai_answer_without_usage_is_estimated_from_the_call(stream: bool) -> None:
    httpx = http_of("openai")
    if stream:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        handler = sse(
            "openai",
            json.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": "hello"}}]}),
            json.dumps({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            "[DONE]",
        )
    else:
        whole = {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello"},
                    "finish_reason": "stop",
                }
            ],
        }
        handler = lambda _: httpx.Response(200, json=whole)  # noqa: E731
    call = ModelCall("s ✓", [{"role": "user", "content": "ü" * 7}])
    provider, sent = mocked("openai", handler, stream=stream)
    try:
        got = provider.complete(call, model="m", timeout=12.5)
    finally:
        provider.close()
    estimate = -(-len(json.dumps(openai.to_openai(call), ensure_ascii=False)) // 4)
    assert got == answer("hello", [], (estimate, 2), STOP_END)
    assert sent[0].extensions["timeout"]["read"] == 12.5
    assert json.loads(sent[0].content) == openai.request_body(
        call, model="m", max_tokens=100, stream=stream
    )


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_an_anthropic_call_has_its_own_timeout(stream: bool) -> None:
    httpx = http_of("anthropic")
    usage = {"input_tokens": 3, "output_tokens": 2}
    message = {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    if stream:
        handler = sse(
            "anthropic",
            json.dumps({"type": "message_start", "message": {**message, "content": []}}),
            json.dumps({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": "hi"}}),
            json.dumps({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                        "usage": {"output_tokens": 2}}),
            json.dumps({"type": "message_stop"}),
        )  # fmt: skip
    else:
        handler = lambda _: httpx.Response(200, json=message)  # noqa: E731
    call = ModelCall("s", [{"role": "user", "content": "q"}])
    provider, sent = mocked("anthropic", handler, stream=stream)
    try:
        got = provider.complete(call, model="m", timeout=12.5)
    finally:
        provider.close()
    assert got == answer("hi", [], (3, 2), STOP_END)
    assert sent[0].extensions["timeout"]["read"] == 12.5
    expected = {"model": "m", "max_tokens": 100, **anthropic.to_anthropic(call)}
    assert json.loads(sent[0].content) == ({**expected, "stream": True} if stream else expected)


def test_anthropic_events_out_of_the_usual_order() -> None:
    # no message_start: the counts are none
    assert anthropic.read_stream(Chunks(end())) == answer(None, [], (0, 0), STOP_END)
    got = anthropic.read_stream(Chunks([text(0, "a"), {"type": "message_stop"}]))
    assert got == answer("a", [], (0, 0), None)
    # a delta without an index is the first block's, whatever follows it
    events = [
        start(),
        block(0, type="text", text="A"),
        block(1, type="text", text="Z"),
        text(None, "B"),
        *end(),
    ]
    assert anthropic.read_stream(Chunks(events)).text == "ABZ"
    # JSON for a block that never started goes to a text block, and is not text
    assert anthropic.read_stream(Chunks([start(), json_piece(3, '{"a": 1}'), *end()])) == (
        answer(None, [], (0, 0), STOP_END)
    )
    # a JSON delta without its piece adds nothing
    events = [
        start(),
        block(0, type="tool_use", id="t", name="f"),
        json_piece(0, '{"a": 1'),
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta"}},
        json_piece(0, "}"),
        *end("tool_use"),
    ]
    assert anthropic.read_stream(Chunks(events)).tool_calls == [
        {"id": "t", "name": "f", "arguments": {"a": 1}}
    ]
