"""The providers' shared base, exactly: the stop-reason vocabulary, a model answer's
counts and wire form, a failure's fields, which error answers are retryable or say the
context window is full, Retry-After in both its forms, the key scrubbed from failures,
what a vendor SDK's exception becomes, and a stream cut at its deadline (the one closer
thread, with fakes for its clock and its queue: nothing here waits on real time)."""

from __future__ import annotations

import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator.config.providers import ProviderDef
from orchestrator.relay.providers import base
from orchestrator.relay.providers.base import (
    DEADLINE_SLACK_SECONDS,
    RETRYABLE_STATUS,
    STOP_CUT,
    STOP_END,
    STOP_LENGTH,
    STOP_TOOLS,
    Deadline,
    HostProvider,
    ModelAnswer,
    ModelCall,
    ProviderFailure,
    UntilDeadline,
    _Closer,
    is_overflow,
    retry_after_seconds,
    sdk_failure,
    status_failure,
    stop_reason,
)

KEY = "sk-abcdefghijklmnopqrstuvwxyz"  # longer than 12 characters


class Provider(HostProvider):
    def complete(self, call: ModelCall, **kwargs: Any) -> ModelAnswer:  # type: ignore[override]
        raise NotImplementedError


def provider(key: str | None = KEY, max_tokens: int = 4096) -> Provider:
    return Provider(ProviderDef(name="acme", kind="openai", max_tokens=max_tokens), key)


# -- the stop-reason vocabulary ------------------------------------------------------------


def test_stop_constants() -> None:
    assert (STOP_END, STOP_LENGTH, STOP_TOOLS, STOP_CUT) == ("end", "length", "tool_calls", "cut")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("stop", "end"),
        ("end_turn", "end"),
        ("stop_sequence", "end"),
        ("length", "length"),
        ("max_tokens", "length"),
        ("tool_calls", "tool_calls"),
        ("tool_use", "tool_calls"),
        ("function_call", "tool_calls"),
        ("content_filter", "content_filter"),
        (7, "7"),
        (None, None),
    ],
)
def test_stop_reason(raw: object, expected: str | None) -> None:
    assert stop_reason(raw) == expected


# -- a call and an answer ------------------------------------------------------------------


def test_model_call_defaults() -> None:
    call = ModelCall("sys", [{"role": "user", "content": "hi"}])
    assert (call.system, call.messages, call.tools, call.purpose, call.max_tokens) == (
        "sys",
        [{"role": "user", "content": "hi"}],
        [],
        "turn",
        None,
    )
    # each call has a list of its own
    assert ModelCall("s", []).tools is not call.tools


def test_model_answer_defaults_and_wire() -> None:
    answer = ModelAnswer("hello", [{"id": "1", "name": "t", "arguments": {}}], 10, 5)
    assert answer.stop_reason is None
    assert answer.server_ms is None
    assert (answer.cache_read_tokens, answer.cache_write_tokens) == (0, 0)
    assert answer.cut is False
    assert answer.prompt_tokens == 10
    assert answer.to_wire() == {
        "text": "hello",
        "tool_calls": [{"id": "1", "name": "t", "arguments": {}}],
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "stop_reason": None,
    }


def test_model_answer_prompt_tokens_counts_the_cache() -> None:
    answer = ModelAnswer(
        None,
        [],
        100,
        7,
        stop_reason=STOP_CUT,
        server_ms=12.5,
        cache_read_tokens=20,
        cache_write_tokens=3,
    )
    assert answer.prompt_tokens == 123
    assert answer.cut is True
    assert answer.server_ms == 12.5
    assert answer.to_wire() == {
        "text": None,
        "tool_calls": [],
        "usage": {"input_tokens": 123, "output_tokens": 7},
        "stop_reason": "cut",
    }


@pytest.mark.parametrize("reason", ["end", "length", "tool_calls", None])
def test_model_answer_not_cut(reason: str | None) -> None:
    assert ModelAnswer("x", [], 1, 1, stop_reason=reason).cut is False


def token_counts(answer: ModelAnswer) -> tuple[int, int, int, int]:
    """An answer's input, output, cache read and cache write tokens."""
    return (
        answer.input_tokens,
        answer.output_tokens,
        answer.cache_read_tokens,
        answer.cache_write_tokens,
    )


