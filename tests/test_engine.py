"""Engine calls: transient faults retried with backoff, refusals reported once."""

from __future__ import annotations

import pytest
import requests
from docker.errors import APIError

from orchestrator.errors import EngineError, EngineUnreachable
from orchestrator.runtime import engine
from orchestrator.runtime.engine import call_engine, is_transient


class Response:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.reason = "x"
        self.url = "http+docker://localhost/x"


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(engine, "ENGINE_RETRY_MAX_WAIT_SECONDS", 0)
    import tenacity

    monkeypatch.setattr(tenacity.nap, "sleep", lambda _: None)


def test_transient_faults_are_retried_and_logged(caplog) -> None:  # type: ignore[no-untyped-def]
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise requests.ConnectionError("connection reset")
        return "ok"

    assert call_engine("list containers", flaky) == "ok"
    assert len(calls) == 3
    retries = [r.message for r in caplog.records if "retry" in r.message]
    assert len(retries) == 2 and "list containers" in retries[0]


def test_server_errors_are_retried_then_reported() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise APIError("boom", response=Response(503))  # type: ignore[arg-type]

    with pytest.raises(EngineUnreachable):
        call_engine("start x", broken, attempts=3)
    assert len(calls) == 3


def test_client_errors_are_not_retried() -> None:
    calls = []

    def conflict() -> None:
        calls.append(1)
        raise APIError("Conflict", response=Response(409), explanation="name in use")  # type: ignore[arg-type]

    with pytest.raises(EngineError) as info:
        call_engine("create x", conflict)
    assert len(calls) == 1
    assert info.value.message == "engine refused create x: name in use (HTTP 409)"


def test_is_transient() -> None:
    assert is_transient(requests.Timeout())
    assert is_transient(APIError("x", response=Response(500)))  # type: ignore[arg-type]
    assert not is_transient(APIError("x", response=Response(404)))  # type: ignore[arg-type]
    assert not is_transient(ValueError())
