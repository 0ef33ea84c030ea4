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


def test_the_direct_inspect_reads_the_engines_answer_and_refuses_what_is_not_one(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """inspect_image_directly speaks HTTP/1.0 on the engine's Unix socket: a 200 with the
    image, a 404 as None, anything else unreachable (the caller takes the SDK's path)."""
    import json
    import socket
    import threading

    from orchestrator.errors import EngineUnreachable
    from orchestrator.runtime.engine import inspect_image_directly

    answers = [
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n"
        + json.dumps({"Id": "sha256:abc", "RepoTags": ["a:1"]}).encode(),
        b"HTTP/1.0 404 Not Found\r\n\r\n{}",
        b"HTTP/1.0 500 Oops\r\n\r\n{}",
        b"garbage",
    ]
    requests: list[bytes] = []
    path = tmp_path / "engine.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)

    def serve() -> None:
        for answer in answers:
            conn, _ = server.accept()
            with conn:
                requests.append(conn.recv(4096))
                conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    try:
        assert inspect_image_directly("my/img:1") == {"Id": "sha256:abc", "RepoTags": ["a:1"]}
        assert inspect_image_directly("gone:1") is None
        with pytest.raises(EngineUnreachable, match="HTTP 500"):
            inspect_image_directly("x:1")
        with pytest.raises(EngineUnreachable, match="not an HTTP answer"):
            inspect_image_directly("x:1")
    finally:
        thread.join(5)
        server.close()
    assert requests[0].startswith(b"GET /images/my%2Fimg%3A1/json HTTP/1.0\r\n")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    with pytest.raises(EngineUnreachable, match="not a Unix socket"):
        inspect_image_directly("x:1")
