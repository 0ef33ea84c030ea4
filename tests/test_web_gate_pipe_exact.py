"""The egress gate's two small coroutines, exactly, with fake streams: ``_pipe`` carries
every byte, ends the far side's writing and ends quietly when that side is already gone
(the other direction of the connection goes on), and ``_refuse`` writes the whole
refusal and ends quietly when the client has gone before it drains."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.web.gate import _pipe, _refuse
from tests.waits import record_joins


class Writer:
    """A StreamWriter's side that records what is written; its drain and write_eof fail
    when told to."""

    def __init__(
        self,
        *,
        eof: bool = True,
        eof_error: OSError | None = None,
        drain_error: OSError | None = None,
    ) -> None:
        self.written: list[bytes] = []
        self.eof = eof
        self.eof_error = eof_error
        self.drain_error = drain_error
        self.eof_written = False
        self.drains = 0

    def write(self, data: bytes) -> None:
        self.written.append(data)

    async def drain(self) -> None:
        self.drains += 1
        if self.drain_error is not None:
            raise self.drain_error

    def can_write_eof(self) -> bool:
        return self.eof

    def write_eof(self) -> None:
        if self.eof_error is not None:
            raise self.eof_error
        self.eof_written = True


def reader_of(*chunks: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    reader.feed_eof()
    return reader


def pipe(writer: Writer, *chunks: bytes) -> None:
    async def run() -> None:
        await _pipe(reader_of(*chunks), writer)  # type: ignore[arg-type]

    assert asyncio.run(run()) is None


def test_pipe_carries_everything_then_ends_the_writing() -> None:
    writer = Writer()
    pipe(writer, b"GET / HTTP/1.1\r\n", b"\r\n")
    assert b"".join(writer.written) == b"GET / HTTP/1.1\r\n\r\n"
    assert writer.eof_written is True


def test_pipe_no_eof_when_the_writer_cannot() -> None:
    writer = Writer(eof=False)
    pipe(writer, b"abc")
    assert b"".join(writer.written) == b"abc"
    assert writer.eof_written is False


@pytest.mark.parametrize("error", [BrokenPipeError("gone"), ConnectionResetError("reset")])
def test_pipe_ends_quietly_when_the_far_side_is_gone(error: OSError) -> None:
    writer = Writer(eof_error=error)
    pipe(writer, b"abc")
    assert b"".join(writer.written) == b"abc"
    assert writer.eof_written is False


def test_pipe_ends_quietly_when_a_write_fails() -> None:
    writer = Writer(drain_error=ConnectionResetError("reset"))
    pipe(writer, b"abc", b"def")
    assert writer.drains == 1
    assert writer.eof_written is True


def refuse(writer: Writer, status: int, why: str) -> None:
    async def run() -> None:
        await _refuse(writer, status, why)  # type: ignore[arg-type]

    assert asyncio.run(run()) is None


def test_refuse_writes_the_whole_refusal() -> None:
    writer = Writer()
    refuse(writer, 403, "no turn that may use the web is running")
    assert writer.written == [
        b"HTTP/1.1 403 Refused\r\nContent-Type: text/plain\r\nContent-Length: 66\r\n"
        b"Connection: close\r\n\r\n"
        b"orchestrator egress gate: no turn that may use the web is running\n"
    ]
    assert writer.drains == 1


@pytest.mark.parametrize("error", [BrokenPipeError("gone"), ConnectionResetError("reset")])
def test_refuse_ends_quietly_when_the_client_is_gone(error: OSError) -> None:
    writer = Writer(drain_error=error)
    refuse(writer, 429, "too many connections (at most 2 at once)")
    assert writer.written == [
        b"HTTP/1.1 429 Refused\r\nContent-Type: text/plain\r\nContent-Length: 67\r\n"
        b"Connection: close\r\n\r\n"
        b"orchestrator egress gate: too many connections (at most 2 at once)\n"
    ]
    assert writer.drains == 1


class BrokenReader:
    """A client's side whose read fails (the client reset its connection)."""

    async def readuntil(self, separator: bytes) -> bytes:
        raise ConnectionResetError("reset")


def test_over_the_bound_a_failed_read_still_gets_the_429(tmp_path: Path) -> None:
    from orchestrator.web.gate import Gate, _Group
    from orchestrator.web.guard import Rules

    gate = Gate(tmp_path, max_connections=1)
    try:
        group = _Group("g", Rules())
        group.connections.add(object())  # type: ignore[arg-type]
        writer = Writer()

        async def run() -> None:
            await gate._serve_one(group, BrokenReader(), writer)  # type: ignore[arg-type]

        assert asyncio.run(run()) is None
    finally:
        gate.close()
    assert writer.written == [
        b"HTTP/1.1 429 Refused\r\nContent-Type: text/plain\r\nContent-Length: 67\r\n"
        b"Connection: close\r\n\r\n"
        b"orchestrator egress gate: too many connections (at most 1 at once)\n"
    ]
    assert group.refused == 0


# the bounds the gate asks for (the values given to the waits, not their seconds)


class RecordedFuture:
    def __init__(self, asked: list[object], value: object) -> None:
        self.asked, self.value = asked, value

    def result(self, timeout: object = "none given") -> object:
        self.asked.append(timeout)
        return self.value


def test_a_call_onto_the_gates_loop_waits_ten_seconds_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.web import gate as gate_module

    gate = gate_module.Gate(tmp_path / "egress")
    asked: list[object] = []
    try:
        with monkeypatch.context() as patch:

            def run_coroutine_threadsafe(coroutine: object, loop: object) -> RecordedFuture:
                assert loop is gate.loop
                coroutine.close()  # type: ignore[attr-defined]
                return RecordedFuture(asked, "answer")

            patch.setattr(gate_module.asyncio, "run_coroutine_threadsafe", run_coroutine_threadsafe)
            assert gate._call(lambda: None) == "answer"
            assert gate._call(lambda: None, timeout=3) == "answer"
    finally:
        gate.close()
    assert asked == [10, 3]


def test_closing_waits_five_seconds_at_most_for_the_loops_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.web.gate import Gate

    gate = Gate(tmp_path / "egress")
    thread = gate.thread
    asked = record_joins(monkeypatch, thread)
    gate.close()
    assert asked == [5]
    assert gate.loop.is_closed() and not thread.is_alive()
