"""The provider adapters against fake servers that check the real APIs' wire format."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.config.providers import ProviderDef
from orchestrator.limits import RELAY_PROVIDER_ATTEMPTS
from orchestrator.relay.providers import adapter_for
from orchestrator.relay.providers.base import (
    HostProvider,
    ModelCall,
    ProviderFailure,
    retry_after_seconds,
)
from orchestrator.relay.retry import call_with_retries, retry_wait
from tests.fakeproviders import (
    Cut,
    Error,
    FakeProvider,
    Hold,
    Linger,
    Malformed,
    QuietStream,
    Text,
    ToolUse,
)

KEY = "sk-test-0123456789abcdefghij"
TOOLS = [
    {
        "name": "write_file",
        "description": "Write a file.",
        "parameters": {
            "type": "object",
            "required": ["path", "content"],
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        },
    }
]
HISTORY = [
    {"role": "user", "content": "remember my name is Ada", "sender": "alice", "trust": "member"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "t1", "name": "write_file", "arguments": {"path": "memory/a.md"}}],
    },
    {"role": "tool", "tool_call_id": "t1", "name": "write_file", "content": "PERSISTED: a"},
    {"role": "assistant", "content": "Saved."},
    {"role": "user", "content": "what is my name? 名前は"},
]
CALL = ModelCall("You are a test.", HISTORY, TOOLS, "turn")


@pytest.fixture(params=["anthropic", "openai"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=[True, False], ids=["streamed", "whole"])
def stream(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


OPEN: list[HostProvider] = []


@pytest.fixture
def server(kind: str) -> Iterator[FakeProvider]:
    fake = FakeProvider(kind, KEY)
    yield fake
    while OPEN:
        OPEN.pop().close()
    fake.close()


def adapter(server: FakeProvider, stream: bool = True) -> HostProvider:
    definition = ProviderDef(
        "p", server.kind, base_url=server.base_url, key_env="K", max_tokens=256, stream=stream
    )
    OPEN.append(adapter_for(definition, KEY))
    return OPEN[-1]


def test_text_answer_and_the_exact_request(server: FakeProvider, stream: bool) -> None:
    server.script.append(Text("Your name is Ada.", input_tokens=42, output_tokens=6))
    answer = adapter(server, stream).complete(CALL, model="m-1", timeout=30)
    assert answer.text == "Your name is Ada." and answer.tool_calls == []
    assert (answer.input_tokens, answer.output_tokens) == (42, 6)
    seen = server.seen[-1]
    assert seen.body["model"] == "m-1" and bool(seen.body.get("stream")) is stream
    body = seen.body
    if server.kind == "anthropic":
        auth = seen.headers.get("x-api-key") or seen.headers["Authorization"].split()[-1]
        assert auth == KEY and body["system"] == "You are a test."
        assert body["max_tokens"] == 256
        assert [m["role"] for m in body["messages"]] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
        assert body["messages"][1]["content"] == [
            {"type": "tool_use", "id": "t1", "name": "write_file", "input": {"path": "memory/a.md"}}
        ]
        assert body["messages"][2]["content"] == [
            {"type": "tool_result", "tool_use_id": "t1", "content": "PERSISTED: a"}
        ]
        assert body["tools"][0]["input_schema"] == TOOLS[0]["parameters"]
    else:
        assert seen.headers["Authorization"] == f"Bearer {KEY}"
        messages = body["messages"]
        assert messages[0] == {"role": "system", "content": "You are a test."}
        assert messages[2]["tool_calls"][0]["function"] == {
            "name": "write_file",
            "arguments": '{"path": "memory/a.md"}',
        }
        assert messages[3] == {"role": "tool", "tool_call_id": "t1", "content": "PERSISTED: a"}
        assert messages[5]["content"] == "what is my name? 名前は"
        assert body["tools"][0]["function"]["parameters"] == TOOLS[0]["parameters"]
    assert "sender" not in str(body) and "alice" not in str(body)  # host-side data stays


def test_tool_call_arguments_split_across_chunks(server: FakeProvider, stream: bool) -> None:
    arguments = {"path": "memory/facts/ada.md", "content": "---\ntype: fact\n---\nAda ✓"}
    server.script.append(ToolUse("write_file", arguments, text="Saving.", pieces=7))
    answer = adapter(server, stream).complete(CALL, model="m", timeout=30)
    assert answer.text == "Saving."
    assert answer.tool_calls == [{"id": "call_1", "name": "write_file", "arguments": arguments}]


@pytest.mark.parametrize(
    ("step", "retryable", "words"),
    [
        (Error(429, "slow down", retry_after="3"), True, "HTTP 429"),
        (Error(503, "overloaded"), True, "HTTP 503"),
        (Error(400, "bad request"), False, "HTTP 400"),
        (Malformed(), True, "malformed"),
        (Cut(), True, "ended before"),
    ],
)
def test_failures_are_classified(server: FakeProvider, step, retryable, words) -> None:  # type: ignore[no-untyped-def]
    server.script.append(step)
    with pytest.raises(ProviderFailure) as caught:
        adapter(server).complete(CALL, model="m", timeout=30)
    assert caught.value.retryable is retryable and words in caught.value.message
    if isinstance(step, Error) and step.retry_after:
        assert caught.value.retry_after == 3.0


def test_the_key_never_appears_in_an_error(server: FakeProvider) -> None:
    server.script.append(Error(401, f"invalid x-api-key {KEY}"))
    with pytest.raises(ProviderFailure) as caught:
        adapter(server).complete(CALL, model="m", timeout=30)
    assert KEY not in caught.value.message and "[key]" in caught.value.message


def test_a_call_gets_its_own_timeout_and_the_next_call_its_own(
    server: FakeProvider, stream: bool
) -> None:
    """The timeout is the call's (a request option on the one shared client): a server
    that does not answer in it fails the call as retryable, and the next call, with a
    longer timeout, is answered on the same client."""
    held = Hold(then=Text("late"))
    server.script.extend([held, Text("on time")])
    provider = adapter(server, stream)
    try:
        with pytest.raises(ProviderFailure) as failed:
            provider.complete(CALL, model="m", timeout=0.5)
        assert failed.value.retryable and held.reached.is_set()
    finally:
        held.release.set()
    assert provider.complete(CALL, model="m", timeout=30).text == "on time"


def test_calls_one_after_another_share_one_connection(server: FakeProvider, stream: bool) -> None:
    """A streamed answer is read to its body's end, so its connection goes back to the
    client's pool (the OpenAI SDK stops at [DONE]; closing the answer there took the
    connection down, and every call made a new one: a TLS handshake each, remotely)."""
    provider = adapter(server, stream)
    for _ in range(3):
        assert provider.complete(CALL, model="m", timeout=30).text == "ok"
    peers = {seen.peer for seen in server.seen}
    assert len(server.seen) == 3 and len(peers) == 1 and None not in peers


def test_a_stream_kept_open_after_its_end_still_answers() -> None:
    """Reading on after the answer's last event (for the connection's sake) is bounded:
    a server that keeps the body open after [DONE] (the Chat Completions stream's end)
    does not hold the answer back."""
    fake = FakeProvider("openai", KEY)
    lingering = Linger("whole")
    fake.script.append(lingering)
    try:
        answer = adapter(fake).complete(CALL, model="m", timeout=600)
        assert answer.text == "whole" and not lingering.release.is_set()
    finally:
        lingering.release.set()
        while OPEN:
            OPEN.pop().close()
        fake.close()


def test_429_then_success_honours_retry_after(server: FakeProvider) -> None:
    server.script.extend([Error(429, retry_after="2"), Error(502), Text("fine")])
    slept: list[float] = []
    provider = adapter(server)
    answer = call_with_retries(
        lambda timeout: provider.complete(CALL, model="m", timeout=timeout),
        deadline=float("inf"),
        sleep=slept.append,
    )
    assert answer.text == "fine" and slept == [2.0, 1.0]  # Retry-After, then 0.5 * 2


def test_a_provider_that_stays_down_fails_after_its_attempts(server: FakeProvider) -> None:
    server.script.extend([Error(500)] * 10)
    with pytest.raises(ProviderFailure, match="HTTP 500"):
        call_with_retries(
            lambda timeout: adapter(server).complete(CALL, model="m", timeout=timeout),
            deadline=float("inf"),
            sleep=lambda _: None,
        )
    assert len(server.seen) == RELAY_PROVIDER_ATTEMPTS


def test_retries_stop_before_the_deadline() -> None:
    calls: list[float] = []
    now = [0.0]

    def failing(timeout: float) -> None:
        calls.append(timeout)
        raise ProviderFailure("busy", retryable=True, retry_after=5.0)

    with pytest.raises(ProviderFailure):
        call_with_retries(
            failing,
            deadline=8.0,
            sleep=lambda s: now.__setitem__(0, now[0] + s),
            clock=lambda: now[0],
        )
    assert calls == [8.0, 3.0]  # a second attempt with what was left; no third


def test_retry_wait_and_retry_after_parsing() -> None:
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert (
        retry_after_seconds({"retry-after": "soon"}) is None and retry_after_seconds(None) is None
    )
    busy = ProviderFailure("x", retryable=True)
    assert [retry_wait(busy, n) for n in (1, 2, 3, 7)] == [0.5, 1.0, 2.0, 20.0]
    assert retry_wait(ProviderFailure("x", retry_after=600), 1) == 20.0


def test_a_server_without_a_key_and_without_usage(kind: str) -> None:
    fake = FakeProvider(kind, None)
    try:
        definition = ProviderDef("local", kind, base_url=fake.base_url, key_env=None)
        provider = adapter_for(definition, None)
        answer = provider.complete(CALL, model="llama", timeout=30)
        provider.close()
        assert answer.text == "ok"
    finally:
        fake.close()


def test_a_stream_that_goes_quiet_is_cut_at_the_deadline_with_its_text_so_far() -> None:
    import time

    from orchestrator.relay.providers import anthropic, openai
    from orchestrator.relay.providers.base import STOP_CUT, Deadline

    openai_chunks = [{"choices": [{"delta": {"content": "The capital "}}]}]
    anthropic_events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "text_delta", "text": "The capital "}},
    ]  # fmt: skip
    for read, chunks in (
        (openai.read_stream, openai_chunks),
        (anthropic.read_stream, anthropic_events),
    ):
        stream = QuietStream(chunks)
        shown: list[str] = []
        answer = read(stream, deadline=Deadline(time.monotonic() + 0.3), on_text=shown.append)
        assert stream.closed.is_set()  # closed at the deadline, not waited out
        assert (answer.text, answer.stop_reason, shown) == (
            "The capital ",
            STOP_CUT,
            ["The capital "],
        )
    # before its deadline a failing stream fails as it did
    stream = QuietStream(openai_chunks)
    stream.close()
    with pytest.raises(OSError):
        openai.read_stream(stream, deadline=Deadline(time.monotonic() + 60))
