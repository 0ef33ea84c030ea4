"""The command line's socket channel, exactly: every operation ``answer`` knows with a
recording daemon (what it asks the daemon, with which values and defaults, and the
answer's every key), the errors it turns into answers, a streamed send's frames, the
files of a reply with their host paths, and the socket itself: its mode, the accept
loop's faults and limits, a connection's frames and its end."""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator import __version__, wire
from orchestrator.channels import control
from orchestrator.channels.control import ControlChannel, local
from orchestrator.errors import BadInput, GroupPaused, OrchestratorError, SenderRefused
from orchestrator.home import Home
from orchestrator.limits import TURN_TIMEOUT_SECONDS
from orchestrator.media.outbox import ReplyFile
from orchestrator.store.messages import Message

LOGGER = "orchestrator.channels.cli"


def message(mid: str = "m1", replies: tuple[str, ...] = (), **kw: Any) -> Message:
    return Message(
        mid, "fam", "cli.chat-cli", "cli", None, "operator", "operator", "hi", "cli", "done",
        replies=replies, **kw,
    )  # fmt: skip


def reply_file(seq: int, reply: int) -> ReplyFile:
    return ReplyFile(seq, f"f{seq}.txt", "text/plain", 3, "document", f"/out/f{seq}.txt", reply)


class Queue:
    def __init__(self) -> None:
        self.messages: dict[str, Message] = {}
        self.asked: list[str] = []

    def get(self, mid: str) -> Message | None:
        self.asked.append(mid)
        return self.messages.get(mid)

    def counts(self) -> dict[str, int]:
        return {"done": 2}

    def dead_letters(self) -> list[Message]:
        return [message("dead")]

    def pauses(self) -> list[Any]:
        return [SimpleNamespace(to_dict=lambda: {"group": "fam"})]


class Daemon:
    """Records what the channel asks of the daemon."""

    def __init__(self, home: Home | None = None) -> None:
        self.home = home
        self.queue = Queue()
        self.calls: list[tuple[Any, ...]] = []
        self.accepted = message("new")
        self.waited: Message | None = message("new", replies=("hello",))
        self.refuse: Exception | None = None
        self.on_reload: Any = None
        self.retried = True
        self.watched: list[Message] = []
        self.group = SimpleNamespace(folder="fam")
        self.runs: list[tuple[int, str]] = []
        self.hits: list[Any] = []
        self.inflight = 1
        self.stats = SimpleNamespace(delivered=3, failed=4)
        self.concurrency = 5
        self.per_group = 6
        store = SimpleNamespace(
            find=self._find,
            listing=lambda: [SimpleNamespace(to_dict=lambda: {"name": "fam"})],
        )
        self.runtime = SimpleNamespace(
            store=store,
            overview=lambda: SimpleNamespace(to_dict=lambda: {"groups": ["fam"]}),
            dead_sockets={"fam": 2},
        )
        self.tasks = SimpleNamespace(runs_in_chat=self._runs_in_chat)
        self.relay = SimpleNamespace(search=self._search)

    def _find(self, name: str) -> Any:
        self.calls.append(("find", name))
        return self.group

    def _runs_in_chat(self, folder: str, chat: str, since: float, channel: str) -> Any:
        self.calls.append(("runs_in_chat", folder, chat, since, channel))
        return self.runs

    def _search(self, group: Any, query: str, limit: int, fresh: bool) -> Any:
        self.calls.append(("search", group.folder, query, limit, fresh))
        return self.hits

    def accept(self, inbound: Any) -> Message:
        self.calls.append(("accept", inbound))
        if self.refuse is not None:
            raise self.refuse
        return self.accepted

    def wait(self, mid: str, timeout: float) -> Message | None:
        self.calls.append(("wait", mid, timeout))
        return self.waited

    def retry(self, mid: str) -> bool:
        self.calls.append(("retry", mid))
        return self.retried

    def watch(self, mid: str, timeout: float) -> Any:
        self.calls.append(("watch", mid, timeout))
        yield from self.watched


def channel(daemon: Daemon | None = None) -> ControlChannel:
    return ControlChannel(daemon or Daemon())  # type: ignore[arg-type]


def test_local_gives_each_file_its_host_path() -> None:
    plain = message()
    assert local(plain) == plain.to_dict()
    assert "files" not in local(plain)
    with_files = message(files=(reply_file(0, 0),))
    assert local(with_files)["files"] == [{**reply_file(0, 0).to_dict(), "path": "/out/f0.txt"}]


def test_ping() -> None:
    assert channel().answer({"op": "ping"}) == {
        "ok": True,
        "pid": os.getpid(),
        "version": __version__,
    }


