"""Exact behaviour of a whole search (web/search.py ``search`` and ``_get``), against a
backend faked with httpx's MockTransport that records each request: the request on the
wire (URL, query parameters, headers, the timeout given), how many results are asked
for and kept, every refusal made before a request (query, key) with its whole message
and hint, the key registered for redaction, what a transport failure is reported as, the
client made for the call (its settings, closed after) or the one given (left open), and
the whole exchange's deadline on a stepped clock."""

from __future__ import annotations

import json
import socket
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from orchestrator.config.websearch import SearchBackendDef
from orchestrator.limits import WEB_SEARCH_QUERY_MAX_CHARS
from orchestrator.redact import redact
from orchestrator.secrets import SecretRef
from orchestrator.web import search as module
from orchestrator.web.search import SearchFailed, SearchResult, search

SEARXNG = SearchBackendDef("local", "searxng", "http://127.0.0.1:8888", timeout_seconds=2.5)
BRAVE = SearchBackendDef(
    "brave",
    "brave",
    "https://api.search.brave.com/res/v1/web/search",
    key=SecretRef(env="BRAVE_KEY"),
    max_results=5,
)
KEY = "token-0123456789abcdef"


def results(count: int) -> list[dict[str, str]]:
    return [
        {"title": f"t{n}", "url": f"https://e.org/{n}", "content": f"c{n}", "description": f"d{n}"}
        for n in range(1, count + 1)
    ]


def searxng_body(count: int = 3) -> bytes:
    return json.dumps({"results": results(count)}).encode()


def brave_body(count: int = 3) -> bytes:
    return json.dumps({"type": "search", "web": {"results": results(count)}}).encode()


class Fake:
    """The backend: records each request and answers with ``answer(request)``."""

    def __init__(self, answer: Callable[[httpx.Request], httpx.Response]) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)


def reply(status: int, body: bytes = b"", **headers: str) -> httpx.Response:
    """An answer streamed as it would come from the wire (not read in advance)."""
    return httpx.Response(status, headers=headers, content=iter([body]))


def ok(body: bytes) -> Callable[[httpx.Request], httpx.Response]:
    return lambda request: reply(200, body)


def run(
    backend: SearchBackendDef,
    query: str,
    key: str | None = None,
    answer: Callable[[httpx.Request], httpx.Response] | None = None,
    **kw: Any,
) -> tuple[list[SearchResult], Fake]:
    fake = Fake(answer or ok(searxng_body() if backend.kind == "searxng" else brave_body()))
    with httpx.Client(transport=httpx.MockTransport(fake)) as client:
        found = search(backend, query, key, client=client, **kw)
    return found, fake


def fails(
    backend: SearchBackendDef,
    query: str,
    key: str | None = None,
    answer: Callable[[httpx.Request], httpx.Response] | None = None,
    **kw: Any,
) -> tuple[str, str | None, Fake]:
    fake = Fake(answer or ok(b"{}"))
    with (
        httpx.Client(transport=httpx.MockTransport(fake)) as client,
        pytest.raises(SearchFailed) as caught,
    ):
        search(backend, query, key, client=client, **kw)
    # nothing of the transport's or the parser's own words is chained to it
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None or caught.value.__suppress_context__
    return str(caught.value), caught.value.hint, fake


# the request on the wire


def test_searxng_is_asked_for_json_with_the_query_made_one_line() -> None:
    found, fake = run(SEARXNG, "  rust \t async\n  runtimes ")
    [request] = fake.requests
    assert request.method == "GET"
    assert str(request.url) == "http://127.0.0.1:8888/search?q=rust+async+runtimes&format=json"
    assert request.headers["Accept"] == "application/json"
    assert request.headers["Accept-Encoding"] == "gzip"
    assert "Authorization" not in request.headers
    assert "X-Subscription-Token" not in request.headers
    assert request.extensions["timeout"] == {"connect": 2.5, "read": 2.5, "write": 2.5, "pool": 2.5}
    assert found == [
        SearchResult("t1", "https://e.org/1", "c1"),
        SearchResult("t2", "https://e.org/2", "c2"),
        SearchResult("t3", "https://e.org/3", "c3"),
    ]


def test_a_searxng_key_is_sent_as_a_bearer_token() -> None:
    _, fake = run(SEARXNG, "q", KEY)
    [request] = fake.requests
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert "X-Subscription-Token" not in request.headers