def test_model_answer_negative_counts_become_zero() -> None:
    answer = ModelAnswer("x", [], -5, -1, cache_read_tokens=-2, cache_write_tokens=-9)
    assert token_counts(answer) == (0, 0, 0, 0)
    assert answer.prompt_tokens == 0


def test_model_answer_positive_counts_kept() -> None:
    answer = ModelAnswer("x", [], 1, 2, cache_read_tokens=3, cache_write_tokens=4)
    assert token_counts(answer) == (1, 2, 3, 4)


@pytest.mark.parametrize(
    "field", ["input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"]
)
def test_model_answer_each_negative_count_alone(field: str) -> None:
    counts = {
        "input_tokens": 1,
        "output_tokens": 1,
        "cache_read_tokens": 1,
        "cache_write_tokens": 1,
    }
    counts[field] = -3
    answer = ModelAnswer("x", [], **counts)  # type: ignore[arg-type]
    expected = {name: (0 if name == field else 1) for name in counts}
    assert {name: getattr(answer, name) for name in counts} == expected


# -- failures ------------------------------------------------------------------------------


def fields(failure: ProviderFailure) -> tuple[int | None, float | None, bool, bool]:
    """A failure's status, Retry-After, whether it is retryable, whether it is an overflow."""
    return (failure.status, failure.retry_after, failure.retryable, failure.overflow)


def test_provider_failure_defaults() -> None:
    failure = ProviderFailure("it broke")
    assert str(failure) == "it broke"
    assert failure.args == ("it broke",)
    assert (failure.message, *fields(failure)) == ("it broke", None, None, False, False)


def test_provider_failure_fields() -> None:
    failure = ProviderFailure("m", status=429, retry_after=2.5, retryable=True, overflow=True)
    assert (failure.message, *fields(failure)) == ("m", 429, 2.5, True, True)
    failure.message = "changed"
    assert str(failure) == "changed"


def test_retryable_statuses() -> None:
    assert frozenset({408, 409, 429}) == RETRYABLE_STATUS


# -- over the context window ---------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 413])
@pytest.mark.parametrize(
    "body",
    [
        {"error": {"type": "exceed_context_size_error"}},
        {"error": {"type": "context_length_exceeded"}},
        {"error": {"code": "context_length_exceeded"}},
        {"error": {"code": "exceed_context_size_error"}},
        {"type": "exceed_context_size_error"},
        {"code": "context_length_exceeded"},
    ],
)
def test_overflow_from_the_body(status: int, body: dict[str, Any]) -> None:
    assert is_overflow(status, body, "nothing said") is True


@pytest.mark.parametrize(
    "text",
    [
        "the request exceeds the available context size, try increasing it",
        "This model's Maximum Context Length is 8192 tokens",
        "Prompt is too long: 300000 tokens",
        "CONTEXT LENGTH EXCEEDED",
        "over the Context Window",
    ],
)
def test_overflow_from_the_text(text: str) -> None:
    assert is_overflow(400, None, text) is True
    assert is_overflow(413, "a string body", text) is True


@pytest.mark.parametrize("status", [401, 404, 422, 429, 500])
def test_overflow_only_for_400_and_413(status: int) -> None:
    assert is_overflow(status, {"error": {"type": "context_length_exceeded"}}, "") is False
    assert is_overflow(status, None, "prompt is too long") is False


def test_not_overflow() -> None:
    assert is_overflow(400, {"error": {"type": "invalid_request", "code": "bad"}}, "bad") is False
    assert is_overflow(400, {"error": "context_length_exceeded"}, "x") is False
    assert is_overflow(400, {"type": "other"}, "") is False
    assert is_overflow(400, None, "") is False


# -- the deadline --------------------------------------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_deadline() -> None:
    clock = Clock(10.0)
    deadline = Deadline(12.5, clock)
    assert deadline.at == 12.5
    assert deadline.clock is clock
    assert deadline.passed() is False
    assert deadline.left() == 2.5
    clock.now = 12.5
    assert deadline.passed() is True
    assert deadline.left() == 0.0
    clock.now = 13.0
    assert deadline.passed() is True
    assert deadline.left() == -0.5