def test_send_and_wait_with_the_defaults() -> None:
    daemon = Daemon()
    answer = channel(daemon).answer({"op": "send", "group": "fam", "text": "hi"})
    assert answer == {"ok": True, "message": local(message("new", replies=("hello",)))}
    [accepted, waited] = daemon.calls
    inbound = accepted[1]
    assert (inbound.group, inbound.text, inbound.chat, inbound.sender) == (
        "fam",
        "hi",
        "cli",
        "operator",
    )
    assert (inbound.channel, inbound.thread) == ("cli", None)
    assert waited == ("wait", "new", TURN_TIMEOUT_SECONDS)


def test_send_with_every_value_given() -> None:
    daemon = Daemon()
    daemon.waited = None  # no answer in time: the message as accepted
    request = {
        "op": "send", "group": 5, "text": "yo", "chat": "kitchen", "sender": "alice",
        "thread": "t1", "timeout": 7,
    }  # fmt: skip
    assert channel(daemon).answer(request) == {"ok": True, "message": local(message("new"))}
    inbound = daemon.calls[0][1]
    assert (inbound.group, inbound.text, inbound.chat, inbound.sender, inbound.thread) == (
        "5",
        "yo",
        "kitchen",
        "alice",
        "t1",
    )
    assert daemon.calls[1] == ("wait", "new", 7.0)


def test_send_without_waiting_and_without_a_group_or_text() -> None:
    daemon = Daemon()
    answer = channel(daemon).answer({"op": "send", "wait": False})
    assert answer == {"ok": True, "message": local(message("new"))}
    inbound = daemon.calls[0][1]
    assert (inbound.group, inbound.text) == ("", "")
    assert [c[0] for c in daemon.calls] == ["accept"]


@pytest.mark.parametrize(
    ("error", "answer"),
    [
        (
            SenderRefused("not you", "ask"),
            {"ok": False, "refused": True, "error": "not you", "hint": "ask"},
        ),
        (
            GroupPaused("paused", "wait"),
            {"ok": False, "paused": True, "error": "paused", "hint": "wait"},
        ),
        (BadInput("bad", "fix"), {"ok": False, "error": "bad", "hint": "fix", "exit": 2}),
        (OrchestratorError("no"), {"ok": False, "error": "no", "hint": None, "exit": 1}),
    ],
)
def test_errors_become_answers(error: Exception, answer: dict[str, Any]) -> None:
    daemon = Daemon()
    daemon.refuse = error
    assert channel(daemon).answer({"op": "send", "group": "fam", "text": "hi"}) == answer


def test_get() -> None:
    daemon = Daemon()
    daemon.queue.messages["m1"] = message("m1", files=(reply_file(0, 0),))
    assert channel(daemon).answer({"op": "get", "id": "m1"}) == {
        "ok": True,
        "message": local(daemon.queue.messages["m1"]),
    }
    assert channel(daemon).answer({"op": "get", "id": "m2"}) == {
        "ok": False,
        "error": "no message 'm2'",
    }
    assert channel(daemon).answer({"op": "get"}) == {"ok": False, "error": "no message None"}
    assert daemon.queue.asked == ["m1", "m2", ""]


def test_reload() -> None:
    daemon = Daemon()
    assert channel(daemon).answer({"op": "reload"}) == {
        "ok": False,
        "error": "this daemon cannot reload",
    }
    daemon.on_reload = lambda: {"ok": True, "changed": ["x"]}
    assert channel(daemon).answer({"op": "reload"}) == {"ok": True, "changed": ["x"]}


def test_retry() -> None:
    daemon = Daemon()
    assert channel(daemon).answer({"op": "retry", "id": "m1"}) == {"ok": True, "error": None}
    daemon.retried = False
    assert channel(daemon).answer({"op": "retry", "id": "m2"}) == {
        "ok": False,
        "error": "no dead-lettered message with id 'm2'",
    }
    channel(daemon).answer({"op": "retry"})
    assert daemon.calls == [("retry", "m1"), ("retry", "m2"), ("retry", "")]