def test_brave_is_asked_with_its_token_and_the_count_of_results() -> None:
    found, fake = run(BRAVE, "a  b", KEY)
    [request] = fake.requests
    assert str(request.url) == "https://api.search.brave.com/res/v1/web/search?q=a+b&count=5"
    assert request.headers["X-Subscription-Token"] == KEY
    assert request.headers["Accept"] == "application/json"
    assert request.headers["Accept-Encoding"] == "gzip"
    assert "Authorization" not in request.headers
    assert request.extensions["timeout"] == {"connect": 10, "read": 10, "write": 10, "pool": 10}
    assert found == [
        SearchResult("t1", "https://e.org/1", "d1"),
        SearchResult("t2", "https://e.org/2", "d2"),
        SearchResult("t3", "https://e.org/3", "d3"),
    ]


@pytest.mark.parametrize(
    ("max_results", "count"), [(None, 5), (3, 3), (5, 5), (9, 5), (1, 1), (0, 1), (-4, 1)]
)
def test_brave_is_asked_for_as_many_results_as_kept_and_never_more_than_its_own(
    max_results: int | None, count: int
) -> None:
    found, fake = run(BRAVE, "q", KEY, ok(brave_body(7)), max_results=max_results)
    assert fake.requests[0].url.params["count"] == str(count)
    assert [result.url for result in found] == [f"https://e.org/{n}" for n in range(1, count + 1)]


@pytest.mark.parametrize(("max_results", "count"), [(None, 8), (2, 2), (20, 8), (0, 1)])
def test_searxng_results_are_cut_to_the_count(max_results: int | None, count: int) -> None:
    found, fake = run(SEARXNG, "q", None, ok(searxng_body(12)), max_results=max_results)
    assert dict(fake.requests[0].url.params) == {"q": "q", "format": "json"}
    assert [result.title for result in found] == [f"t{n}" for n in range(1, count + 1)]


# refusals before any request


def test_an_empty_query_is_refused() -> None:
    for query in ("", " \t\n "):
        message, hint, fake = fails(SEARXNG, query)
        assert (message, hint) == ("web search backend 'local': the query is empty", None)
        assert fake.requests == []


def test_a_query_of_the_longest_length_is_asked_and_one_more_character_is_refused() -> None:
    longest = "a" * WEB_SEARCH_QUERY_MAX_CHARS
    _, fake = run(SEARXNG, f" {longest} ")
    assert fake.requests[0].url.params["q"] == longest
    message, hint, fake = fails(SEARXNG, longest + "b")
    assert (message, hint) == (
        f"web search backend 'local': the query is {WEB_SEARCH_QUERY_MAX_CHARS + 1} "
        f"characters; at most {WEB_SEARCH_QUERY_MAX_CHARS} allowed",
        None,
    )
    assert fake.requests == []


def test_a_query_with_a_control_character_is_refused() -> None:
    message, hint, fake = fails(BRAVE, "a\x00b", KEY)
    assert (message, hint) == (
        "web search backend 'brave': the query contains the control character U+0000",
        None,
    )
    assert fake.requests == []


KEY_REFUSED = (
    "web search backend 'brave': its key holds characters an HTTP header cannot carry "
    "(spaces, line breaks or non-ASCII)"
)


@pytest.mark.parametrize("key", ["", "a b", "ab\n", "clé-0123456789", "a\x7fb", "!" * 4097])
def test_a_key_a_header_cannot_carry_is_refused_naming_where_it_comes_from(key: str) -> None:
    message, hint, fake = fails(BRAVE, "q", key)
    assert (message, hint) == (KEY_REFUSED, "check where env BRAVE_KEY comes from")
    assert fake.requests == []


def test_a_key_of_any_visible_ascii_up_to_4096_characters_is_sent() -> None:
    for key in ("!" * 4096, "~" * 9, "x"):
        _, fake = run(BRAVE, "q", key)
        assert fake.requests[0].headers["X-Subscription-Token"] == key


def test_the_key_is_registered_for_redaction_before_the_search() -> None:
    key = f"redact-me-{uuid.uuid4().hex}"  # new to this process: not registered yet
    assert redact(f"said {key}.") == f"said {key}."
    message, _, _ = fails(SEARXNG, "q", key, lambda request: reply(500))
    assert message == "web search backend 'local': the backend failed (HTTP 500)"
    assert redact(f"said {key}.") == "said [redacted]."


