"""Shared settings and strategies of the fuzz harnesses (tests/test_fuzz_*.py).

Each harness feeds a parser bytes or text that a container, a chat user or a provider
controls, seeded from real inputs and mutated. In the suite, ``fuzz()`` gives a small,
fixed number of examples with a derandomized seed (the same inputs every run, a few
seconds a harness, no example database). ``FUZZ_EXAMPLES=N`` sets N examples for every
harness and draws a fresh seed per run, for a long run by hand:

    FUZZ_EXAMPLES=20000 python -m pytest tests/test_fuzz_*.py

A failure prints the input and a ``@reproduce_failure`` blob that replays it.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

LONG_RUN = int(os.environ.get("FUZZ_EXAMPLES") or 0)


def fuzz(examples: int = 100) -> settings:
    """The settings of one harness: ``examples`` in the suite, FUZZ_EXAMPLES when set."""
    return settings(
        max_examples=LONG_RUN or examples,
        derandomize=not LONG_RUN,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


# Bytes that tend to matter to parsers: structure, quotes, escapes, controls, and the
# first bytes of multi-byte UTF-8 sequences.
_INTERESTING = (
    b"\x00", b"\xff", b"\xc3", b"\xe2\x80", b"\xf0\x9f", b"\n", b"\r\n", b"\t", b" ", b'"',
    b"'", b"\\", b"{", b"}", b"[", b"]", b":", b",", b"-", b"---", b"<", b">", b"=", b"&",
    b"#", b"%", b"*", b"!", b"|", b"@", b"\\u0000", b"\\ud800", b"1e999", b"-0",
)  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes], max_edits: int = 6) -> bytes:
    """One of ``seeds`` with a few random edits: bytes flipped, inserted, deleted, a span
    repeated or cut, a splice from another seed, the end truncated."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(min_value=0, max_value=max_edits))):
        kind = draw(st.integers(min_value=0, max_value=6))
        at = draw(st.integers(min_value=0, max_value=len(data)))
        if kind == 0 and at < len(data):
            data[at] = draw(st.integers(min_value=0, max_value=255))
        elif kind == 1:
            data[at:at] = draw(st.sampled_from(_INTERESTING) | st.binary(max_size=8))
        elif kind == 2:
            end = draw(st.integers(min_value=at, max_value=min(len(data), at + 16)))
            del data[at:end]
        elif kind == 3:
            end = draw(st.integers(min_value=at, max_value=min(len(data), at + 32)))
            data[at:at] = data[at:end] * draw(st.integers(min_value=1, max_value=4))
        elif kind == 4:
            other = draw(st.sampled_from(seeds))
            start = draw(st.integers(min_value=0, max_value=len(other)))
            data[at:] = other[start:]
        elif kind == 5:
            del data[at:]
        else:
            end = draw(st.integers(min_value=at, max_value=len(data)))
            data[at:end] = bytes(data[at:end]).swapcase()
    return bytes(data)


def json_values(texts: Iterable[bytes | str]) -> list[Any]:
    """The JSON values of those of ``texts`` that parse (a mutation that no longer does is
    left out: the platform's or the SDK's own reader fails on it before the code under
    test sees anything)."""
    values = []
    for text in texts:
        try:
            values.append(json.loads(text))
        except (ValueError, RecursionError):
            continue
    return values


def mutated_text(seeds: list[str], max_edits: int = 6) -> st.SearchStrategy[str]:
    """``mutated`` seeds as text: invalid UTF-8 decoded with replacement characters."""
    encoded = [seed.encode("utf-8") for seed in seeds]
    return mutated(encoded, max_edits).map(lambda data: data.decode("utf-8", "replace"))


_NUMBERS = st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63, -(2**63), 10**30, 1.5, -0.0, 1e308])
_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), _NUMBERS, st.text(max_size=12), st.builds(list),
    st.builds(dict),
)  # fmt: skip


