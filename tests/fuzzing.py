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

import json
import os
from collections.abc import Iterable
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