def test_brave_without_a_key_is_refused() -> None:
    message, hint, fake = fails(BRAVE, "q", None)
    assert (message, hint) == (
        "web search backend 'brave': Brave needs a key (its subscription token)",
        "set key_env or key_secret for it in orchestrator.yaml",
    )
    assert fake.requests == []


def test_a_refusal_of_the_search_says_whether_a_key_was_sent() -> None:
    refuse = lambda request: reply(401)  # noqa: E731
    message, _, _ = fails(SEARXNG, "q", KEY, refuse)
    assert message == "web search backend 'local': the backend refused the key (HTTP 401)"
    message, _, _ = fails(SEARXNG, "q", None, refuse)
    assert message == (
        "web search backend 'local': the backend refused the search (HTTP 401); it may need a key"
    )


# the answer


@pytest.mark.parametrize("body", [b"not json", b"", b"[" * 100_000, b"\xff{}"])
def test_an_answer_that_is_not_json_is_named(body: bytes) -> None:
    message, hint, _ = fails(SEARXNG, "q", None, ok(body))
    assert (message, hint) == ("web search backend 'local': the answer is not JSON", None)


def test_each_kind_reads_its_own_shape() -> None:
    message, _, _ = fails(BRAVE, "q", KEY, ok(searxng_body()))
    assert message == (
        "web search backend 'brave': the answer is not a Brave web search answer "
        "(its type is not 'search')"
    )
    message, _, _ = fails(SEARXNG, "q", None, ok(brave_body()))
    assert message == (
        "web search backend 'local': the answer is not SearXNG's JSON (it has no 'results' list)"
    )


# the exchange


def test_a_redirect_is_not_followed() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/search":
            return reply(302, Location="http://127.0.0.1:8888/elsewhere")
        return reply(200, searxng_body())

    redirect = (
        "web search backend 'local': answered with a redirect (HTTP 302) instead of results",
        "give the backend's url as it answers, without redirects",
    )
    message, hint, fake = fails(SEARXNG, "q", None, answer)
    assert ((message, hint), len(fake.requests)) == (redirect, 1)
    # nor by a client given that follows them by default
    fake = Fake(answer)
    with (
        httpx.Client(transport=httpx.MockTransport(fake), follow_redirects=True) as client,
        pytest.raises(SearchFailed) as caught,
    ):
        search(SEARXNG, "q", None, client=client)
    assert ((str(caught.value), caught.value.hint), len(fake.requests)) == (redirect, 1)