def _places(value: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key) of a JSON value, outermost first."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in list(items):
        yield value, key
        if isinstance(item, dict | list):
            yield from _places(item)


@st.composite
def mutated_json(
    draw: st.DrawFn, seeds: list[Any], max_edits: int = 6, same_types: bool = False
) -> Any:
    """One of ``seeds`` (JSON values) with a few edits where a parser meets them: a
    string mutated as text, a number made extreme, a value of another type, a key or an
    item removed, a value copied to another place. The JSON stays valid, so every
    example reaches the code under test (a byte mutation of JSON seldom parses). With
    ``same_types``, each value keeps its type (for a platform whose values are typed,
    read by a library that trusts them): strings and numbers change, keys come and go."""
    holder = [copy.deepcopy(draw(st.sampled_from(seeds)))]
    for _ in range(draw(st.integers(min_value=0, max_value=max_edits))):
        places = list(_places(holder))
        container, key = draw(st.sampled_from(places))
        old = container[key]
        kind = draw(st.sampled_from((0, 2, 4) if same_types else (0, 1, 2, 3, 4)))
        if kind == 0 and isinstance(old, str):
            container[key] = draw(mutated_text([old], max_edits=3))
        elif kind == 0 and isinstance(old, int) and not isinstance(old, bool):
            numbers = _NUMBERS.filter(lambda n: isinstance(n, int)) if same_types else _NUMBERS
            container[key] = draw(numbers | st.integers())
        elif kind == 0 and isinstance(old, float):
            container[key] = draw(_NUMBERS | st.floats())
        elif kind == 1:
            container[key] = draw(_LEAVES)
        elif kind == 2 and container is not holder:
            del container[key]
        elif kind == 3:
            source, at = draw(st.sampled_from(places))
            container[key] = copy.deepcopy(source[at])
        elif kind == 4 and isinstance(old, dict) and not same_types:
            old[draw(st.text(max_size=8))] = draw(_LEAVES)
        elif kind == 4 and isinstance(old, list):
            source, at = draw(st.sampled_from(places))
            old.append(copy.deepcopy(source[at]))
    return holder[0]


def json_mutants(seeds: list[Any]) -> st.SearchStrategy[Any]:
    """``mutated_json`` seeds, and now and then a byte mutation of their text (None
    when it no longer parses)."""
    texts = [json.dumps(seed, ensure_ascii=False).encode() for seed in seeds]
    raw = mutated(texts, max_edits=4).map(lambda data: (json_values([data]) or [None])[0])
    return st.one_of(mutated_json(seeds), mutated_json(seeds), raw)


class RecordingCore:
    """What a chat app's adapter asks of the chat-app core (chatapp/core.ChatAccount)
    while it reads inbound events, recording what it is given: the messages routed, the
    pairing asked for, the notices. Nothing is bound, nothing was queued before; files
    are stored under ``root``."""

    name = "fuzzbot"

    def __init__(self, options: Any, prefix: str, root: Any = None) -> None:
        from types import SimpleNamespace

        self.account = SimpleNamespace(options=options, prefix=prefix)
        self.chats = SimpleNamespace(
            move_chat=lambda *args: True,
            binding=lambda *args: None,
            was_queued=lambda *args: False,
        )
        self.daemon = SimpleNamespace(runtime=SimpleNamespace(store=SimpleNamespace(root=root)))
        self.health = SimpleNamespace()
        self.routed: list[Any] = []
        self.pairing: list[tuple[Any, ...]] = []
        self.notices: list[tuple[Any, ...]] = []

    async def route(self, received: Any) -> None:
        self.routed.append(received)

    async def ask_pairing(self, *args: Any, **kwargs: Any) -> None:
        self.pairing.append(args)

    async def notice(self, *args: Any, **kwargs: Any) -> None:
        self.notices.append(args)

    def polled(self) -> None:
        return None

    def error(self, text: str) -> None:
        return None
