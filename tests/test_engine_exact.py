"""Exact behaviour of the engine connection (runtime/engine.py): its one line when the
engine does not answer, the probe before a client is made, which faults are retried and
how often, how final errors are mapped; and of the direct image inspect
(runtime/direct.py) against a fake engine on a Unix socket in a temp folder."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from docker.errors import APIError, DockerException, NotFound

from orchestrator.errors import EngineError, EngineUnreachable
from orchestrator.limits import ENGINE_RETRY_ATTEMPTS, ENGINE_RETRY_MAX_WAIT_SECONDS
from orchestrator.runtime import direct, engine
from orchestrator.runtime.direct import DirectFailed, inspect_image, quote_segment

HINT = "start the engine (systemctl start docker), or set DOCKER_HOST to its socket"


class Response:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.reason = "x"
        self.url = "http+docker://localhost/x"


def api_error(status: int | None, explanation: str | None = None) -> APIError:
    response = Response(status) if status is not None else None
    return APIError("boom", response=response, explanation=explanation)  # type: ignore[arg-type]


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    import tenacity

    waits: list[float] = []
    monkeypatch.setattr(tenacity.nap, "time", SimpleNamespace(sleep=waits.append))
    return waits


# the one line


def test_the_endpoint_is_docker_host_or_the_default_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2375")
    assert engine.engine_endpoint() == "DOCKER_HOST=tcp://10.0.0.1:2375"
    monkeypatch.setenv("DOCKER_HOST", "")
    assert engine.engine_endpoint() == "the default socket unix:///var/run/docker.sock"
    monkeypatch.delenv("DOCKER_HOST")
    assert engine.engine_endpoint() == "the default socket unix:///var/run/docker.sock"


@pytest.mark.parametrize(
    ("reason", "words"),
    [
        ("FileNotFoundError(2)", "no such socket"),
        ("[Errno 2] No such file or directory", "no such socket"),
        ("ConnectionRefusedError(111)", "connection refused"),
        ("[Errno 111] Connection refused", "connection refused"),
        ("PermissionError(13)", "permission denied"),
        ("[Errno 13] Permission denied", "permission denied"),
        ("read timed out", "timed out"),
        ("something else\nand more", "something else"),
    ],
)
def test_the_root_cause_is_a_few_words(reason: str, words: str) -> None:
    assert engine._root_cause(reason) == words


def test_the_short_reason_is_the_first_line_cut_to_fit() -> None:
    assert engine._short("  first\nsecond ") == "first"
    assert engine._short(ValueError()) == "ValueError"
    assert engine._short(ValueError("  \n ")) == "ValueError"
    assert engine._short("x" * 199) == "x" * 199
    assert engine._short("x" * 200) == "x" * 197 + "..."
    assert engine._short("y" * 300) == "y" * 197 + "..."


def test_unreachable_names_the_endpoint_and_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/d.sock")
    error = engine.unreachable(ConnectionRefusedError(111, "Connection refused"))
    assert error.message == (
        "Docker engine unreachable at DOCKER_HOST=unix:///run/d.sock: connection refused"
    )
    assert error.hint == HINT


# connect


class FakeProbe:
    made: list[dict[str, Any]] = []
    answer: Any = {"ApiVersion": "1.43"}
    ping_error: BaseException | None = None
    closed = 0

    def __init__(self, **kwargs: Any) -> None:
        FakeProbe.made.append(kwargs)

    def ping(self) -> bool:
        if FakeProbe.ping_error is not None:
            raise FakeProbe.ping_error
        return True

    def version(self, api_version: bool = True) -> Any:
        assert api_version is False
        return FakeProbe.answer

    def close(self) -> None:
        FakeProbe.closed += 1


@pytest.fixture
def fake_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[Any]]:
    import docker

    clients: list[Any] = []
    FakeProbe.made, FakeProbe.answer, FakeProbe.ping_error, FakeProbe.closed = (
        [],
        {"ApiVersion": "1.43"},
        None,
        0,
    )
    monkeypatch.setattr(docker, "APIClient", FakeProbe)
    monkeypatch.setattr(docker, "DockerClient", lambda **kw: clients.append(kw) or "client")
    monkeypatch.setattr(engine, "_env_kwargs", lambda: {"base_url": "unix:///x.sock"})
    sock = tmp_path / "d.sock"
    sock.touch()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    yield clients


def test_connect_probes_with_an_old_api_then_makes_a_client_of_the_engines_version(
    fake_docker: list[Any],
) -> None:
    assert engine.connect(timeout=7) == "client"
    assert FakeProbe.made == [{"version": "1.24", "timeout": 7, "base_url": "unix:///x.sock"}]
    assert FakeProbe.closed == 1
    assert fake_docker == [{"version": "1.43", "timeout": 7, "base_url": "unix:///x.sock"}]


def test_connect_waits_the_default_api_time(fake_docker: list[Any]) -> None:
    engine.connect()
    assert FakeProbe.made[0]["timeout"] == 60
    assert fake_docker[0]["timeout"] == 60


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        (DockerException("Error while fetching server API version: timed out"), "timed out"),
        (OSError("[Errno 111] Connection refused"), "connection refused"),
        (KeyError("ApiVersion"), "'ApiVersion'"),
    ],
)
def test_a_probe_that_fails_is_unreachable_and_closed(
    fake_docker: list[Any], monkeypatch: pytest.MonkeyPatch, fault: BaseException, words: str
) -> None:
    FakeProbe.ping_error = fault
    with pytest.raises(EngineUnreachable) as info:
        engine.connect()
    assert info.value.message.endswith(f": {words}")
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert FakeProbe.closed == 1
    assert fake_docker == []


def test_an_answer_without_a_version_is_unreachable(fake_docker: list[Any]) -> None:
    FakeProbe.answer = {}
    with pytest.raises(EngineUnreachable) as info:
        engine.connect()
    assert info.value.message.endswith(": 'ApiVersion'")
    assert FakeProbe.closed == 1


def test_a_probe_that_cannot_be_made_is_unreachable(
    fake_docker: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import docker

    def refuse(**kwargs: Any) -> None:
        raise DockerException("Invalid bind address format: x")

    monkeypatch.setattr(docker, "APIClient", refuse)
    with pytest.raises(EngineUnreachable) as info:
        engine.connect()
    assert info.value.message.endswith(": Invalid bind address format: x")
    assert info.value.__suppress_context__


def test_a_missing_socket_is_unreachable_before_any_client(
    fake_docker: list[Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/gone.sock")
    with pytest.raises(EngineUnreachable) as info:
        engine.connect()
    assert info.value.message == (
        f"Docker engine unreachable at DOCKER_HOST=unix://{tmp_path}/gone.sock: no such socket"
    )
    assert FakeProbe.made == []


def test_a_tcp_engine_is_probed_without_a_socket_check(
    fake_docker: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.1:2375")
    assert engine.connect() == "client"


def test_with_no_docker_host_the_default_socket_is_checked(
    fake_docker: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCKER_HOST")
    checked: list[str] = []
    monkeypatch.setattr(engine.os.path, "exists", lambda p: checked.append(p) or False)
    with pytest.raises(EngineUnreachable):
        engine.connect()
    assert checked == ["/var/run/docker.sock"]


def test_the_environments_client_settings_are_dockers() -> None:
    from docker.utils import kwargs_from_env

    assert engine._env_kwargs() == dict(kwargs_from_env())
    assert type(engine._env_kwargs()) is dict


# retries


def test_transient_means_5xx_or_a_connection_fault() -> None:
    assert engine.is_transient(api_error(500))
    assert engine.is_transient(api_error(599))
    assert not engine.is_transient(api_error(499))
    assert not engine.is_transient(api_error(None))
    assert engine.is_transient(requests.ConnectionError())
    assert engine.is_transient(requests.Timeout())
    assert engine.is_transient(ConnectionResetError())
    assert engine.is_transient(TimeoutError())
    assert not engine.is_transient(OSError())
    assert not engine.is_transient(RuntimeError())


def test_transient_faults_are_retried_the_default_times_with_growing_waits(
    slept: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def away() -> None:
        calls.append(1)
        raise requests.ConnectionError("connection reset\nby peer")

    with (
        caplog.at_level(logging.WARNING, logger="orchestrator.runtime.engine"),
        pytest.raises(EngineUnreachable) as info,
    ):
        engine.call_engine("list containers", away)
    assert len(calls) == ENGINE_RETRY_ATTEMPTS == 5
    assert slept == [0.25, 0.5, 1.0, 2.0]
    assert [r.getMessage() for r in caplog.records] == [
        f"engine call list containers failed (connection reset); retry {n} of 4"
        for n in range(1, 5)
    ]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 4
    assert info.value.message.endswith(": connection reset")
    assert info.value.__suppress_context__


def test_the_waits_are_capped(slept: list[float]) -> None:
    def away() -> None:
        raise TimeoutError("timed out")

    with pytest.raises(EngineUnreachable):
        engine.call_engine("pull", away, attempts=8)
    assert slept == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert ENGINE_RETRY_MAX_WAIT_SECONDS == 8.0


def test_a_call_that_recovers_returns_its_value(slept: list[float]) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise api_error(502)
        return "ok"

    assert engine.call_engine("inspect", flaky) == "ok"
    assert slept == [0.25]


def test_a_5xx_to_the_end_is_unreachable(slept: list[float]) -> None:
    def busy() -> None:
        raise api_error(503, "overloaded")

    with pytest.raises(EngineUnreachable) as info:
        engine.call_engine("start x", busy, attempts=2)
    assert info.value.message.endswith(
        ': 503 Server Error for http+docker://localhost/x: x ("overloaded")'
    )
    assert info.value.__suppress_context__


def test_a_refusal_is_reported_once_with_its_status(slept: list[float]) -> None:
    calls: list[int] = []

    def refuse() -> None:
        calls.append(1)
        raise api_error(409, "name in use")

    with pytest.raises(EngineError) as info:
        engine.call_engine("create x", refuse)
    assert type(info.value) is EngineError
    assert info.value.message == "engine refused create x: name in use (HTTP 409)"
    assert info.value.__suppress_context__
    assert calls == [1] and slept == []


def test_a_missing_object_is_raised_as_it_is(slept: list[float]) -> None:
    missing = NotFound("no such service")

    def gone() -> None:
        raise missing

    with pytest.raises(NotFound) as info:
        engine.call_engine("inspect x", gone)
    assert info.value is missing


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        (DockerException("Error while fetching server API version"), "Error while fetching"),
        (PermissionError(13, "Permission denied"), "permission denied"),
    ],
)
def test_other_engine_and_os_faults_are_unreachable_at_once(
    slept: list[float], fault: BaseException, words: str
) -> None:
    def broken() -> None:
        raise fault

    with pytest.raises(EngineUnreachable) as info:
        engine.call_engine("ping", broken)
    assert words in info.value.message
    assert info.value.__suppress_context__
    assert slept == []


def test_any_other_error_is_raised_as_it_is(slept: list[float]) -> None:
    def buggy() -> None:
        raise ValueError("bad")

    with pytest.raises(ValueError, match=r"^bad$"):
        engine.call_engine("ping", buggy)
    assert slept == []


def test_the_explanation_falls_back_to_the_error_and_the_status_is_shown_when_known() -> None:
    assert engine._explain(api_error(409, "in use")) == "in use (HTTP 409)"
    assert engine._explain(ValueError("plain")) == "plain"
    assert engine._explain(api_error(None, "odd")) == "odd"
    error = api_error(404, "")
    assert engine._explain(error) == f"{error} (HTTP 404)"


# the direct inspect


class FakeEngine:
    """An engine on a Unix socket in a temp folder: it reads each request (up to the blank
    line) and sends the next answer, then closes."""

    def __init__(self, path: Path, answers: list[bytes]) -> None:
        self.path = path
        self.answers = answers
        self.requests: list[bytes] = []
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(len(answers) or 1)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        for answer in self.answers:
            conn, _ = self.server.accept()
            with conn:
                data = b""
                while not data.endswith(b"\r\n\r\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)
                conn.sendall(answer)

    def close(self) -> None:
        self.thread.join(10)
        self.server.close()


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    made: list[FakeEngine] = []

    def start(*answers: bytes) -> FakeEngine:
        path = tmp_path / f"engine{len(made)}.sock"
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        made.append(FakeEngine(path, list(answers)))
        return made[-1]

    yield start
    for one in made:
        one.close()


def test_the_engine_host_is_docker_host_or_the_default_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/d.sock")
    assert direct.engine_host() == "unix:///run/d.sock"
    monkeypatch.setenv("DOCKER_HOST", "")
    assert direct.engine_host() == "unix:///var/run/docker.sock"
    monkeypatch.delenv("DOCKER_HOST")
    assert direct.engine_host() == "unix:///var/run/docker.sock"


def test_a_segment_keeps_only_the_unreserved_characters() -> None:
    unreserved = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
    assert quote_segment(unreserved) == unreserved
    assert quote_segment("reg:5000/my/img:1 é?#%") == (
        "reg%3A5000%2Fmy%2Fimg%3A1%20%C3%A9%3F%23%25"
    )
    assert quote_segment("\n") == "%0A"
    assert quote_segment("") == ""


def test_the_inspect_sends_one_http10_get_and_reads_the_image(fake_engine: Any) -> None:
    image = {"Id": "sha256:abc", "RepoTags": ["reg:5000/a:1"]}
    served = fake_engine(
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + json.dumps(image).encode()
    )
    assert inspect_image("reg:5000/a:1") == image
    served.close()
    assert served.requests == [
        b"GET /images/reg%3A5000%2Fa%3A1/json HTTP/1.0\r\nHost: docker\r\n\r\n"
    ]


def test_a_missing_image_is_none(fake_engine: Any) -> None:
    fake_engine(b'HTTP/1.1 404 Not Found\r\n\r\n{"message": "No such image"}')
    assert inspect_image("gone:1") is None


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"HTTP/1.0 500 Oops\r\n\r\n{}", "HTTP 500"),
        (b"HTTP/1.0 \xff04 Odd\r\n\r\n{}", "HTTP \ufffd04"),
        (b"HTTP/1.0 201 Created\r\n\r\n{}", "HTTP 201"),
        (b"garbage", "not an HTTP answer"),
        (b"", "not an HTTP answer"),
        (b"HTTP/1.0\r\n\r\n{}", "not an HTTP answer"),
        (b"XHTTP/1.0 200 OK\r\n\r\n{}", "not an HTTP answer"),
        (b"HTTP/1.0 200 OK\r\n\r\n[1, 2]", "not an image"),
        (b'HTTP/1.0 200 OK\r\n\r\n"text"', "not an image"),
        (b'HTTP/1.0 200 OK\r\n\r\n{"Id": ', "Expecting value: line 1 column 8 (char 7)"),
        (
            b"HTTP/1.0 200 OK\r\n\r\n\xff",
            "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
        ),
    ],
)
def test_an_answer_that_is_not_an_image_fails_with_its_reason(
    fake_engine: Any, answer: bytes, error: str
) -> None:
    fake_engine(answer)
    with pytest.raises(DirectFailed) as info:
        inspect_image("x:1")
    assert str(info.value) == error
    assert info.value.__cause__ is None


def test_the_status_is_read_from_the_first_line_only(fake_engine: Any) -> None:
    fake_engine(b'HTTP/1.0 200 OK\r\nX-Status: 404 gone\r\n\r\n{"Id": "a"}')
    assert inspect_image("x:1") == {"Id": "a"}


def test_a_status_line_with_no_reason_is_enough(fake_engine: Any) -> None:
    fake_engine(b'HTTP/1.0 200\r\n\r\n{"Id": "a"}')
    assert inspect_image("x:1") == {"Id": "a"}


def test_the_status_line_is_split_at_spaces_only(fake_engine: Any) -> None:
    fake_engine(b'HTTP/1.0\t200 OK\r\n\r\n{"Id": "a"}')
    with pytest.raises(DirectFailed) as info:
        inspect_image("x:1")
    assert str(info.value) == "HTTP OK"


def test_a_status_line_of_one_word_is_not_http_whatever_the_headers_say(
    fake_engine: Any,
) -> None:
    fake_engine(b"HTTP/1.0\r\nX: 1\r\nY: 2\r\n\r\n{}")
    with pytest.raises(DirectFailed) as info:
        inspect_image("x:1")
    assert str(info.value) == "not an HTTP answer"


def test_the_body_starts_after_the_first_blank_line(fake_engine: Any) -> None:
    fake_engine(b'HTTP/1.0 200 OK\r\n\r\n{"Id":\r\n\r\n "a"}')
    assert inspect_image("x:1") == {"Id": "a"}


def test_an_answer_up_to_the_bound_is_read_and_one_byte_more_is_too_large(
    fake_engine: Any,
) -> None:
    head = b"HTTP/1.0 200 OK\r\n\r\n"
    frame = len(head) + len(b'{"Id": ""}')
    fits = head + json.dumps({"Id": "a" * (direct.INSPECT_ANSWER_MAX_BYTES - frame)}).encode()
    assert len(fits) == direct.INSPECT_ANSWER_MAX_BYTES == 4 * 1024 * 1024
    fake_engine(fits)
    assert inspect_image("x:1") == {"Id": "a" * (direct.INSPECT_ANSWER_MAX_BYTES - frame)}
    fake_engine(fits + b" ")
    with pytest.raises(DirectFailed) as info:
        inspect_image("x:1")
    assert str(info.value) == "the answer is too large"


def test_an_engine_not_on_a_unix_socket_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    with pytest.raises(DirectFailed) as info:
        inspect_image("x:1")
    assert str(info.value) == "not a Unix socket"


def test_a_socket_nobody_listens_on_fails_with_the_os_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/gone.sock")
    with pytest.raises(DirectFailed) as info:
        inspect_image("x:1")
    assert str(info.value) == "[Errno 2] No such file or directory"
    assert info.value.__suppress_context__


def test_an_engine_that_does_not_answer_in_time_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "mute.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    try:
        with pytest.raises(DirectFailed) as info:
            inspect_image("x:1", timeout=0.05)
    finally:
        server.close()
    assert str(info.value) == "timed out"


def test_the_inspect_waits_ten_seconds_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float | None] = []

    class Sock:
        def __init__(self, *args: Any) -> None:
            pass

        def __enter__(self) -> Sock:
            return self

        def __exit__(self, *args: Any) -> None:
            return None

        def settimeout(self, value: float | None) -> None:
            waits.append(value)

        def connect(self, path: str) -> None:
            raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(direct.socket, "socket", Sock)
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/d.sock")
    with pytest.raises(DirectFailed, match=r"^\[Errno 111\] Connection refused$"):
        inspect_image("x:1")
    with pytest.raises(DirectFailed):
        inspect_image("x:1", timeout=2.5)
    with pytest.raises(EngineUnreachable):
        engine.inspect_image_directly("x:1")
    with pytest.raises(EngineUnreachable):
        engine.inspect_image_directly("x:1", timeout=4.0)
    assert waits == [10.0, 2.5, 10.0, 4.0]


def test_the_engines_direct_inspect_maps_a_failure_to_unreachable(
    fake_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = {"Id": "sha256:abc"}
    fake_engine(b"HTTP/1.0 200 OK\r\n\r\n" + json.dumps(image).encode())
    assert engine.inspect_image_directly("a:1", timeout=5) == image
    served = fake_engine(b"HTTP/1.0 502 Bad\r\n\r\n")
    with pytest.raises(EngineUnreachable) as info:
        engine.inspect_image_directly("a:1")
    assert info.value.message == (
        f"Docker engine unreachable at DOCKER_HOST=unix://{served.path}: HTTP 502"
    )
    assert info.value.hint == HINT
    assert info.value.__suppress_context__