def test_deadline_default_clock_is_monotonic() -> None:
    import time

    assert Deadline(1.0).clock is time.monotonic


def test_deadline_slack() -> None:
    assert DEADLINE_SLACK_SECONDS == 0.25


# -- the closer thread ---------------------------------------------------------------------


def test_closer_closes_a_due_stream_on_its_own_thread() -> None:
    closer = _Closer()
    closed = threading.Event()
    seen: list[str] = []

    def close() -> None:
        seen.append(threading.current_thread().name)
        closed.set()

    assert closer._thread is None
    handle = closer.at(0.0, close)  # long due
    assert handle == 1
    assert closed.wait(30)
    assert seen == ["stream-closer"]
    assert closer._thread is not None
    assert closer._thread.daemon is True
    assert closer._thread.name == "stream-closer"


def test_closer_handles_count_up_and_one_thread_serves_all() -> None:
    closer = _Closer()
    done = threading.Semaphore(0)
    order: list[str] = []

    def closing(name: str) -> Any:
        def close() -> None:
            order.append(name)
            done.release()

        return close

    first = closer.at(0.0, closing("a"))
    thread = closer._thread
    second = closer.at(0.0, closing("b"))
    assert (first, second) == (1, 2)
    assert closer._thread is thread
    assert done.acquire(timeout=30)
    assert done.acquire(timeout=30)
    assert order == ["a", "b"]


def test_closer_earliest_first_and_cancelled_forgotten() -> None:
    closer = _Closer()
    closer._thread = threading.current_thread()  # queue first, serve after
    done = threading.Event()
    order: list[str] = []
    late = closer.at(2.0, lambda: (order.append("late"), done.set()))
    cancelled = closer.at(1.0, lambda: order.append("cancelled"))
    first = closer.at(0.5, lambda: order.append("first"))
    assert (late, cancelled, first) == (1, 2, 3)
    closer.cancel(cancelled)
    closer.cancel(999)  # an unknown handle: nothing
    assert sorted(closer._closes) == [1, 3]
    threading.Thread(target=closer._run, daemon=True).start()
    assert done.wait(30)
    assert order == ["first", "late"]
    assert closer._closes == {}
    assert closer._due == []


def test_closer_waits_for_a_stream_not_yet_due() -> None:
    closer = _Closer()
    closed = threading.Event()
    closer.at(time.monotonic() + 3600, closed.set)
    assert not closed.wait(0.2)
    assert closer._closes != {}


def test_closer_survives_a_close_that_raises() -> None:
    closer = _Closer()
    done = threading.Event()

    def broken() -> None:
        raise OSError("already closed")

    closer.at(0.0, broken)
    closer.at(0.0, done.set)
    assert done.wait(30)
    assert closer._thread is not None and closer._thread.is_alive()


class Stop(BaseException):
    """Ends the closer's loop (a close's Exception is suppressed; this is not)."""


class FakeCondition:
    """The closer's condition with a fake clock: a wait with a bound moves the clock on
    by it; a wait without one (nothing queued) runs ``on_idle``, as a new stream would."""

    def __init__(self, clock: Clock, on_idle: Any) -> None:
        self.clock = clock
        self.on_idle = on_idle
        self.waits: list[float | None] = []

    def __enter__(self) -> FakeCondition:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def wait(self, timeout: float | None = None) -> None:
        self.waits.append(timeout)
        if timeout is None:
            self.on_idle()
        else:
            self.clock.now += timeout

    def notify(self) -> None:
        pass


def test_closer_waits_until_the_earliest_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(100.0)
    monkeypatch.setattr(base, "time", types.SimpleNamespace(monotonic=clock))
    closer = _Closer()
    closer._thread = threading.current_thread()  # served by the test's own thread
    closed: list[tuple[str, float]] = []

    def late() -> None:
        closed.append(("late", clock.now))
        raise Stop

    def queue() -> None:
        closer.at(103.5, late)
        closer.at(101.0, lambda: closed.append(("early", clock.now)))

    condition = FakeCondition(clock, queue)
    closer._cond = condition  # type: ignore[assignment]
    with pytest.raises(Stop):
        closer._run()
    assert condition.waits == [None, 1.0, 2.5]
    assert closed == [("early", 101.0), ("late", 103.5)]