def raising(exc: Exception) -> Callable[[httpx.Request], httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        raise exc

    return answer


@pytest.mark.parametrize(
    ("backend", "seconds"),
    [(SEARXNG, "2.5"), (SearchBackendDef("s", "searxng", "http://h", timeout_seconds=60), "60")],
)
def test_a_timeout_names_the_backends_timeout(backend: SearchBackendDef, seconds: str) -> None:
    for exc in (httpx.ReadTimeout("r"), httpx.ConnectTimeout("c"), httpx.PoolTimeout("p")):
        message, hint, _ = fails(backend, "q", None, raising(exc))
        assert (message, hint) == (
            f"web search backend {backend.name!r}: no answer within {seconds} s",
            None,
        )


def test_a_backend_not_reached_is_named_with_its_url() -> None:
    backend = SearchBackendDef("s", "searxng", "http://127.0.0.1:9/searx/")
    message, hint, _ = fails(backend, "q", None, raising(httpx.ConnectError("refused")))
    assert (message, hint) == (
        "web search backend 's': could not connect to it",
        "is http://127.0.0.1:9/searx/ up and reachable?",
    )


def test_another_transport_failure_is_named_by_its_kind_only() -> None:
    message, hint, _ = fails(SEARXNG, "q", None, raising(httpx.RemoteProtocolError("secret")))
    assert (message, hint) == (
        "web search backend 'local': the request failed (RemoteProtocolError)",
        None,
    )

    def broken(request: httpx.Request) -> httpx.Response:
        def body() -> Any:
            yield b'{"results": '
            raise httpx.ReadError("reset")

        return httpx.Response(200, content=body())

    message, hint, _ = fails(SEARXNG, "q", None, broken)
    assert (message, hint) == ("web search backend 'local': the request failed (ReadError)", None)


def test_a_client_of_the_calls_own_is_made_for_the_backend_and_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[dict[str, Any]] = []
    closed: list[bool] = []
    fake = Fake(ok(searxng_body(1)))

    class Recording(httpx.Client):
        def __init__(self, **kw: Any) -> None:
            made.append(kw)
            super().__init__(transport=httpx.MockTransport(fake), **kw)

        def close(self) -> None:
            closed.append(True)
            super().close()

    monkeypatch.setattr(module.httpx, "Client", Recording)
    assert search(SEARXNG, "q", None) == [SearchResult("t1", "https://e.org/1", "c1")]
    assert made == [{"timeout": 2.5, "follow_redirects": False}]
    assert closed == [True]
    assert len(fake.requests) == 1
    made.clear()
    closed.clear()
    fake.answer = raising(httpx.ConnectError("no"))
    with pytest.raises(SearchFailed):
        search(SEARXNG, "q", None)
    assert closed == [True]


def test_a_client_given_is_used_and_left_open() -> None:
    fake = Fake(ok(searxng_body(1)))
    client = httpx.Client(transport=httpx.MockTransport(fake))
    assert search(SEARXNG, "q", None, client=client) == [
        SearchResult("t1", "https://e.org/1", "c1")
    ]
    assert not client.is_closed and len(fake.requests) == 1
    client.close()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.mark.parametrize(("later", "kept"), [(102.5, True), (102.6, False)])
def test_the_deadline_is_the_backends_timeout_from_the_start_of_the_exchange(
    monkeypatch: pytest.MonkeyPatch, later: float, kept: bool
) -> None:
    clock = Clock(100.0)
    monkeypatch.setattr(module, "time", clock)

    def answer(request: httpx.Request) -> httpx.Response:
        clock.now = later
        return reply(200, searxng_body(1))

    if kept:
        found, _ = run(SEARXNG, "q", None, answer)
        assert found == [SearchResult("t1", "https://e.org/1", "c1")]
    else:
        message, hint, _ = fails(SEARXNG, "q", None, answer)
        assert (message, hint) == ("web search backend 'local': no whole answer within 2.5 s", None)


def test_a_broken_compression_is_named() -> None:
    packed = zlib.compress(searxng_body(1))

    def answer(request: httpx.Request) -> httpx.Response:
        return reply(200, packed[:2] + b"\xff" * 20, **{"Content-Encoding": "deflate"})

    message, hint, _ = fails(SEARXNG, "q", None, answer)
    assert (message, hint) == (
        "web search backend 'local': the answer's compression is broken",
        None,
    )


# the request as it is written on the wire


class Wire:
    """A backend on loopback that answers one request with one SearXNG result, and
    keeps the request line and header lines it read, as written."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.read: list[bytes] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            self.read.append(data.split(b"\r\n\r\n")[0])
            body = searxng_body(1)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
            )

    def written(self) -> tuple[str, list[str]]:
        self.thread.join(10)
        first, *lines = self.read[0].decode("ascii").split("\r\n")
        return first, lines


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[Wire]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("all_proxy", raising=False)
    backend = Wire()
    yield backend
    backend.server.close()


OURS = ("accept", "accept-encoding", "authorization", "x-subscription-token")


def test_searxng_headers_are_written_as_named(wire: Wire) -> None:
    backend = SearchBackendDef("s", "searxng", f"http://127.0.0.1:{wire.port}/searx")
    assert search(backend, "a b", KEY) == [SearchResult("t1", "https://e.org/1", "c1")]
    first, lines = wire.written()
    assert first == "GET /searx/search?q=a+b&format=json HTTP/1.1"
    assert [line for line in lines if line.split(":")[0].lower() in OURS] == [
        "Accept: application/json",
        "Accept-Encoding: gzip",
        f"Authorization: Bearer {KEY}",
    ]


def test_brave_headers_are_written_as_named(wire: Wire) -> None:
    backend = SearchBackendDef("b", "brave", f"http://127.0.0.1:{wire.port}/res/v1/web")
    # the fake answers in SearXNG's shape: what was written is all this test reads
    with pytest.raises(SearchFailed):
        search(backend, "q", KEY, max_results=2)
    first, lines = wire.written()
    assert first == "GET /res/v1/web?q=q&count=2 HTTP/1.1"
    assert [line for line in lines if line.split(":")[0].lower() in OURS] == [
        "Accept: application/json",
        "Accept-Encoding: gzip",
        f"X-Subscription-Token: {KEY}",
    ]
