"""What real model servers send, recorded from them (tests/data/llamacpp: llama.cpp's own
server from the xllamacpp wheel; tests/data/llama-cpp-python: llama-cpp-python's server;
both with SmolLM2-135M-Instruct), replayed through the adapters and the relay."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.config.providers import ModelInfo, ProviderDef
from orchestrator.relay.providers import adapter_for
from orchestrator.relay.providers.base import (
    STOP_CUT,
    STOP_END,
    STOP_TOOLS,
    Deadline,
    HostProvider,
    ModelCall,
    ProviderFailure,
    is_overflow,
)
from orchestrator.relay.providers.openai import read_stream, to_openai
from orchestrator.relay.streaming import Pieces
from orchestrator.relay.windows import CONFIGURED, DEFAULT, REPORTED, Windows
from tests.fakeproviders import FakeProvider, Recorded

DATA = Path(__file__).parent / "data"
TOOLS = [
    {
        "name": "write_file",
        "description": "Create or replace a file under memory/ or files/.",
        "parameters": {
            "type": "object",
            "required": ["path", "content"],
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        },
    }
]
ASK = ModelCall("You keep notes.", [{"role": "user", "content": "Remember Rex."}], TOOLS)


def sse_chunks(path: Path) -> list[dict[str, Any]]:
    """The JSON chunks of a recorded server-sent event stream."""
    chunks = []
    for event in path.read_text().split("\n\n"):
        data = event.strip().removeprefix("data: ")
        if data and data != "[DONE]":
            chunks.append(json.loads(data))
    return chunks


OPEN: list[HostProvider] = []


@pytest.fixture
def server() -> Iterator[FakeProvider]:
    fake = FakeProvider("openai")
    yield fake
    while OPEN:
        OPEN.pop().close()
    fake.close()


def openai_adapter(server: FakeProvider, **kw: Any) -> HostProvider:
    OPEN.append(adapter_for(ProviderDef("local", "openai", base_url=server.base_url, **kw), None))
    return OPEN[-1]


def test_a_tool_name_repeated_in_every_delta_is_taken_once() -> None:
    """llama-cpp-python repeats the whole name in every chunk of a streamed tool call
    (appending it made "write_filewrite_file..." and "unknown tool")."""
    chunks = sse_chunks(DATA / "llama-cpp-python" / "chat-tool.sse")
    names = [
        part["function"]["name"]
        for c in chunks
        for choice in c["choices"]
        for part in (choice["delta"].get("tool_calls") or [])
        if part.get("function", {}).get("name")
    ]
    assert len(names) > 3 and set(names) == {"write_file"}  # the recording repeats it
    answer = read_stream(chunks, ASK)
    assert [c["name"] for c in answer.tool_calls] == ["write_file"]
    assert isinstance(answer.tool_calls[0]["arguments"], dict)


def test_llama_cpps_own_tool_call_stream_and_its_whole_answer() -> None:
    streamed = read_stream(sse_chunks(DATA / "llamacpp" / "chat-tool.sse"), ASK)
    whole = json.loads((DATA / "llamacpp" / "chat-tool.json").read_text())
    from orchestrator.relay.providers.openai import read_completion

    for answer in (streamed, read_completion(whole, ASK)):
        assert answer.tool_calls and {c["name"] for c in answer.tool_calls} == {"write_file"}
        assert answer.stop_reason == STOP_TOOLS
        assert all(set(c["arguments"]) >= {"path"} for c in answer.tool_calls)
    assert whole["timings"]["predicted_ms"] > 0 and read_completion(whole, ASK).server_ms


def test_an_assistant_tool_call_goes_out_with_empty_string_content() -> None:
    """llama-cpp-python refuses ``"content": null`` with HTTP 500 (recorded), and takes
    the same request with ``""`` (recorded); the body sent is the one it takes."""
    refused = json.loads(
        (DATA / "llama-cpp-python" / "chat-tool-result-null-content.request.json").read_text()
    )
    taken = json.loads(
        (DATA / "llama-cpp-python" / "chat-tool-result-empty-content.request.json").read_text()
    )
    assert (refused["status"], taken["status"]) == (500, 200)
    assert (
        "Input should be a valid string"
        in (DATA / "llama-cpp-python" / "chat-tool-result-null-content.json").read_text()
    )
    call = ModelCall(
        "You keep notes.",
        [
            {"role": "user", "content": "Remember that my dog is called Rex."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "name": "write_file", "arguments": {"path": "memory/dog.md"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "PERSISTED: memory/dog.md"},
        ],
        TOOLS,
    )
    sent = to_openai(call)["messages"][2]
    assert sent["content"] == "" == taken["body"]["messages"][2]["content"]
    assert sent["tool_calls"][0]["function"]["name"] == "write_file"


@pytest.mark.parametrize(
    ("status", "body", "overflow"),
    [
        *(
            (400, json.loads((DATA / "llamacpp" / f"{name}.json").read_text()), True)
            for name in ("chat-overflow", "messages-overflow")
        ),
        # as the vendors answer it (their documented error bodies)
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 128000 tokens. However, "
                    "your messages resulted in 130412 tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
            True,
        ),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 208310 tokens > 200000 maximum",
                },
            },
            True,
        ),
        (
            400,
            {"error": {"message": "tools[0].name: invalid", "type": "invalid_request_error"}},
            False,
        ),
        (500, {"error": {"message": "request exceeds the available context size"}}, False),
    ],
)
def test_an_answer_over_the_context_window_is_recognized(
    status: int, body: dict[str, Any], overflow: bool
) -> None:
    error = body.get("error", {})
    assert is_overflow(status, body, str(error.get("message", ""))) is overflow


def test_an_overflow_from_the_server_is_a_failure_that_says_so(server: FakeProvider) -> None:
    server.script.append(Recorded("llamacpp", "chat-overflow"))
    with pytest.raises(ProviderFailure) as failed:
        openai_adapter(server).complete(ASK, model="smollm2", timeout=30)
    assert failed.value.overflow and not failed.value.retryable and failed.value.status == 400
    assert "exceeds the available context size (2048 tokens)" in failed.value.message


def test_a_recorded_stream_cut_at_the_deadline_keeps_what_came(server: FakeProvider) -> None:
    server.script.append(Recorded("llamacpp", "chat-plain", stream=True, delay=0.15))
    shown: list[str] = []
    answer = openai_adapter(server).complete(
        ASK,
        model="smollm2",
        timeout=30,
        deadline=Deadline(time.monotonic() + 0.5),
        on_text=shown.append,
    )
    whole = "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in sse_chunks(DATA / "llamacpp" / "chat-plain.sse")
        if c["choices"]
    )
    assert answer.stop_reason == STOP_CUT and answer.tool_calls == []
    assert answer.text and whole.startswith(answer.text) and answer.text != whole
    assert "".join(shown) == answer.text
    server.script.append(Recorded("llamacpp", "chat-plain", stream=True))
    done = openai_adapter(server).complete(ASK, model="smollm2", timeout=30)
    assert done.text == whole and done.stop_reason == STOP_END


@pytest.mark.parametrize("status", [408, 409, 429, 500, 503])
def test_the_answers_worth_trying_again(server: FakeProvider, status: int) -> None:
    from tests.fakeproviders import Error

    server.script.append(Error(status))
    with pytest.raises(ProviderFailure) as failed:
        openai_adapter(server).complete(ASK, model="smollm2", timeout=30)
    assert failed.value.retryable


def test_the_caps_on_an_answer_take_the_smallest(server: FakeProvider) -> None:
    from dataclasses import replace

    server.script.append(Recorded("llamacpp", "chat-plain", stream=True))
    openai_adapter(server, max_tokens=4096).complete(
        replace(ASK, max_tokens=64), model="smollm2", timeout=30
    )
    assert server.seen[-1].body["max_tokens"] == 64


def fetch_from(answers: dict[str, Any]) -> Any:
    asked: list[str] = []

    def fetch(method: str, url: str, body: Any, headers: dict[str, str]) -> Any:
        asked.append(f"{method} {url}")
        return answers.get(f"{method} {url}")

    fetch.asked = asked  # type: ignore[attr-defined]
    return fetch


def test_the_context_window_comes_from_configuration_the_server_or_a_default() -> None:
    props = json.loads((DATA / "llamacpp" / "props.json").read_text())
    models = json.loads((DATA / "llamacpp" / "models.json").read_text())
    local = ProviderDef("local", "openai", base_url="http://h:8080/v1")
    fetch = fetch_from({"GET http://h:8080/props": props})
    assert Windows(fetch).of(local, "smollm2") == Windows(fetch).of(local, "smollm2")
    assert Windows(fetch).of(local, "smollm2").tokens == 2048
    assert Windows(fetch).of(local, "smollm2").source == REPORTED
    only_models = fetch_from({"GET http://h:8080/v1/models": models})
    assert Windows(only_models).of(local, "smollm2").tokens == 2048  # its meta.n_ctx
    # Ollama: the model's num_ctx parameter, at most what the model was trained for
    ollama = ProviderDef("o", "openai", base_url="http://o:11434/v1")
    show = {
        "parameters": 'num_ctx                        8192\nstop "<|eot_id|>"',
        "model_info": {"llama.context_length": 131072},
    }
    assert (
        Windows(fetch_from({"POST http://o:11434/api/show": show})).of(ollama, "m").tokens == 8192
    )
    default_show = {"model_info": {"llama.context_length": 131072}}
    assert (
        Windows(fetch_from({"POST http://o:11434/api/show": default_show})).of(ollama, "m").tokens
        == 4096
    )
    # a server that says nothing: the documented default; the configuration wins always
    silent = Windows(fetch_from({}))
    assert (silent.of(local, "x").tokens, silent.of(local, "x").source) == (8192, DEFAULT)
    configured = ProviderDef(
        "local", "openai", base_url="http://h:8080/v1", model_info=(("x", ModelInfo(4096)),)
    )
    assert (
        silent.of(configured, "x").tokens == 4096
        and silent.of(configured, "x").source == CONFIGURED
    )
    vendor = ProviderDef("claude", "anthropic", key_env="K")
    assert Windows(fetch_from({})).of(vendor, "claude-x").tokens == 200_000


def test_what_a_server_reported_is_asked_again_only_after_a_while() -> None:
    props = json.loads((DATA / "llamacpp" / "props.json").read_text())
    fetch = fetch_from({"GET http://h:8080/props": props})
    now = [0.0]
    windows = Windows(fetch, clock=lambda: now[0])
    local = ProviderDef("local", "openai", base_url="http://h:8080/v1")
    for _ in range(3):
        windows.of(local, "smollm2")
    assert len(fetch.asked) == 1  # type: ignore[attr-defined]
    now[0] += 3600
    windows.of(local, "smollm2")
    assert len(fetch.asked) == 2  # type: ignore[attr-defined]


def test_a_streamed_answer_reaches_the_chat_in_pieces_and_never_as_no_reply() -> None:
    stored: list[str] = []
    now = [0.0]
    pieces = Pieces(stored.append, clock=lambda: now[0])
    text = "First paragraph, " + "quite long. " * 20 + "\n\nSecond one starts"
    for n in range(0, len(text), 7):
        pieces.feed(text[n : n + 7])
    assert len(stored) == 1 and stored[0].startswith("First paragraph")
    now[0] += 6  # a slow model: what came since shows after a few seconds
    pieces.feed(" and goes on")
    assert stored[-1] == "Second one starts and goes"  # up to the last space
    assert pieces.finish(text + " and goes on") and stored[-1] == "on"
    assert " ".join(stored).replace("\n", " ").split() == (text + " and goes on").split()
    quiet: list[str] = []
    silent = Pieces(quiet.append)
    for piece in ("NO_", "REP", "LY"):
        silent.feed(piece)
    assert not silent.finish("NO_REPLY") and quiet == []
