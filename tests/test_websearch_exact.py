"""Exact behaviour of the web search client's parts (web/search.py), each driven
directly: how a backend's status is told, how an answer is read within its cap (length,
encodings, the deadline on a stepped clock, the room given to each decompression), and
how results are cleaned."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import httpx
import pytest

from orchestrator.config.websearch import SearchBackendDef
from orchestrator.limits import WEB_SEARCH_RESPONSE_MAX_BYTES as CAP
from orchestrator.limits import WEB_SEARCH_URL_MAX_CHARS
from orchestrator.web import search
from orchestrator.web.search import (
    SearchFailed,
    _check_status,
    _clean,
    _read_capped,
    _result_url,
    _searxng_results,
)

SEARXNG = SearchBackendDef("local", "searxng", "http://127.0.0.1:8888")
BRAVE = SearchBackendDef("brave", "brave", "https://api.search.brave.com/res/v1/web/search")


def status(backend: SearchBackendDef, code: int, keyed: bool = False, **headers: str) -> Any:
    """What _check_status says of ``code``: None, or the refusal as (message, hint)."""
    try:
        _check_status(backend, "web search 'x'", httpx.Response(code, headers=headers), keyed)
    except SearchFailed as exc:
        return str(exc), exc.hint
    return None


def test_every_2xx_status_is_an_answer_and_3xx_a_redirect() -> None:
    assert status(BRAVE, 200) is None and status(BRAVE, 299) is None
    redirect = "give the backend's url as it answers, without redirects"
    for code in (300, 399):
        assert status(BRAVE, code) == (
            f"web search 'x': answered with a redirect (HTTP {code}) instead of results",
            redirect,
        )
    assert status(BRAVE, 400) == ("web search 'x': the backend refused the search (HTTP 400)", None)


def test_a_refusal_says_whether_the_key_was_refused_and_searxng_why() -> None:
    why = (
        "a SearXNG instance answers 403 when its settings.yml does not enable the json "
        "format (search.formats: [html, json])"
    )
    assert status(SEARXNG, 403, keyed=True) == (
        "web search 'x': the backend refused the key (HTTP 403)",
        why,
    )
    assert status(SEARXNG, 401) == (
        "web search 'x': the backend refused the search (HTTP 401); it may need a key",
        why,
    )
    assert status(BRAVE, 401, keyed=True) == (
        "web search 'x': the backend refused the key (HTTP 401)",
        None,
    )


def test_a_rate_limit_says_how_long_to_wait_when_the_backend_says_it_in_seconds() -> None:
    limited = "web search 'x': rate limited (HTTP 429)"
    assert status(BRAVE, 429, **{"Retry-After": " 7 "}) == (f"{limited}; it asks to wait 7 s", None)
    assert status(BRAVE, 429, **{"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}) == (
        limited,
        None,
    )
    assert status(BRAVE, 429) == (limited, None)
    assert status(BRAVE, 500) == ("web search 'x': the backend failed (HTTP 500)", None)


def answer(*chunks: bytes, **headers: str) -> httpx.Response:
    return httpx.Response(200, headers=headers, content=iter(chunks))


def read(response: httpx.Response, deadline: float = float("inf")) -> bytes:
    return _read_capped("web search 'x'", response, deadline, 10)


def too_large(response: httpx.Response) -> str:
    with pytest.raises(SearchFailed) as caught:
        read(response)
    return str(caught.value)


LARGER = f"web search 'x': the answer is larger than {CAP // 1024} KiB"


def test_a_length_over_the_cap_is_refused_before_reading_and_one_at_the_cap_is_read() -> None:
    assert too_large(answer(b"{}", **{"Content-Length": str(CAP + 1)})) == LARGER
    unencoded = {"Content-Length": str(CAP + 1), "Content-Encoding": ""}
    assert too_large(answer(b"{}", **unencoded)) == LARGER
    named = {"Content-Length": str(CAP + 1), "Content-Encoding": "Identity"}
    assert too_large(answer(b"{}", **named)) == LARGER
    assert read(answer(b"{}", **{"Content-Length": str(CAP)})) == b"{}"
    # a compressed answer's length is of what came, not of what it decodes to
    packed = gzip.compress(b"{}")
    assert read(answer(packed, **{"Content-Length": str(CAP + 1), "Content-Encoding": "gzip"}))
    assert read(answer(b"ab", b"cd", **{"Content-Encoding": ""})) == b"abcd"


def test_an_answer_of_exactly_the_cap_is_read_and_one_byte_more_is_not() -> None:
    body = b"x" * CAP
    assert read(answer(body[: CAP // 2], body[CAP // 2 :])) == body
    assert too_large(answer(body, b"x")) == LARGER
    packed = gzip.compress(body)
    assert read(answer(packed[:100], packed[100:], **{"Content-Encoding": "gzip"})) == body
    assert too_large(answer(gzip.compress(body + b"x"), **{"Content-Encoding": "gzip"})) == LARGER
    assert read(answer(zlib.compress(b"[1]"), **{"Content-Encoding": "deflate"})) == b"[1]"


def test_an_encoding_not_asked_for_is_named() -> None:
    with pytest.raises(SearchFailed) as caught:
        read(answer(b"{}", **{"Content-Encoding": "br"}))
    assert (
        str(caught.value) == "web search 'x': the answer came in an encoding not asked for ('br')"
    )


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def test_a_piece_read_at_the_deadline_is_kept_and_one_after_it_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search, "time", Clock(50.0))
    assert read(answer(b"{}"), deadline=50.0) == b"{}"
    with pytest.raises(SearchFailed) as caught:
        read(answer(b"{}"), deadline=49.5)
    assert str(caught.value) == "web search 'x': no whole answer within 10 s"


def test_each_decompression_is_given_only_the_room_left_under_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rooms: list[int] = []
    real = zlib.decompressobj

    class Recording:
        def __init__(self, **kw: Any) -> None:
            self.inner = real(**kw)

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            rooms.append(max_length)
            return self.inner.decompress(data, max_length)

        def flush(self) -> bytes:
            return self.inner.flush()

        @property
        def unconsumed_tail(self) -> bytes:
            return self.inner.unconsumed_tail

    monkeypatch.setattr(search.zlib, "decompressobj", Recording)
    body = bytes(range(256)) * 64  # 16 KiB that hardly compress
    packed = gzip.compress(body)
    half = len(packed) // 2
    assert read(answer(packed[:half], packed[half:], **{"Content-Encoding": "gzip"})) == body
    first = real(wbits=47).decompress(packed[:half])
    assert rooms == [CAP + 1, CAP + 1 - len(first)]


def test_searxng_text_is_shown_as_it_is_not_as_markup() -> None:
    data = {"results": [{"title": "a <b>b</b>", "url": "https://e.org/", "content": "x &amp; y"}]}
    [result] = _searxng_results("w", data)
    assert (result.title, result.url, result.snippet) == (
        "a <b>b</b>",
        "https://e.org/",
        "x &amp; y",
    )


def test_a_result_url_of_the_longest_length_is_kept() -> None:
    url = "https://e.org/" + "a" * (WEB_SEARCH_URL_MAX_CHARS - len("https://e.org/"))
    assert _result_url(url) == url
    assert _result_url(url + "a") is None


def test_text_is_cut_only_past_its_length_and_without_a_space_before_the_ellipsis() -> None:
    assert _clean("abcde", 5, False) == "abcde"
    assert _clean("abc defgh", 5, False) == "abc…"
    assert _clean("abcdefgh", 5, False) == "abcd…"