def test_closer_is_one_for_the_daemon() -> None:
    assert isinstance(base.CLOSER, _Closer)


# -- a stream until its deadline -----------------------------------------------------------


class FakeCloser:
    def __init__(self) -> None:
        self.scheduled: list[tuple[float, Any]] = []
        self.cancelled: list[int] = []

    def at(self, when: float, close: Any) -> int:
        self.scheduled.append((when, close))
        return 41 + len(self.scheduled)

    def cancel(self, handle: int) -> None:
        self.cancelled.append(handle)


@pytest.fixture
def closer(monkeypatch: pytest.MonkeyPatch) -> FakeCloser:
    fake = FakeCloser()
    monkeypatch.setattr(base, "CLOSER", fake)
    monkeypatch.setattr(base, "time", types.SimpleNamespace(monotonic=lambda: 100.0))
    return fake


def broken_after(items: list[dict[str, Any]], error: Exception) -> Iterator[dict[str, Any]]:
    yield from items
    raise error


def close() -> None:
    """A stream's close, scheduled and cancelled but never called here."""


def read_until_reset(stream: UntilDeadline) -> list[dict[str, Any]]:
    """The chunks ``stream`` gave before it raised its OSError("reset")."""
    got: list[dict[str, Any]] = []
    with pytest.raises(OSError, match=r"^reset$"):
        for chunk in stream:
            got.append(chunk)
    return got


def test_until_deadline_all_chunks(closer: FakeCloser) -> None:
    stream = UntilDeadline([{"a": 1}, {"b": 2}], Deadline(103.0, Clock(101.0)), close)
    assert stream.chunks == [{"a": 1}, {"b": 2}]
    assert stream.close is close
    assert stream.timed_out is False
    assert list(stream) == [{"a": 1}, {"b": 2}]
    assert stream.timed_out is False
    assert closer.scheduled == [(102.0, close)]
    assert closer.cancelled == [42]


def test_until_deadline_past_deadline_closes_now(closer: FakeCloser) -> None:
    list(UntilDeadline([], Deadline(90.0, Clock(101.0)), close))
    assert closer.scheduled == [(100.0, close)]
    assert closer.cancelled == [42]


def test_until_deadline_no_close_no_timer(closer: FakeCloser) -> None:
    stream = UntilDeadline(iter([{"a": 1}]), Deadline(103.0, Clock(101.0)))
    assert stream.close is None
    assert list(stream) == [{"a": 1}]
    assert closer.scheduled == []
    assert closer.cancelled == []


def test_until_deadline_no_deadline_no_timer(closer: FakeCloser) -> None:
    stream = UntilDeadline(iter([{"a": 1}]), None, lambda: None)
    assert list(stream) == [{"a": 1}]
    assert closer.scheduled == []
    assert closer.cancelled == []


def test_until_deadline_error_without_deadline_raises(closer: FakeCloser) -> None:
    stream = UntilDeadline(broken_after([{"a": 1}], OSError("reset")), None)
    assert read_until_reset(stream) == [{"a": 1}]
    assert stream.timed_out is False


def test_until_deadline_error_far_from_deadline_raises(closer: FakeCloser) -> None:
    # 0.26 seconds left: more than the slack
    stream = UntilDeadline(
        broken_after([{"a": 1}], OSError("reset")), Deadline(100.26, Clock(100.0)), close
    )
    assert read_until_reset(stream) == [{"a": 1}]
    assert stream.timed_out is False
    assert closer.cancelled == [42]


@pytest.mark.parametrize("left", [0.25, 0.1, 0.0, -3.0])
def test_until_deadline_error_at_deadline_is_a_cut(closer: FakeCloser, left: float) -> None:
    stream = UntilDeadline(
        broken_after([{"a": 1}, {"b": 2}], OSError("closed")),
        Deadline(1000.0 + left, Clock(1000.0)),
        close,
    )
    assert list(stream) == [{"a": 1}, {"b": 2}]
    assert stream.timed_out is True
    assert closer.cancelled == [42]


def test_until_deadline_cut_without_close(closer: FakeCloser) -> None:
    stream = UntilDeadline(
        broken_after([{"a": 1}], ValueError("bad")), Deadline(1000.0, Clock(1000.0))
    )
    assert list(stream) == [{"a": 1}]
    assert stream.timed_out is True
    assert closer.scheduled == []