def test_follow() -> None:
    daemon = Daemon()
    daemon.runs = [(1, "m1"), (2, "gone"), (3, "m3")]
    daemon.queue.messages = {"m1": message("m1"), "m3": message("m3")}
    answer = channel(daemon).answer({"op": "follow", "group": "Fam", "chat": "kitchen", "since": 5})
    assert answer == {
        "ok": True,
        "runs": [{"task": 1, **message("m1").to_dict()}, {"task": 3, **message("m3").to_dict()}],
    }
    assert daemon.calls == [("find", "Fam"), ("runs_in_chat", "fam", "kitchen", 5, "cli")]
    daemon.calls.clear()
    assert channel(daemon).answer({"op": "follow", "since": 1.5})["ok"] is True
    assert daemon.calls == [("find", ""), ("runs_in_chat", "fam", "None", 1.5, "cli")]
    for since in (None, True, "5"):
        assert channel(daemon).answer({"op": "follow", "group": "fam", "since": since}) == {
            "ok": False,
            "error": "follow needs since, a time in seconds",
        }


def test_search() -> None:
    daemon = Daemon()
    daemon.hits = [SimpleNamespace(to_dict=lambda: {"path": "a.md"})]
    answer = channel(daemon).answer({"op": "search", "group": "Fam", "query": "milk"})
    assert answer == {"ok": True, "group": "fam", "results": [{"path": "a.md"}]}
    assert daemon.calls == [("find", "Fam"), ("search", "fam", "milk", 6, True)]
    for limit in (1, 50):
        daemon.calls.clear()
        channel(daemon).answer({"op": "search", "query": "milk", "max_results": limit})
        assert daemon.calls == [("find", ""), ("search", "fam", "milk", limit, True)]
    for query in (None, 5, "", "  "):
        assert channel(daemon).answer({"op": "search", "query": query}) == {
            "ok": False,
            "error": "search needs a query",
            "exit": 2,
        }
    for limit in (0, 51, True, 2.0, "3"):
        assert channel(daemon).answer({"op": "search", "query": "milk", "max_results": limit}) == {
            "ok": False,
            "error": "max_results must be 1 to 50",
            "exit": 2,
        }


def test_listing_groups_and_status() -> None:
    daemon = Daemon()
    assert channel(daemon).answer({"op": "listing"}) == {"ok": True, "groups": [{"name": "fam"}]}
    assert channel(daemon).answer({"op": "groups"}) == {
        "ok": True,
        "groups": ["fam"],
        "runner_recreations": {"fam": 2},
    }
    assert channel(daemon).answer({"op": "status"}) == {
        "ok": True,
        "counts": {"done": 2},
        "dead": [message("dead").to_dict()],
        "inflight": 1,
        "delivered_since_start": 3,
        "failed_deliveries_since_start": 4,
        "concurrency": 5,
        "per_group_concurrency": 6,
        "pauses": [{"group": "fam"}],
        "runner_recreations": {"fam": 2},
    }


def test_an_unknown_op() -> None:
    assert channel().answer({"op": "dance"}) == {"ok": False, "error": "unknown op 'dance'"}
    assert channel().answer({}) == {"ok": False, "error": "unknown op None"}


def frames(sock: socket.socket) -> list[dict[str, Any]]:
    got = []
    while (frame := wire.recv_frame(sock)) is not None:
        got.append(frame)
    return got


def streamed(daemon: Daemon, request: dict[str, Any]) -> list[dict[str, Any]]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        channel(daemon)._send_streaming(theirs, request)
        theirs.shutdown(socket.SHUT_WR)
        return frames(ours)


def test_a_streamed_send_shows_each_reply_once_with_its_file() -> None:
    daemon = Daemon()
    first = message("new", replies=("one",))
    last = message(
        "new", replies=("one", "two", "three"), files=(reply_file(0, 1), reply_file(1, 2))
    )
    daemon.watched = [first, first, last]
    got = streamed(daemon, {"op": "send", "stream": True, "group": "fam", "text": "hi"})
    assert got == [
        {"reply": {"seq": 0, "text": "one"}},
        {
            "reply": {
                "seq": 1,
                "text": "two",
                "file": {**reply_file(0, 1).to_dict(), "path": "/out/f0.txt"},
            }
        },
        {
            "reply": {
                "seq": 2,
                "text": "three",
                "file": {**reply_file(1, 2).to_dict(), "path": "/out/f1.txt"},
            }
        },
        {"ok": True, "message": local(last)},
    ]
    assert [c[0] for c in daemon.calls] == ["accept", "watch"]
    assert daemon.calls[1] == ("watch", "new", TURN_TIMEOUT_SECONDS)
    assert daemon.queue.asked == []


def test_a_streamed_send_with_its_timeout_and_nothing_watched() -> None:
    daemon = Daemon()
    daemon.queue.messages["new"] = message("new", replies=("late",))
    got = streamed(daemon, {"op": "send", "stream": True, "timeout": 9})
    assert daemon.calls[1] == ("watch", "new", 9.0)
    assert got == [{"ok": True, "message": local(message("new", replies=("late",)))}]
    assert daemon.queue.asked == ["new"]
    gone = Daemon()
    assert streamed(gone, {"op": "send", "stream": True}) == [
        {"ok": False, "error": "message new vanished"}
    ]


