"""Fuzzing the readers of model providers' answers (orchestrator/relay/providers): the
Chat Completions chunks and the Messages API events a server streams (an
OpenAI-compatible server may be anyone's), and their whole forms. A reader returns a
ModelAnswer or raises; complete() turns whatever it raises into ProviderFailure ("a
malformed one, worth retrying": base.sdk_failure), so raising is allowed. What it
returns must be well formed: text or None, tool calls with a text id and name and
arguments that are a mapping, whole token counts, and an answer the relay can send to
the runner as a frame (orchestrator/wire.py).
"""

from __future__ import annotations

import json
import socket
from typing import Any, cast

from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator import wire
from orchestrator.relay.providers import anthropic, openai
from orchestrator.relay.providers.base import ModelAnswer, ModelCall
from tests.fuzzing import fuzz, json_values, mutated
from tests.test_fuzz_wire import Pipe

CALL = ModelCall(system="s", messages=[{"role": "user", "content": "hi"}])

OPENAI_STREAM = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
    {"choices": [{"index": 0, "delta": {"content": "lo 👋"}}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {"index": 0, "id": "call_1", "function": {"name": "shell", "arguments": ""}}
                    ]
                },
            }
        ]
    },
    {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"co'}}]}}]},
    {
        "choices": [
            {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'mmand": "ls"}'}}]}}
        ]
    },
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {
        "choices": [],
        "usage": {
            "prompt_tokens": 12,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
        "timings": {"prompt_ms": 1.5, "predicted_ms": 3.0},
    },
]
OPENAI_WHOLE = {
    "choices": [
        {
            "message": {
                "content": "Hello",
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}],
            },
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}
ANTHROPIC_STREAM = [
    {
        "type": "message_start",
        "message": {
            "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 3}
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi é"}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "tu_1", "name": "shell", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"command": '},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '"ls"}'},
    },
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]
ANTHROPIC_WHOLE = {
    "content": [
        {"type": "text", "text": "Hello"},
        {"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}},
    ],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 2},
}


def as_lines(items: list[Any]) -> list[bytes]:
    return [json.dumps(item).encode() for item in items]


@st.composite
def stream_of(draw: st.DrawFn, seed: list[Any]) -> list[Any]:
    """The seed's events as JSON lines (as SSE carries them), a few mutated, dropped,
    repeated or reordered, each parsed back (one that no longer parses is left out, as
    the SDK would fail on it before any reader)."""
    lines = as_lines(seed)
    return json_values(draw(st.lists(st.sampled_from(lines) | mutated(lines, 3), max_size=12)))


def well_formed(answer: ModelAnswer) -> None:
    assert answer.text is None or (isinstance(answer.text, str) and answer.text)
    for call in answer.tool_calls:
        assert isinstance(call["id"], str) and isinstance(call["name"], str)
        assert isinstance(call["arguments"], dict)
    counts = (
        answer.input_tokens,
        answer.output_tokens,
        answer.cache_read_tokens,
        answer.cache_write_tokens,
    )
    for count in counts:
        # a count below zero would lower the group's charge and let calls past its caps
        assert isinstance(count, int) and not isinstance(count, bool) and count >= 0
    assert answer.stop_reason is None or isinstance(answer.stop_reason, str)
    # the relay answers the runner's model.complete with it, as a frame
    wire.send_frame(
        cast(socket.socket, Pipe(b"", [])), {"ok": True, **answer.to_wire()}, limit=2**30
    )


def read(reader: Any, *args: Any) -> ModelAnswer | None:
    try:
        return cast(ModelAnswer, reader(*args))
    except Exception:  # complete() makes it a ProviderFailure (see the module's docstring)
        return None


@fuzz(300)
@given(chunks=stream_of(OPENAI_STREAM) | st.lists(st.from_type(object), max_size=2))
@example(chunks=OPENAI_STREAM)
@example(chunks=[{"choices": [{"delta": {"content": "\ud800"}, "finish_reason": "stop"}]}])
@example(chunks=[{"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "[1]"}}]},
                               "finish_reason": "stop"}]}])  # fmt: skip
def test_an_openai_stream_reads_to_a_well_formed_answer(chunks: list[Any]) -> None:
    answer = read(openai.read_stream, chunks, CALL)
    if answer is not None:
        well_formed(answer)


@fuzz(200)
@given(whole=mutated(as_lines([OPENAI_WHOLE]), 6))
@example(whole=json.dumps(OPENAI_WHOLE).encode())
def test_a_whole_openai_completion_reads_to_a_well_formed_answer(whole: bytes) -> None:
    for completion in json_values([whole]):
        answer = read(openai.read_completion, completion, CALL)
        if answer is not None:
            well_formed(answer)


@fuzz(300)
@given(events=stream_of(ANTHROPIC_STREAM))
@example(events=ANTHROPIC_STREAM)
@example(events=[{"type": "content_block_delta", "delta": {"type": "text_delta", "text": "\udc80"}},
                 {"type": "message_stop"}])  # fmt: skip
def test_an_anthropic_stream_reads_to_a_well_formed_answer(events: list[Any]) -> None:
    answer = read(anthropic.read_stream, events)
    if answer is not None:
        well_formed(answer)


@fuzz(200)
@given(whole=mutated(as_lines([ANTHROPIC_WHOLE]), 6))
@example(whole=json.dumps(ANTHROPIC_WHOLE).encode())
def test_a_whole_anthropic_message_reads_to_a_well_formed_answer(whole: bytes) -> None:
    for message in json_values([whole]):
        answer = read(anthropic.read_message, message)
        if answer is not None:
            well_formed(answer)


def test_counts_below_zero_from_a_provider_count_as_none() -> None:
    # a server reporting -1,000,000 tokens would have lowered the group's spend
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": -1_000_000}}},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "usage": {"output_tokens": -7, "cache_read_input_tokens": -3}},
        {"type": "message_stop"},
    ]
    answer = anthropic.read_stream(events)
    assert (answer.input_tokens, answer.output_tokens, answer.cache_read_tokens) == (0, 0, 0)
    whole = {**OPENAI_WHOLE, "usage": {"prompt_tokens": 10, "completion_tokens": -5}}
    answer = openai.read_completion(whole, CALL)
    assert (answer.input_tokens, answer.output_tokens) == (10, 0)
    assert ModelAnswer("x", [], -1, -2, cache_write_tokens=-3).prompt_tokens == 0
