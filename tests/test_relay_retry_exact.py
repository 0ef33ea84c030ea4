"""Retrying a provider's failures within a turn, exactly: the waits, how many attempts,
the timeout each attempt gets, what stops the retries (the attempts, the deadline, a
failure that must not be repeated), which failure is raised and the log line of each
retry. The clock and the sleep are fakes that move together."""

from __future__ import annotations

import logging

import pytest

from orchestrator.limits import RELAY_PROVIDER_ATTEMPTS, RELAY_RETRY_MAX_WAIT_SECONDS
from orchestrator.relay.providers.base import ProviderFailure
from orchestrator.relay.retry import call_with_retries, retry_wait


class Clock:
    """A clock that only sleeping moves, and the sleeps asked of it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Script:
    """A call that raises the failures given, in turn, then answers "done"; it keeps the
    timeout of each attempt."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.timeouts: list[float] = []

    def __call__(self, timeout: float) -> str:
        self.timeouts.append(timeout)
        if self.failures:
            raise self.failures.pop(0)
        return "done"


def busy(name: str = "busy", retry_after: float | None = None) -> ProviderFailure:
    return ProviderFailure(name, retryable=True, retry_after=retry_after)


def test_the_wait_doubles_from_half_a_second_to_the_most_allowed() -> None:
    waits = [retry_wait(busy(), attempt) for attempt in range(1, 9)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 20.0, 20.0]
    assert RELAY_RETRY_MAX_WAIT_SECONDS == 20.0
    assert all(type(wait) is float for wait in waits)


def test_the_servers_retry_after_is_the_wait_within_zero_and_the_most_allowed() -> None:
    assert retry_wait(busy(retry_after=3.25), 1) == 3.25
    assert retry_wait(busy(retry_after=3.25), 5) == 3.25  # whatever the attempt
    assert retry_wait(busy(retry_after=0.0), 4) == 0.0  # not the exponential 4.0
    assert retry_wait(busy(retry_after=-7.0), 1) == 0.0
    assert retry_wait(busy(retry_after=19.99), 1) == 19.99
    assert retry_wait(busy(retry_after=20.0), 1) == 20.0
    assert retry_wait(busy(retry_after=20.01), 1) == 20.0


def test_a_first_success_is_returned_with_the_time_left_as_its_timeout() -> None:
    clock = Clock(100.0)
    call = Script()
    assert call_with_retries(call, 142.5, sleep=clock.sleep, clock=clock) == "done"
    assert (call.timeouts, clock.slept) == ([42.5], [])


def test_an_attempts_timeout_is_at_most_an_hour() -> None:
    clock = Clock()
    call = Script()
    call_with_retries(call, 3600.5, sleep=clock.sleep, clock=clock)
    call_with_retries(call, 3600.0, sleep=clock.sleep, clock=clock)
    call_with_retries(call, 3599.0, sleep=clock.sleep, clock=clock)
    call_with_retries(call, float("inf"), sleep=clock.sleep, clock=clock)
    assert call.timeouts == [3600.0, 3600.0, 3599.0, 3600.0]


def test_retryable_failures_are_retried_with_their_waits_and_the_time_left() -> None:
    clock = Clock()
    call = Script(busy("one"), busy("two", retry_after=3.0), busy("three"))
    seen: list[str] = []
    answer = call_with_retries(
        call, 60.0, sleep=clock.sleep, clock=clock, on_failure=lambda f: seen.append(f.message)
    )
    assert answer == "done"
    assert clock.slept == [0.5, 3.0, 2.0]  # attempt 1, the server's word, attempt 3
    assert call.timeouts == [60.0, 59.5, 56.5, 54.5]
    assert seen == ["one", "two", "three"]


def test_the_last_failure_is_raised_after_the_attempts_given() -> None:
    clock = Clock()
    failures = [busy(f"failure {n}") for n in range(1, 6)]
    call = Script(*failures)
    seen: list[ProviderFailure] = []
    with pytest.raises(ProviderFailure) as raised:
        call_with_retries(
            call, 1000.0, attempts=3, sleep=clock.sleep, clock=clock, on_failure=seen.append
        )
    assert raised.value is failures[2]
    assert seen == failures[:3]
    assert clock.slept == [0.5, 1.0]
    assert len(call.timeouts) == 3


def test_the_attempts_are_six_unless_told() -> None:
    assert RELAY_PROVIDER_ATTEMPTS == 6
    clock = Clock()
    failures = [busy(f"failure {n}") for n in range(1, 10)]
    call = Script(*failures)
    with pytest.raises(ProviderFailure) as raised:
        call_with_retries(call, 1000.0, sleep=clock.sleep, clock=clock)
    assert raised.value is failures[5]
    assert clock.slept == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert len(call.timeouts) == 6