def test_a_refused_streamed_send_answers_once() -> None:
    daemon = Daemon()
    daemon.refuse = SenderRefused("not you")
    assert streamed(daemon, {"op": "send", "stream": True}) == [
        {"ok": False, "refused": True, "error": "not you", "hint": None}
    ]
    assert [c[0] for c in daemon.calls] == ["accept"]


def served(daemon: Daemon, *requests: dict[str, Any]) -> tuple[list[Any], ControlChannel]:
    chan = channel(daemon)
    chan.lock = threading.Lock()
    chan.open_connections = 1
    ours, theirs = socket.socketpair()
    with ours:
        for request in requests:
            wire.send_frame(ours, request)
        ours.shutdown(socket.SHUT_WR)
        chan._serve(theirs)
        got = frames(ours)
    assert theirs.fileno() == -1  # closed
    return got, chan


def test_a_connection_is_served_frame_by_frame_until_its_end() -> None:
    daemon = Daemon()
    daemon.queue.messages["new"] = message("new")
    got, chan = served(
        daemon,
        {"op": "ping"},
        {"op": "send", "stream": True},
        {"op": "send", "stream": False, "wait": False},
    )
    assert got[0]["ok"] is True and got[0]["pid"] == os.getpid()
    assert got[1:] == [
        {"ok": True, "message": local(message("new"))},  # the stream's final answer
        {"ok": True, "message": local(message("new"))},
    ]
    assert [c[0] for c in daemon.calls] == ["accept", "watch", "accept"]
    assert chan.open_connections == 0


def test_a_broken_frame_closes_the_connection_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chan = channel()
    chan.lock = threading.Lock()
    chan.open_connections = 1
    ours, theirs = socket.socketpair()
    with ours:
        ours.sendall(b"\x00\x00\x00\x05nope!")
        ours.shutdown(socket.SHUT_WR)
        chan._serve(theirs)
    assert theirs.fileno() == -1
    assert theirs.gettimeout() == control.CONTROL_IDLE_TIMEOUT_SECONDS
    assert chan.open_connections == 0
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.WARNING
    one, two = socket.socketpair()
    with one, two:
        one.sendall(b"\x00\x00\x00\x05nope!")
        one.shutdown(socket.SHUT_WR)
        with pytest.raises(wire.ProtocolError) as broken:
            wire.recv_frame(two)
    assert str(broken.value)
    assert record.getMessage() == f"closing a CLI connection: {broken.value}"


class Listener:
    """A listening socket whose accept() answers from a script of faults and sockets."""

    def __init__(self, chan: ControlChannel, script: list[Any]) -> None:
        self.chan, self.script = chan, script

    def accept(self) -> tuple[Any, None]:
        if not self.script:
            self.chan.closed = True
            raise OSError(errno.EBADF, "closed")
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item, None


class Conn:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def accepting(
    script: list[Any], monkeypatch: pytest.MonkeyPatch, open_connections: int = 0
) -> tuple[ControlChannel, list[float], list[Any]]:
    chan = channel()
    chan.closed = False
    chan.open_connections = open_connections
    chan.lock = threading.Lock()
    chan.sock = Listener(chan, script)  # type: ignore[assignment]
    slept: list[float] = []
    served: list[Any] = []
    monkeypatch.setattr(control.time, "sleep", slept.append)
    monkeypatch.setattr(chan, "_serve", served.append)
    return chan, slept, served


def test_accept_faults_back_off_doubling_to_a_second_and_reset_after_a_connection(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    emfile = OSError(errno.EMFILE, "Too many open files")
    other = OSError(errno.EIO, "I/O error")
    conn = Conn()
    script = [emfile] * 6 + [other, conn, emfile, OSError(errno.EINTR, "x")]
    chan, slept, served = accepting(script, monkeypatch)
    chan._accept()
    assert slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 0.05]
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER] == [
        (logging.WARNING, "CLI socket accept failed (Too many open files); backing off")
    ] * 6 + [
        (logging.ERROR, "CLI socket accept failed (I/O error); backing off"),
        (logging.WARNING, "CLI socket accept failed (Too many open files); backing off"),
    ]
    assert _wait_for(served) == [conn]


def _wait_for(served: list[Any]) -> list[Any]:
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and thread.daemon:
            thread.join(0.5)
    return served


