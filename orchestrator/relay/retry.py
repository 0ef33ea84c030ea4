"""Retrying a provider's transient failures within a turn's deadline.

408, 409, 429 and 5xx answers, connection failures and broken streams are retried; the
wait is the server's Retry-After when it gives one, else exponential from 0.5 s, never
past the turn's deadline. Everything else is reported at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from orchestrator.limits import RELAY_PROVIDER_ATTEMPTS, RELAY_RETRY_MAX_WAIT_SECONDS
from orchestrator.relay.providers.base import ProviderFailure

log = logging.getLogger(__name__)
T = TypeVar("T")


def retry_wait(failure: ProviderFailure, attempt: int) -> float:
    """Seconds to wait after ``attempt`` (1-based) failed with ``failure``."""
    if failure.retry_after is not None:
        return min(max(failure.retry_after, 0.0), RELAY_RETRY_MAX_WAIT_SECONDS)
    return float(min(0.5 * 2 ** (attempt - 1), RELAY_RETRY_MAX_WAIT_SECONDS))


def call_with_retries(
    call: Callable[[float], T],
    deadline: float,
    *,
    attempts: int = RELAY_PROVIDER_ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    may_retry: Callable[[], bool] = lambda: True,
    on_failure: Callable[[ProviderFailure], None] = lambda failure: None,
) -> T:
    """``call(timeout)`` until it succeeds, fails for good, or the deadline comes, at
    most ``attempts`` times; ``may_retry()`` false stops it too (what a failed attempt
    did cannot be done twice). ``on_failure`` sees each failed attempt.

    ``timeout`` is what is left before ``deadline`` (at most an hour). Raises the last
    ProviderFailure.
    """
    import tenacity

    def wait(state: tenacity.RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome else None
        assert isinstance(failure, ProviderFailure)
        return retry_wait(failure, state.attempt_number)

    def give_up(state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= attempts or not may_retry():
            return True
        failure = state.outcome.exception() if state.outcome else None
        assert isinstance(failure, ProviderFailure)
        return clock() + retry_wait(failure, state.attempt_number) >= deadline

    def before_sleep(state: tenacity.RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        log.warning("provider call failed (%s); retry %d", failure, state.attempt_number)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(
            lambda exc: isinstance(exc, ProviderFailure) and exc.retryable
        ),
        wait=wait,
        stop=give_up,
        sleep=sleep,
        before_sleep=before_sleep,
        reraise=True,
    )

    def attempt() -> T:
        left = deadline - clock()
        if left <= 0:
            raise ProviderFailure("the turn's deadline passed before the model answered")
        try:
            return call(min(left, 3600.0))
        except ProviderFailure as failure:
            on_failure(failure)
            raise

    return retrying(attempt)