def test_one_attempt_is_never_retried() -> None:
    clock = Clock()
    first = busy("first")
    call = Script(first, busy("second"))
    with pytest.raises(ProviderFailure) as raised:
        call_with_retries(call, 1000.0, attempts=1, sleep=clock.sleep, clock=clock)
    assert (raised.value, clock.slept, len(call.timeouts)) == (first, [], 1)


def test_a_failure_that_is_not_retryable_is_raised_at_once() -> None:
    clock = Clock()
    refused = ProviderFailure("HTTP 400: bad request", status=400)
    call = Script(refused)
    seen: list[ProviderFailure] = []
    with pytest.raises(ProviderFailure) as raised:
        call_with_retries(call, 1000.0, sleep=clock.sleep, clock=clock, on_failure=seen.append)
    assert (raised.value, seen, clock.slept, len(call.timeouts)) == (refused, [refused], [], 1)


def test_another_error_is_raised_at_once_and_not_seen_as_a_failed_attempt() -> None:
    clock = Clock()
    call = Script(ValueError("a bug"))
    seen: list[ProviderFailure] = []
    with pytest.raises(ValueError, match=r"^a bug$"):
        call_with_retries(call, 1000.0, sleep=clock.sleep, clock=clock, on_failure=seen.append)
    assert (seen, clock.slept, len(call.timeouts)) == ([], [], 1)


def test_what_cannot_be_done_twice_is_not_retried() -> None:
    clock = Clock()
    first = busy("first")
    call = Script(first)
    asked: list[int] = []

    def may_retry() -> bool:
        asked.append(len(call.timeouts))
        return False

    with pytest.raises(ProviderFailure) as raised:
        call_with_retries(call, 1000.0, sleep=clock.sleep, clock=clock, may_retry=may_retry)
    assert (raised.value, clock.slept, len(call.timeouts), asked) == (first, [], 1, [1])


def test_may_retry_is_asked_after_each_failed_attempt() -> None:
    clock = Clock()
    answers = [False, True]  # popped from the end: True, then False
    call = Script(busy("one"), busy("two"), busy("three"))
    with pytest.raises(ProviderFailure, match=r"^two$"):
        call_with_retries(call, 1000.0, sleep=clock.sleep, clock=clock, may_retry=answers.pop)
    assert (clock.slept, len(call.timeouts)) == ([0.5], 2)


def test_a_wait_that_would_reach_the_deadline_is_not_waited() -> None:
    clock = Clock(10.0)
    first = busy("first", retry_after=5.0)
    call = Script(first)
    with pytest.raises(ProviderFailure) as raised:
        call_with_retries(call, 15.0, sleep=clock.sleep, clock=clock)
    assert (raised.value, clock.slept, call.timeouts) == (first, [], [5.0])


def test_a_wait_that_ends_just_before_the_deadline_is_waited() -> None:
    clock = Clock(10.0)
    call = Script(busy("first", retry_after=5.0))
    assert call_with_retries(call, 15.25, sleep=clock.sleep, clock=clock) == "done"
    assert (clock.slept, call.timeouts) == ([5.0], [5.25, 0.25])


def test_the_deadline_past_before_an_attempt_fails_without_calling() -> None:
    clock = Clock(50.0)
    call = Script()
    seen: list[ProviderFailure] = []
    for deadline in (50.0, 49.0):
        with pytest.raises(ProviderFailure) as raised:
            call_with_retries(
                call, deadline, sleep=clock.sleep, clock=clock, on_failure=seen.append
            )
        assert str(raised.value) == "the turn's deadline passed before the model answered"
        assert not raised.value.retryable
    assert (call.timeouts, clock.slept, seen) == ([], [], [])


def test_the_deadline_passing_during_a_wait_ends_the_retries_with_that_failure() -> None:
    clock = Clock()

    def slow_sleep(seconds: float) -> None:
        clock.sleep(seconds + 10.0)  # the process was stopped while it waited

    call = Script(busy("first"))
    with pytest.raises(ProviderFailure, match=r"^the turn's deadline passed before the model"):
        call_with_retries(call, 5.0, sleep=slow_sleep, clock=clock)
    assert call.timeouts == [5.0]


def test_each_retry_is_logged_with_the_failure_and_its_number(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    call = Script(busy("HTTP 503: overloaded"), busy("connection reset"))
    with caplog.at_level(logging.WARNING, logger="orchestrator.relay.retry"):
        call_with_retries(call, 1000.0, sleep=clock.sleep, clock=clock)
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            "orchestrator.relay.retry",
            logging.WARNING,
            "provider call failed (HTTP 503: overloaded); retry 1",
        ),
        (
            "orchestrator.relay.retry",
            logging.WARNING,
            "provider call failed (connection reset); retry 2",
        ),
    ]


def test_the_real_clock_and_sleep_serve_when_none_are_given() -> None:
    import time

    call = Script(busy("now", retry_after=0.0), busy("again", retry_after=0.0))
    assert call_with_retries(call, time.monotonic() + 600.0) == "done"
    assert len(call.timeouts) == 3
    assert all(0 < timeout <= 600.0 for timeout in call.timeouts)