# -- the provider ------------------------------------------------------------------------


def test_host_provider_fields() -> None:
    definition = ProviderDef(name="acme", kind="openai")
    made = Provider(definition, "k")
    assert made.definition is definition
    assert made.key == "k"


@pytest.mark.parametrize(
    ("cap", "own", "expected"),
    [(4096, None, 4096), (4096, 0, 4096), (4096, 100, 100), (100, 4096, 100), (50, 50, 50)],
)
def test_max_tokens(cap: int, own: int | None, expected: int) -> None:
    call = ModelCall("s", [], max_tokens=own)
    assert provider(max_tokens=cap).max_tokens(call) == expected


def test_close_closes_the_client() -> None:
    made = provider()
    made.close()  # no client: nothing
    closed: list[bool] = []
    made.client = types.SimpleNamespace(close=lambda: closed.append(True))  # type: ignore[attr-defined]
    made.close()
    assert closed == [True]


def test_close_with_a_none_client() -> None:
    made = provider()
    made.client = None  # type: ignore[attr-defined]
    made.close()


def test_scrub_a_long_key_and_its_prefix() -> None:
    text = f"bad key {KEY} or {KEY[:12]}xyz or {KEY[:11]}"
    assert provider().scrub(text) == f"bad key [key] or [key]xyz or {KEY[:11]}"


def test_scrub_a_key_of_twelve() -> None:
    key = "abcdefghijkl"
    assert provider(key).scrub(f"{key} and {key[:11]}") == f"[key] and {key[:11]}"


def test_scrub_a_key_of_thirteen() -> None:
    key = "abcdefghijklm"
    assert provider(key).scrub(f"{key} and {key[:12]}!") == "[key] and [key]!"


def test_scrub_leaves_no_key_that_its_marker_joins_again() -> None:
    # "[k" + "[key]" + "abcdefgh" would hold the key again: another marker is taken
    key = "ey]abcdefgh"
    assert provider(key).scrub(f"[k{key}abcdefgh") == "[k<key>abcdefgh"
    # the prefix of a long key too
    key = "ey]abcdefghijklmnop"
    assert provider(key).scrub(f"[k{key[:12]}ijk!") == "[k<key>ijk!"


def test_scrub_short_keys() -> None:
    assert provider("abcd").scrub("xabcdx abc") == "x[key]x abc"
    assert provider("abc").scrub("xabcx") == "xabcx"
    assert provider("").scrub("text") == "text"
    assert provider(None).scrub("None text") == "None text"


# -- Retry-After ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, None),
        ({}, None),
        ({"other": "1"}, None),
        ({"retry-after": ""}, None),
        ({"retry-after": "3"}, 3.0),
        ({"Retry-After": "2.5"}, 2.5),
        ({"retry-after": "-4"}, 0.0),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "7", "Retry-After": "9"}, 7.0),
        ({"retry-after": "", "Retry-After": "9"}, 9.0),
    ],
)
def test_retry_after_seconds(headers: dict[str, str] | None, expected: float | None) -> None:
    assert retry_after_seconds(headers) == expected


def test_retry_after_an_http_date(monkeypatch: pytest.MonkeyPatch) -> None:
    # Wed, 21 Oct 2015 07:28:00 GMT is 1445412480
    monkeypatch.setattr(base, "time", types.SimpleNamespace(time=lambda: 1445412470.0))
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 10.0
    monkeypatch.setattr(base, "time", types.SimpleNamespace(time=lambda: 1445412490.0))
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0


def test_retry_after_a_bad_date() -> None:
    assert retry_after_seconds({"retry-after": "Wed, 99 Foo 2015"}) is None


# -- HTTP error answers --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (400, False),
        (401, False),
        (404, False),
        (407, False),
        (408, True),
        (409, True),
        (410, False),
        (429, True),
        (499, False),
        (500, True),
        (503, True),
    ],
)
def test_status_failure_retryable(status: int, retryable: bool) -> None:
    failure = status_failure(provider(), status, None, "oops")
    assert failure.message == f"provider 'acme' answered HTTP {status}: oops"
    assert failure.status == status
    assert failure.retry_after is None
    assert failure.retryable is retryable
    assert failure.overflow is False


