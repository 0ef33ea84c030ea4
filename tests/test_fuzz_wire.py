"""Fuzzing the frame reader (orchestrator/wire.py): the bytes a container writes on its
socket. Whatever they are, reading gives JSON objects within the size limit, then None
at a clean close, or ProtocolError (the module's "protocol violation"); never another
exception, whatever the peer's chunking. A frame written by send_frame reads back equal.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any, cast

from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator import wire
from tests.fuzzing import fuzz, mutated


class Pipe:
    """The reading end of a connection: ``data`` handed out in the given chunk sizes."""

    def __init__(self, data: bytes, chunks: list[int]) -> None:
        self.data = data
        self.chunks = chunks or [65536]
        self.reads = 0

    def settimeout(self, value: float | None) -> None:
        pass

    def recv(self, size: int) -> bytes:
        step = max(1, min(size, self.chunks[self.reads % len(self.chunks)]))
        self.reads += 1
        piece, self.data = self.data[:step], self.data[step:]
        return piece

    def sendall(self, data: bytes) -> None:
        self.data += data


def frame(message: dict[str, Any] | bytes) -> bytes:
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


# Frames as the runner and the host send them (orchestrator/protocol.py's shapes).
SEEDS = [
    frame({"op": "model.complete", "req": 1, "system": "s", "messages": []}),
    frame({"op": "reply", "req": 2, "seq": 0, "text": "héllo 👋"}),
    frame({"ok": True, "req": 2}) + frame({"event": "turn", "messages": [{"text": "hi"}]}),
    frame({"ok": False, "error": {"code": "bad", "message": "no"}}),
    frame(b"{}"),
    frame(b""),
    b"",
]
LIMIT = 4096


def read_all(data: bytes, chunks: list[int], limit: int = LIMIT) -> list[dict[str, Any]]:
    """Every frame in ``data`` until a clean close; ProtocolError propagates."""
    sock = cast(socket.socket, Pipe(data, chunks))
    frames: list[dict[str, Any]] = []
    while True:
        received = wire.recv_sized(sock, None, limit)
        if received is None:
            return frames
        message, size = received
        assert isinstance(message, dict)
        assert size <= limit
        frames.append(message)
        assert len(frames) <= len(data) // 4  # every frame took at least its header


streams = st.one_of(
    mutated(SEEDS),
    st.binary(max_size=64),
    st.lists(st.sampled_from(SEEDS) | mutated(SEEDS), max_size=4).map(b"".join),
)
chunkings = st.lists(st.integers(min_value=1, max_value=9), max_size=5)


@fuzz(300)
@given(data=streams, chunks=chunkings)
@example(data=SEEDS[2], chunks=[1])
@example(data=struct.pack(">I", 2**32 - 1) + b"{}", chunks=[])
@example(data=frame(b"[1]"), chunks=[])
@example(data=frame(b'{"a":' * 5000), chunks=[3])
@example(data=frame(b"[" * 100_000)[:4] + b"[" * 100_000, chunks=[]).via("deep nesting")
@example(data=frame(b'{"a": 1e999999, "b": NaN}'), chunks=[]).via("non-finite")
@example(data=frame(b'{"a": ' + b"9" * 5000 + b"}"), chunks=[]).via("huge integer")
@example(data=frame(b'{"a": "\\ud800"}'), chunks=[]).via("lone surrogate")
@example(data=frame(b"\xef\xbb\xbf{}"), chunks=[]).via("byte order mark")
@example(data=frame({"op": "x"})[:-1], chunks=[]).via("truncated body")
@example(data=b"\x00\x00", chunks=[]).via("truncated header")
def test_reading_any_bytes(data: bytes, chunks: list[int]) -> None:
    try:
        read_all(data, chunks, limit=200_000)
    except wire.ProtocolError as exc:
        assert str(exc)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(),  # lone surrogates included: JSON carries them escaped
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)
messages = st.dictionaries(st.text(max_size=12), json_values, max_size=6)


@fuzz(200)
@given(batch=st.lists(messages, min_size=1, max_size=4), chunks=chunkings)
@example(batch=[{"text": "héllo 👋", "n": -0.0, "big": 2**80}], chunks=[1])
@example(batch=[{}], chunks=[])
def test_what_send_frame_writes_reads_back_equal(
    batch: list[dict[str, Any]], chunks: list[int]
) -> None:
    pipe = Pipe(b"", chunks)
    sent = []
    for message in batch:
        try:
            wire.send_frame(cast(socket.socket, pipe), message, limit=LIMIT)
        except wire.ProtocolError:  # over the limit: refused before anything is written
            continue
        sent.append(message)
    assert read_all(pipe.data, chunks, limit=LIMIT) == sent


@fuzz(100)
@given(message=messages, cut=st.integers(min_value=1))
def test_a_frame_cut_short_is_a_protocol_error_not_a_clean_close(
    message: dict[str, Any], cut: int
) -> None:
    data = frame(message)
    cut = cut % len(data)
    pipe = cast(socket.socket, Pipe(data[:cut], []))
    try:
        got = wire.recv_frame(pipe, limit=len(data))
    except wire.ProtocolError:
        return
    assert cut == 0 and got is None