@pytest.mark.parametrize("code", [errno.EINTR, errno.ECONNABORTED, errno.EAGAIN, errno.EPROTO])
def test_accept_retries_at_once_on_a_passing_fault(
    code: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    conn = Conn()
    chan, slept, served = accepting([OSError(code, "x"), conn], monkeypatch)
    chan._accept()
    assert _wait_for(served) == [conn]
    assert slept == []
    assert [r for r in caplog.records if r.name == LOGGER] == []


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM])
def test_accept_out_of_resources_is_a_warning(
    code: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    chan, slept, _ = accepting([OSError(code, "x")], monkeypatch)
    chan._accept()
    assert slept == [0.05]
    assert [r.levelno for r in caplog.records if r.name == LOGGER] == [logging.WARNING]


def test_accept_over_the_cap_closes_the_connection(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    conn = Conn()
    chan, _, served = accepting([conn], monkeypatch, open_connections=64)
    chan._accept()
    assert conn.closed
    assert served == []
    assert chan.open_connections == 64
    assert [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER] == [
        (logging.WARNING, "CLI connection refused: 64 already open")
    ]
    below = Conn()
    chan, _, served = accepting([below], monkeypatch, open_connections=63)
    chan._accept()
    assert not below.closed
    assert chan.open_connections == 64
    assert _wait_for(served) == [below]


def test_accept_without_a_thread_closes_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = Conn()
    chan, _, _ = accepting([conn], monkeypatch, open_connections=3)

    class NoThread:
        def __init__(self, **kw: Any) -> None:
            self.kw = kw

        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(control.threading, "Thread", NoThread)
    chan._accept()
    assert conn.closed
    assert chan.open_connections == 3


def test_an_accept_fault_after_stop_ends_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    chan, slept, _ = accepting([], monkeypatch)
    chan._accept()
    assert slept == []
    chan.closed = True
    chan._accept()  # closed before the first accept: nothing asked


def test_the_socket_is_the_owners_only_and_goes_at_stop(home: Path) -> None:
    h = Home(home)
    h.ensure_writable()
    path = h.state_dir / "orchestrator.sock"
    path.write_text("left by a crash")
    chan = channel(Daemon(h))
    assert chan.where() == str(path)
    before = os.umask(0o022)
    try:
        chan.start()
        assert os.umask(0o022) == 0o022  # the umask is given back
    finally:
        os.umask(before)
    try:
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert chan.thread.name == "cli-channel"
        assert chan.thread.daemon is True
        assert chan.closed is False
        assert chan.open_connections == 0
        assert wire.request(path, {"op": "ping"}, 10)["ok"] is True
    finally:
        chan.stop()
    assert chan.closed is True
    assert not path.exists()
    chan.thread.join(10)
    assert not chan.thread.is_alive()
    chan.stop()  # again: nothing to close or remove


def test_each_connection_is_served_on_a_daemon_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = Conn()
    chan, _, served = accepting([conn], monkeypatch)
    made: list[threading.Thread] = []

    class Recorded(threading.Thread):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            made.append(self)

    monkeypatch.setattr(control.threading, "Thread", Recorded)
    chan._accept()
    [thread] = made
    assert thread.daemon is True
    thread.join(10)
    assert served == [conn]


def test_the_listening_socket_is_a_unix_stream_with_a_backlog_of_64(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Home(home)
    h.ensure_writable()
    backlogs: list[int] = []

    class Recorded(socket.socket):
        def listen(self, backlog: int = 0) -> None:
            backlogs.append(backlog)
            super().listen(backlog)

    monkeypatch.setattr(control.socket, "socket", Recorded)
    chan = channel(Daemon(h))
    chan.start()
    try:
        assert backlogs == [64]
        assert chan.sock.family == socket.AF_UNIX
        assert chan.sock.type == socket.SOCK_STREAM
    finally:
        chan.stop()
        chan.thread.join(10)


def test_a_socket_that_fails_to_close_still_leaves_no_file(home: Path) -> None:
    class Failing:
        calls: list[str] = []

        def shutdown(self, how: int) -> None:
            self.calls.append("shutdown")
            raise OSError(errno.ENOTCONN, "not connected")

        def close(self) -> None:
            self.calls.append("close")
            raise OSError(errno.EIO, "I/O error")

    path = home / "orchestrator.sock"
    path.write_text("")
    chan = channel()
    chan.sock = Failing()  # type: ignore[assignment]
    chan.path = path
    chan.stop()
    assert Failing.calls == ["shutdown", "close"]
    assert not path.exists()
    assert chan.closed is True