def test_status_failure_retry_after_overflow_and_scrub() -> None:
    failure = status_failure(
        provider(),
        400,
        {"retry-after": "5"},
        f"key {KEY} is over the maximum context length",
        {"error": {"type": "invalid_request_error"}},
    )
    assert failure.message == (
        "provider 'acme' answered HTTP 400: key [key] is over the maximum context length"
    )
    assert fields(failure) == (400, 5.0, False, True)


def test_status_failure_overflow_from_the_body() -> None:
    failure = status_failure(
        provider(), 413, None, "too big", {"error": {"code": "context_length_exceeded"}}
    )
    assert failure.overflow is True


def test_status_failure_cut_at_500_before_scrubbing() -> None:
    failure = status_failure(provider(), 500, None, "x" * 600)
    prefix = "provider 'acme' answered HTTP 500: "
    assert failure.message == prefix + "x" * (500 - len(prefix))
    assert len(failure.message) == 500


# -- what a vendor SDK raised ----------------------------------------------------------------


class APIError(Exception):
    pass


class APIStatusError(APIError):
    def __init__(self, status_code: int, headers: dict[str, str], body: object = None) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code
        self.response = types.SimpleNamespace(headers=headers)
        if body is not None:
            self.body = body


class APIConnectionError(APIError):
    pass


class APITimeoutError(APIConnectionError):
    pass


SDK = types.SimpleNamespace(
    APIStatusError=APIStatusError,
    APIConnectionError=APIConnectionError,
    APITimeoutError=APITimeoutError,
)


def detail(exc: Any) -> str:
    return f"detail of {exc} {KEY}"


def test_sdk_failure_passes_a_provider_failure_through_scrubbed() -> None:
    original = ProviderFailure(f"it said {KEY}", status=418, retryable=True)
    failure = sdk_failure(provider(), SDK, original, detail)
    assert failure is original
    assert failure.message == "it said [key]"
    assert (failure.status, failure.retryable) == (418, True)


def test_sdk_failure_status_error() -> None:
    exc = APIStatusError(429, {"retry-after": "12"}, {"error": {"type": "context_length_exceeded"}})
    failure = sdk_failure(provider(), SDK, exc, detail)
    assert failure.message == "provider 'acme' answered HTTP 429: detail of status 429 [key]"
    assert fields(failure) == (429, 12.0, True, False)


def test_sdk_failure_status_error_body_says_overflow() -> None:
    exc = APIStatusError(400, {}, {"error": {"type": "context_length_exceeded"}})
    failure = sdk_failure(provider(), SDK, exc, detail)
    assert failure.message == "provider 'acme' answered HTTP 400: detail of status 400 [key]"
    assert fields(failure) == (400, None, False, True)


def test_sdk_failure_status_error_without_a_body() -> None:
    exc = APIStatusError(400, {}, None)
    failure = sdk_failure(provider(), SDK, exc, lambda e: "plain")
    assert failure.message == "provider 'acme' answered HTTP 400: plain"
    assert failure.overflow is False


def test_sdk_failure_timeout() -> None:
    failure = sdk_failure(provider(), SDK, APITimeoutError(f"timed out {KEY}"), detail)
    assert failure.message == (
        "provider 'acme' did not answer within the turn's time: timed out [key]"
    )
    assert fields(failure) == (None, None, True, False)


def test_sdk_failure_connection() -> None:
    failure = sdk_failure(provider(), SDK, APIConnectionError(f"refused {KEY}"), detail)
    assert failure.message == "provider 'acme' unreachable: refused [key]"
    assert fields(failure) == (None, None, True, False)


def test_sdk_failure_malformed() -> None:
    failure = sdk_failure(provider(), SDK, KeyError(f"choices {KEY}"), detail)
    assert failure.message == ("provider 'acme' sent a malformed answer: KeyError: 'choices [key]'")
    assert fields(failure) == (None, None, True, False)


def test_sdk_failure_malformed_cut_at_500() -> None:
    failure = sdk_failure(provider(), SDK, ValueError("y" * 600), detail)
    prefix = "provider 'acme' sent a malformed answer: ValueError: "
    assert failure.message == prefix + "y" * (500 - len(prefix))
