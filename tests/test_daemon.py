"""The daemon on the fake backend, with runners on real Unix sockets: scheduling, bounded
turns, cancellation, disk pauses and inbound checks. No engine needed."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator import wire
from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.daemon.core import Daemon, check_inbound, choose, group_share
from orchestrator.errors import BadInput, GroupPaused
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig, set_option
from orchestrator.home import Home
from orchestrator.runtime.channel import (
    UNRELAYED_REQUESTS_PER_TURN,
    Cancel,
    RunnerClient,
    TurnFailed,
)
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import DONE, INFLIGHT, QUEUED, Message, open_queue
from tests.fakerunner import FakeRunner, drip, echo, silent


def msg(group: str, session: str = "s", created: float = 0.0) -> Message:
    return Message(
        f"{group}-{session}-{created}",
        group,
        session,
        "c",
        None,
        "a",
        "member",
        "t",
        "cli",
        QUEUED,
        created=created,
    )


def test_choose_caps_each_group_and_the_total() -> None:
    candidates = [msg("evil", f"s{i}", i) for i in range(5)] + [msg("good", "s", 10)]
    chosen = choose(candidates, free=4, per_group=2, running={}, last_served={})
    assert [m.group for m in chosen] == ["evil", "good", "evil"]
    chosen = choose(candidates, free=4, per_group=2, running={"evil": 2}, last_served={})
    assert [m.group for m in chosen] == ["good"]
    assert choose(candidates, free=0, per_group=2, running={}, last_served={}) == []


def test_group_share_is_half_the_workers_at_least_one() -> None:
    assert [group_share(n) for n in (1, 2, 3, 8)] == [1, 1, 1, 4]
    assert group_share(8, 3) == 3 and group_share(2, 5) == 2


def test_inbound_checks_name_the_field_that_is_wrong() -> None:
    ok = {"text": "hi", "chat": "c", "sender": "s", "thread": None}
    check_inbound(**ok)
    cases = {
        "sender must be 1..200 characters (got 201 characters)": {"sender": "x" * 201},
        "chat must be 1..200 characters (got 201 characters)": {"chat": "x" * 201},
        "the message is 32001 characters; at most 32000 are accepted": {"text": "x" * 32_001},
        "the message text is not valid Unicode (a lone surrogate at character 5)": {
            "text": "bad \ud800 text"
        },
        "sender contains the control character U+001B": {"sender": "a\x1b[31m"},
        "thread must be 1..200 characters (got 0 characters)": {"thread": ""},
        "the message text is empty": {"text": "   "},
        "chat must be 1..200 characters (got None)": {"chat": None},
        "sender must be 1..200 characters (got None)": {"sender": None},
        "sender must be 1..200 characters (got 7)": {"sender": 7},
        "thread contains the control character U+0000": {"thread": "t\x00"},
        "chat contains a line break": {"chat": "a\nb"},
        "the message text contains the control character U+0007": {"text": "a\x07b"},
    }
    for expected, change in cases.items():
        with pytest.raises(BadInput) as refused:
            check_inbound(**{**ok, **change})
        assert refused.value.message == expected
    with pytest.raises(BadInput) as refused:
        check_inbound(**{**ok, "text": 5})
    assert refused.value.message == "the message text is empty"
    check_inbound(**{**ok, "text": "x" * 32_000, "thread": "t"})
    check_inbound(**{**ok, "sender": "s" * 200, "chat": "c" * 200, "thread": "t" * 200})


def test_a_dripping_runner_cannot_outlast_the_turn_deadline(tmp_path: Path) -> None:
    runner = FakeRunner(tmp_path / "r.sock", drip)
    try:
        with pytest.raises(TurnFailed, match="did not finish within 1s"):
            RunnerClient(runner.path).turn({"turn_id": "x", "text": "hi"}, timeout=1)
    finally:
        runner.close()


def asks_then_answers(conn: socket.socket, request: dict[str, Any]) -> None:
    wire.send_frame(conn, {"req": 1, "op": "standing.get"})
    answer = wire.recv_frame(conn)
    wire.send_frame(conn, {"ok": True, "turn_id": "x", "replies": [answer]})


def asks_forever(conn: socket.socket, request: dict[str, Any]) -> None:
    number = 0
    while True:
        number += 1
        wire.send_frame(conn, {"req": number, "op": "standing.get"})
        if wire.recv_frame(conn) is None:
            return


def test_a_turn_delivered_without_a_relay_refuses_requests_and_finishes(tmp_path: Path) -> None:
    runner = FakeRunner(tmp_path / "r.sock", asks_then_answers)
    try:
        result = RunnerClient(runner.path).turn({"turn_id": "x"}, timeout=10)
    finally:
        runner.close()
    assert result["replies"] == [
        {
            "req": 1,
            "ok": False,
            "error": "no host relay on this turn (it was not delivered by the daemon)",
        }
    ]


def test_a_turn_without_a_relay_fails_a_runner_that_keeps_asking(tmp_path: Path) -> None:
    runner = FakeRunner(tmp_path / "r.sock", asks_forever)
    try:
        with pytest.raises(TurnFailed) as failed:
            RunnerClient(runner.path).turn({"turn_id": "x"}, timeout=10)
    finally:
        runner.close()
    assert failed.value.message.endswith(
        f"more than {UNRELAYED_REQUESTS_PER_TURN} requests on a turn without a relay"
    )


def test_a_turn_can_be_cancelled_from_another_thread(tmp_path: Path) -> None:
    runner = FakeRunner(tmp_path / "r.sock", silent)
    cancel = Cancel()
    errors: list[Exception] = []

    def deliver() -> None:
        try:
            RunnerClient(runner.path).turn({"turn_id": "x"}, timeout=600, cancel=cancel)
        except Exception as exc:
            errors.append(exc)

    worker = threading.Thread(target=deliver)
    worker.start()
    while not runner.turns:
        time.sleep(0.01)
    cancel.cancel()
    worker.join(30)
    runner.close()
    assert not worker.is_alive()
    assert isinstance(errors[0], TurnFailed) and "cancelled" in errors[0].message


class DialledIn:
    """An endpoint of a backend whose runner dials the host: the connection the runner
    opened is handed over, once per turn."""

    def __init__(self, runner_side: Callable[[socket.socket], None]) -> None:
        self.runner_side = runner_side
        self.threads: list[threading.Thread] = []

    def connect(self, timeout: float) -> socket.socket:
        host, runner = socket.socketpair()
        host.settimeout(timeout)
        thread = threading.Thread(target=self.runner_side, args=(runner,))
        thread.start()
        self.threads.append(thread)
        return host

    def describe(self) -> str:
        return "a runner that dialled in"

    def release(self, sock: socket.socket) -> None:
        sock.close()


def test_a_backend_whose_runner_dials_in_carries_pings_turns_and_requests() -> None:
    def runner_side(conn: socket.socket) -> None:
        with conn:
            frame = wire.recv_frame(conn)
            assert frame is not None
            if frame["op"] == "ping":
                wire.send_frame(conn, {"ok": True})
                return
            wire.send_frame(conn, {"req": 1, "op": "standing.get"})
            answer = wire.recv_frame(conn)
            wire.send_frame(conn, {"ok": True, "turn_id": frame["turn"]["turn_id"], "a": answer})

    endpoint = DialledIn(runner_side)
    client = RunnerClient(endpoint)
    assert client.ping()
    result = client.turn(
        {"turn_id": "t1"}, timeout=10, handle=lambda frame, size: {"req": frame["req"], "ok": 1}
    )
    for thread in endpoint.threads:
        thread.join(10)
    assert result == {"ok": True, "turn_id": "t1", "a": {"req": 1, "ok": 1}}
    assert len(endpoint.threads) == 2


@pytest.fixture
def setup(home: Path) -> Iterator[tuple[Daemon, dict[str, FakeRunner]]]:
    h = Home(home)
    store = GroupStore(h)
    for name in ("evil", "good"):
        store.add(GroupConfig(name=name, creators=("op",)))
        set_option(store.root / name / "group.yaml", "turn_timeout", "3s")
    config = OrchestratorConfig(project="t", mount_allowlist=home / "none.yaml")
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    runners = {
        "evil": FakeRunner(h.runtime_dir("evil") / "runner.sock", drip),
        "good": FakeRunner(h.runtime_dir("good") / "runner.sock"),
    }
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    try:
        yield daemon, runners
    finally:
        daemon.drain(1)
        for runner in runners.values():
            runner.close()
        daemon.queue.close()


def wait_for(predicate, timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def test_a_hostile_group_cannot_take_every_worker(setup) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = setup
    evil = [
        daemon.submit("evil", "hi", chat=f"chat{i}", sender="op", channel="cli") for i in range(2)
    ]
    wait_for(lambda: daemon.running.get("evil", 0) == 1)
    good = daemon.submit("good", "hello", chat="c", sender="op", channel="cli")
    done = daemon.wait(good.id, 60)
    assert done is not None and done.state == DONE and done.replies == ("echo: hello",)
    # Answered while the hostile group's turns were still within their first attempt:
    # with both workers taken it would have waited for one of them to time out.
    for message in evil:
        current = daemon.queue.get(message.id)
        assert current is not None and current.last_error is None, current


def test_a_dripping_turn_fails_at_its_deadline_and_is_retried(setup) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = setup
    message = daemon.submit("evil", "hi", chat="c", sender="op", channel="cli")
    wait_for(lambda: (daemon.queue.get(message.id) or message).attempts >= 2)
    current = daemon.queue.get(message.id)
    assert current is not None
    assert current.last_error == "the turn did not finish within 3s"


def test_drain_cancels_turns_that_do_not_finish(setup, caplog) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = setup
    message = daemon.submit("evil", "hi", chat="c", sender="op", channel="cli")
    wait_for(lambda: message.id in daemon.active)
    stop_now = threading.Event()
    # set while drain waits (the dripping turn would end at its 3 s deadline otherwise)
    threading.Timer(0.2, stop_now.set).start()
    with caplog.at_level("WARNING", logger="orchestrator.daemon"):
        assert daemon.drain(60, stop_now) is False
    assert caplog.messages == [
        "1 turns still in flight at shutdown were cancelled; they are delivered again at the "
        "next start"
    ]
    wait_for(lambda: not daemon.active)
    current = daemon.queue.get(message.id)
    # cancelled, not failed: still in flight, delivered again at the next start
    assert current is not None and current.state == INFLIGHT and current.last_error is None


def test_a_group_over_its_disk_limit_is_paused_until_space_is_freed(setup) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = setup
    group = daemon.runtime.store.load("good")
    path = group.config_file
    set_option(path, "container.disk", "1m")
    assert daemon.runtime.store.load("good").config.container.disk_bytes == 1024**2
    daemon.runtime.prepare_host(group, daemon.runtime.desired_spec(group))
    waiting = daemon.submit("good", "first", chat="c", sender="op", channel="cli")
    daemon.queue.pause("good", "operator", "hold")  # so it waits during the test
    (group.files_dir / "big.bin").write_bytes(b"x" * 2 * 1024**2)
    assert daemon.check_disk("good") is True
    with pytest.raises(GroupPaused, match="over its disk limit"):
        daemon.submit("good", "more", chat="c", sender="op", channel="cli")
    assert daemon.queue.get(waiting.id).state == QUEUED  # type: ignore[union-attr]
    (group.files_dir / "big.bin").unlink()
    daemon.queue.resume("good", "operator")
    assert daemon.check_disk("good") is False
    done = daemon.wait(waiting.id, 60)
    assert done is not None and done.state == DONE  # nothing was lost


def test_a_commit_that_failed_is_queued_again_by_housekeeping(setup, caplog) -> None:  # type: ignore[no-untyped-def]
    daemon, runners = setup
    runners["good"].close()
    daemon.queue.pause("good", "operator", "hold")
    message = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    with daemon.cond:  # the dispatcher waits for this lock: nothing else claims meanwhile
        daemon.queue.resume("good")  # a paused group's message cannot be claimed
        assert daemon.queue.claim(message.id)  # as if a worker died before it could commit
        daemon.queue.pause("good", "operator", "hold")
    with caplog.at_level("WARNING", logger="orchestrator.daemon"):
        daemon.housekeeping()
    assert daemon.queue.get(message.id).state == QUEUED  # type: ignore[union-attr]
    assert caplog.messages == ["1 messages left in flight by a failed commit are queued again"]


def test_inbound_refusal_order_and_paused_hold(setup) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = setup
    daemon.queue.pause("good", "operator", "maintenance")
    held = daemon.submit("good", "wait for me", chat="c", sender="op", channel="cli")
    assert daemon.pause_of("good") is not None
    time.sleep(0.3)  # the dispatcher runs several times meanwhile; it must skip the group
    assert daemon.queue.get(held.id).state == QUEUED  # type: ignore[union-attr]
    daemon.queue.resume("good")
    assert daemon.wait(held.id, 60).state == DONE  # type: ignore[union-attr]


def test_expired_pause_does_not_hold(home: Path) -> None:
    queue = open_queue(Home(home))
    queue.pause("g", "operator", "short", expires=time.time() - 1)
    assert queue.pauses("g") == [] and queue.paused_groups() == {}
    lease = queue.pause("g", "operator", "long")
    assert queue.paused_groups() == {"g": replace(lease, created=queue.pauses("g")[0].created)}
    queue.close()


def test_no_more_turns_run_at_once_than_the_concurrency(home: Path) -> None:
    import threading as th

    h = Home(home)
    store = GroupStore(h)
    gate = th.Event()
    active: list[int] = [0]
    peak: list[int] = [0]
    lock = th.Lock()

    def held(conn, request):  # type: ignore[no-untyped-def]
        from tests.fakerunner import echo

        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        gate.wait(30)
        with lock:
            active[0] -= 1
        echo(conn, request)

    runners = []
    for i in range(5):
        folder = store.add(GroupConfig(name=f"g{i}", creators=("op",))).folder
        runners.append(FakeRunner(h.runtime_dir(folder) / "runner.sock", held))
    config = OrchestratorConfig(project="t", mount_allowlist=home / "none.yaml")
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=2)
    daemon.start()
    try:
        ids = [
            daemon.submit(f"g{i % 5}", "hi", chat=f"c{i}", sender="op", channel="cli").id
            for i in range(10)
        ]
        wait_for(lambda: peak[0] == 2)
        assert len(daemon.active) == 2
        gate.set()
        for message_id in ids:
            assert daemon.wait(message_id, 60).state == DONE  # type: ignore[union-attr]
        assert peak[0] == 2  # over the whole run, never a third at once
    finally:
        gate.set()
        daemon.drain(2)
        for runner in runners:
            runner.close()
        daemon.relay.usage.close()
        daemon.queue.close()


def test_submit_refusals_say_exactly_why_and_what_to_do(setup) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.errors import DaemonStopping, SenderRefused

    daemon, _runners = setup
    with pytest.raises(SenderRefused) as refused:
        daemon.submit("good", "hi", chat="c", sender="mallory", channel="cli")
    assert (refused.value.message, refused.value.hint) == (
        "sender 'mallory' may not talk to group 'good'",
        "add the sender to creators or members in its group.yaml",
    )
    daemon.queue.pause("good", "operator", "maintenance", refuse_new=True)
    with pytest.raises(GroupPaused) as paused:
        daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    assert (paused.value.message, paused.value.hint) == (
        "maintenance",
        "resume it with: orchestrator group resume good",
    )
    daemon.queue.resume("good")
    daemon.queue.pause("good", "disk", "over its disk limit", refuse_new=True)
    with pytest.raises(GroupPaused) as paused:
        daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    assert (paused.value.message, paused.value.hint) == (
        "over its disk limit",
        "free space in groups/good/ (see: orchestrator status)",
    )
    daemon.queue.resume("good")
    # a pause that does not refuse new messages holds them instead
    daemon.queue.pause("good", "operator", "hold")
    held = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    assert (held.state, held.session, held.trust, held.channel) == (
        "queued",
        "cli.chat-c",
        "creator",
        "cli",
    )
    daemon.queue.resume("good")
    daemon.accepting = False
    with pytest.raises(DaemonStopping) as stopping:
        daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    assert (stopping.value.message, stopping.value.hint) == (
        "the daemon is shutting down and accepts no new messages",
        "send again once it is back",
    )


def _until(check, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    """Poll ``check()`` until it returns something true (a state-based wait)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError("the state was never reached")


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ({"ok": False, "error": "boom"}, "boom"),
        ({"ok": False}, "the runner refused the turn"),
        ({"ok": True, "replies": "not a list"}, "the runner's answer has no list of text replies"),
        ({"ok": True, "replies": ["a", 5]}, "the runner's answer has no list of text replies"),
        ({"ok": True}, "the runner's answer has no list of text replies"),
    ],
)
def test_a_runner_answer_that_is_not_a_result_is_a_failed_delivery(
    setup, answer: dict[str, Any], error: str
) -> None:  # type: ignore[no-untyped-def]
    daemon, runners = setup

    def refuse(conn: socket.socket, request: dict[str, Any]) -> None:
        wire.send_frame(conn, answer)

    runners["good"].behaviour = refuse
    message = daemon.submit("good", "hi", chat="c", sender="op", channel="cli", thread="t1")
    failed = _until(  # the failure is recorded: attempts counted and the error kept
        lambda: (m := daemon.queue.get(message.id)) is not None and m.last_error and m
    )
    assert (failed.state, failed.attempts, failed.last_error) == (QUEUED, 1, error)
    assert runners["good"].turns[0] == {
        "turn_id": message.id,
        "chat": "c",
        "thread": "t1",
        "channel": "cli",
        "session": "cli.chat-c",
        "sender": "op",
        "trust": "creator",
        "text": "hi",
        "said": None,
        # a creator: the shell too
        "tools": [
            "files",
            "messages",
            "memory",
            "tasks",
            "skills",
            "shell",
            "mcp-requests",
            "sessions",
        ],
        "window_tokens": None,  # the offline provider's runner knows its own
        "answer_tokens": None,
        "deadline_seconds": 3.0,  # the group's turn_timeout
        "timezone": "UTC",  # the group's: the day of its daily notes
    }
    _until(lambda: daemon.stats.failed >= 1)
    assert daemon.stats.delivered == 0


def test_a_delivered_turn_is_counted_and_its_group_measured(setup) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = setup
    message = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    done = daemon.wait(message.id, 30)
    assert done is not None and (done.state, done.replies) == (DONE, ("echo: hi",))
    _until(lambda: daemon.stats.delivered == 1)
    assert daemon.stats.failed == 0 and daemon.inflight == 0
    with daemon.cond:
        assert daemon.running.get("good") == 0 and not daemon.busy


def test_missing_credentials_are_reported_per_provider_in_use(
    home: Path, monkeypatch, caplog
) -> None:  # type: ignore[no-untyped-def]
    import logging

    monkeypatch.delenv("NOPE_KEY_FOR_TEST", raising=False)
    (home / "secrets.yaml").write_text("filed: sk-from-the-secrets-file\n")
    (home / "secrets.yaml").chmod(0o600)
    (home / "orchestrator.yaml").write_text(
        "secrets_file: secrets.yaml\n"
        "providers:\n"
        "  used:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "    key_env: NOPE_KEY_FOR_TEST\n    models: [m]\n"
        "  unused:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "    key_env: ALSO_MISSING_FOR_TEST\n    models: [m]\n"
        "  filed:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "    key_secret: filed\n    models: [m]\n"
    )
    h = Home(home)
    GroupStore(h).add(GroupConfig(name="fam", provider="used", model="m"))
    GroupStore(h).add(GroupConfig(name="work", provider="filed", model="m"))  # found
    config = load_config(h)
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=4)
    try:
        with caplog.at_level(logging.WARNING, logger="orchestrator.daemon"):
            problems = daemon.check_credentials()
        assert problems == ["provider 'used': environment variable NOPE_KEY_FOR_TEST is not set"]
        assert caplog.messages == [
            "provider 'used': environment variable NOPE_KEY_FOR_TEST is not set; turns of "
            "groups using it will fail"
        ]
        monkeypatch.setenv("NOPE_KEY_FOR_TEST", "k")
        assert daemon.check_credentials() == []
        # a reloaded configuration applies at once: the per-group share among them
        assert daemon.per_group == 2
        daemon.apply_config(replace(config, per_group_concurrency=3))
        assert daemon.per_group == 3
        assert daemon.relay.config.per_group_concurrency == 3
        assert daemon.runtime.config.per_group_concurrency == 3
    finally:
        daemon.relay.close()
        daemon.relay.usage.close()
        daemon.queue.close()


def test_retry_watch_and_listeners(setup) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = setup
    seen: list[str] = []
    daemon.add_listener(seen.append)
    daemon.add_listener(lambda message_id: 1 / 0)  # a failing listener harms no other
    message = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    snapshots = list(daemon.watch(message.id, 30))
    assert snapshots[-1].state == DONE and snapshots[-1].replies == ("echo: hi",)
    assert message.id in seen
    assert list(daemon.watch("no-such-id", 30)) == []
    assert daemon.retry(message.id) is False  # only a dead letter can be retried
    with daemon.watch_lock:
        assert daemon.watchers == {}  # every watcher cleaned up


def test_an_engine_away_never_dead_letters_a_message(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.daemon import core as daemon_module
    from orchestrator.errors import EngineUnreachable

    monkeypatch.setattr(daemon_module, "ENGINE_AWAY_RETRY_SECONDS", 0.05)

    class Away(FakeBackend):
        away = True
        asked = 0

        def inspect(self, name: str):  # type: ignore[no-untyped-def]
            if self.away:
                Away.asked += 1
                raise EngineUnreachable("the engine is not answering")
            return super().inspect(name)

    h = Home(home)
    GroupStore(h).add(GroupConfig(name="good", creators=("op",)))
    config = OrchestratorConfig(project="t", mount_allowlist=home / "none.yaml")
    backend = Away()
    runtime = GroupRuntime(h, config, backend, lambda: "img:1", ready=lambda _: True)
    daemon = Daemon(h, config, runtime, open_queue(h), concurrency=1)
    daemon.start()
    runner = None
    try:
        message = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
        _until(lambda: Away.asked >= 8)  # tried again and again, well past 5 attempts
        waiting = daemon.queue.get(message.id)
        assert waiting is not None and waiting.state in (QUEUED, INFLIGHT)
        assert waiting.attempts <= 1  # never counted
        _until(lambda: (m := daemon.queue.get(message.id)) and m.last_error)
        assert daemon.queue.get(message.id).last_error == "the engine is not answering"  # type: ignore[union-attr]
        runner = FakeRunner(h.runtime_dir("good") / "runner.sock")
        backend.away = False
        done = daemon.wait(message.id, 30)
        assert done is not None and (done.state, done.replies) == (DONE, ("echo: hi",))
        assert daemon.stats.failed == 0
    finally:
        daemon.drain(1)
        if runner is not None:
            runner.close()
        daemon.queue.close()


def test_failures_are_logged_with_their_reason(setup, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging
    import sqlite3

    daemon, runners = setup

    def refuse(conn: socket.socket, request: dict[str, Any]) -> None:
        wire.send_frame(conn, {"ok": False, "error": "boom"})

    runners["good"].behaviour = refuse
    with caplog.at_level(logging.WARNING, logger="orchestrator.daemon"):
        message = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
        _until(lambda: (m := daemon.queue.get(message.id)) is not None and m.last_error)
        _until(lambda: "now queued" in caplog.text)
    assert f"delivery of {message.id} to good failed (boom); now queued" in caplog.messages

    def broken_turn(message, group, cancel):  # type: ignore[no-untyped-def]
        raise ValueError("not a frame")

    monkeypatch.setattr(daemon, "_turn", broken_turn)
    second = daemon.submit("good", "again", chat="d", sender="op", channel="cli")
    failed = _until(lambda: (m := daemon.queue.get(second.id)) is not None and m.last_error and m)
    assert failed.last_error == "ValueError: not a frame"

    def no_commit(message_id: str, error: str, *, final: bool = False) -> str:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(daemon.queue, "fail", no_commit)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="orchestrator.daemon"):
        third = daemon.submit("good", "third", chat="e", sender="op", channel="cli")
        _until(lambda: "could not record" in caplog.text)
    assert f"could not record the failure of {third.id}: disk I/O error" in caplog.messages
    assert daemon.queue.get(third.id).state == INFLIGHT  # type: ignore[union-attr]


def test_disk_limits_pause_and_resume_at_the_limit(setup, monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    from orchestrator.daemon import core as daemon_module
    from orchestrator.groups.disk import over_limit_reason

    daemon, _runners = setup
    limit = daemon.runtime.store.load("good").config.container.disk_bytes
    used = {"good": limit, "evil": 0}
    monkeypatch.setattr(daemon_module, "group_disk_usage", lambda root, folder: used[folder])
    assert daemon.check_disk("good") is False  # at the limit is not over it
    assert daemon.pause_of("good") is None
    daemon.queue.pause("evil", "disk", "another group's pause", refuse_new=True)
    used["good"] = limit + 1
    with caplog.at_level(logging.INFO, logger="orchestrator.daemon"):
        assert daemon.check_disk("good") is True
        pause = daemon.pause_of("good")
        assert pause is not None and pause.holder == "disk" and pause.refuse_new
        assert pause.reason == over_limit_reason("good", limit + 1, limit)
        assert caplog.messages == [f"paused good: {pause.reason}"]
        assert daemon.check_disk("good") is True  # paused once, not again
        assert [p.holder for p in daemon.queue.pauses("good")] == ["disk"]
        daemon.queue.pause("good", "operator", "also held by hand")
        used["good"] = limit
        assert daemon.check_disk("good") is False
        assert caplog.messages[1:] == ["resumed good: its disk use is under its limit again"]
    assert [p.holder for p in daemon.queue.pauses("good")] == ["operator"]  # only its own
    assert daemon.check_disk("no-such-group") is False


def test_housekeeping_checks_the_groups_that_ran_or_every_group(setup, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.daemon import core as daemon_module

    daemon, _runners = setup
    checked: list[str] = []
    monkeypatch.setattr(
        daemon, "check_disk", lambda folder, disk_paused: checked.append(folder) or False
    )
    monkeypatch.setattr(daemon_module, "group_disk_usage", lambda root, folder: 0)
    with daemon.cond:
        daemon.disk_dirty = {"good"}
    daemon.housekeeping()
    assert checked == ["good"]
    checked.clear()
    daemon.housekeeping()
    assert checked == []  # nothing ran since
    daemon.queue.pause("evil", "disk", "over", refuse_new=True)
    daemon.queue.pause("good", "operator", "by hand")
    daemon.housekeeping()
    assert checked == ["evil"]  # a disk-paused group is looked at every round
    checked.clear()
    daemon.housekeeping(all_groups=True)
    assert checked == ["evil", "good"]


def test_housekeeping_keeps_the_reserve_and_prunes_chat_records_in_full_rounds(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reserve = idle.queue.reserve
    assert reserve is not None
    reserve.release()
    assert not reserve.path.exists()
    pruned: list[int] = []
    monkeypatch.setattr(idle.chats, "prune", lambda: pruned.append(1) or 3)
    with caplog.at_level("DEBUG", logger="orchestrator.daemon"):
        idle.housekeeping()
        assert reserve.path.exists()  # made again
        assert pruned == [] and caplog.messages == []
        idle.housekeeping(all_groups=True)
    assert pruned == [1]
    assert caplog.messages == ["forgot 3 old chat-app records (update ids, sent replies, codes)"]


def test_drain_stops_accepting_and_a_removed_listener_is_not_called(idle: Daemon) -> None:
    seen: list[str] = []
    idle.add_listener(seen.append)
    idle.remove_listener(seen.append)
    idle.remove_listener(seen.append)  # one not there: nothing happens
    idle._changed("m1")
    assert seen == []
    assert idle.drain(1) is True
    assert idle.accepting is False


class _Watched(threading.Condition):
    """The daemon's condition, noting how long each wait in drain was."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__(threading.RLock())
        self.daemon = daemon
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert self.daemon.active, "drain waited with no turn in flight"
        self.waits.append(timeout)
        return super().wait(timeout)


def test_drain_with_nothing_in_flight_does_not_wait_and_cancels_work_not_started(
    idle: Daemon,
) -> None:
    watched = idle.cond = _Watched(idle)
    release = threading.Event()
    running = [idle.pool.submit(release.wait, 10) for _ in range(idle.concurrency)]
    waiting = idle.pool.submit(lambda: None)  # no worker free: not started
    try:
        assert idle.drain(3600) is True  # returns at once, not after its hour
        assert watched.waits == []
        assert waiting.cancelled()  # work the pool had not started is dropped
        assert not any(f.cancelled() or f.done() for f in running)  # nor waited for
    finally:
        release.set()


def test_drain_looks_for_stop_now_every_tenth_of_a_second(idle: Daemon) -> None:
    message = idle.submit("good", "hi", chat="c", sender="op", channel="cli")
    delivery = _in_flight(idle, message)
    watched = idle.cond = _Watched(idle)
    stop_now = threading.Event()
    threading.Timer(0.3, stop_now.set).start()
    assert idle.drain(60, stop_now) is False  # stopped by stop_now, not the 60 s
    assert delivery.cancel.cancelled
    assert watched.waits and all(w is not None and w <= 0.1 for w in watched.waits)


def test_wait_and_watch_end_at_their_timeout(setup) -> None:  # type: ignore[no-untyped-def]
    daemon, _runners = setup
    assert daemon.wait("no-such-id", 0.1) is None
    daemon.queue.pause("good", "operator", "hold")
    held = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    snapshots = list(daemon.watch(held.id, 0.3))  # returns once the timeout passes
    assert snapshots and all(s.state == QUEUED for s in snapshots)
    assert daemon.run_due_tasks() == 0
    daemon.accepting = False
    assert daemon.run_due_tasks(time.time() + 10**9) == 0


@contextlib.contextmanager
def unstarted(home: Path, concurrency: int = 1, **config: Any) -> Iterator[Daemon]:
    """A daemon with the group "good", not started: its methods are called one at a
    time. It is closed on the way out."""
    h = Home(home)
    if not (GroupStore(h).root / "good").exists():
        GroupStore(h).add(GroupConfig(name="good", creators=("op",)))
    settings = OrchestratorConfig(project="t", mount_allowlist=home / "none.yaml", **config)
    runtime = GroupRuntime(h, settings, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    daemon = Daemon(h, settings, runtime, open_queue(h), concurrency=concurrency)
    try:
        yield daemon
    finally:
        daemon.relay.close()
        daemon.relay.usage.close()
        daemon.queue.close()


@pytest.fixture
def idle(home: Path) -> Iterator[Daemon]:
    with unstarted(home) as daemon:
        yield daemon


def test_a_deferral_is_logged_and_a_deferral_that_cannot_commit_says_so(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging
    import sqlite3

    from orchestrator.errors import EngineUnreachable
    from orchestrator.limits import ENGINE_AWAY_RETRY_SECONDS

    message = idle.submit("good", "hi", chat="c", sender="op", channel="cli")
    assert idle.queue.claim(message.id)
    with caplog.at_level(logging.WARNING, logger="orchestrator.daemon"):
        idle._defer(message, EngineUnreachable("the engine is not answering"))
    assert caplog.messages == [
        f"the engine is away (the engine is not answering); message {message.id} to good "
        f"waits {ENGINE_AWAY_RETRY_SECONDS:g}s, its attempts not counted"
    ]
    deferred = idle.queue.get(message.id)
    assert deferred is not None and deferred.state == QUEUED
    assert deferred.last_error == "the engine is not answering"

    def no_commit(*args: object) -> bool:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(idle.queue, "defer", no_commit)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="orchestrator.daemon"):
        idle._defer(message, EngineUnreachable("still away"))
    assert caplog.messages == [f"could not defer {message.id}: disk I/O error"]


def test_a_retried_dead_letter_tells_the_listeners(idle: Daemon) -> None:
    from orchestrator.limits import MAX_DELIVERY_ATTEMPTS

    message = idle.submit("good", "hi", chat="c", sender="op", channel="cli")
    for _ in range(MAX_DELIVERY_ATTEMPTS):
        assert idle.queue.claim(message.id)
        idle.queue.fail(message.id, "boom")
    seen: list[str] = []
    idle.add_listener(seen.append)
    dead = idle.queue.get(message.id)
    assert dead is not None and dead.state == "dead"
    assert idle.retry(message.id) is True
    assert seen == [message.id]
    assert idle.queue.get(message.id).state == QUEUED  # type: ignore[union-attr]


def test_a_watch_yields_each_change_until_its_timeout(idle: Daemon) -> None:
    message = idle.submit("good", "hi", chat="c", sender="op", channel="cli")
    watch = idle.watch(message.id, 0.8)
    first = next(watch)
    assert (first.state, first.replies) == (QUEUED, ())
    idle.queue.add_reply(message.id, 0, "working")
    idle._changed(message.id)  # a change within the timeout is yielded
    second = next(watch)
    assert second.replies == ("working",)
    rest = list(watch)  # then nothing changes: it ends at the timeout
    assert all(s.replies == ("working",) for s in rest)
    with idle.watch_lock:
        assert idle.watchers == {}


def test_drain_lets_a_turn_in_flight_finish(setup) -> None:  # type: ignore[no-untyped-def]
    daemon, runners = setup
    started = threading.Event()
    finish = threading.Event()

    def slow_echo(conn: socket.socket, request: dict[str, Any]) -> None:
        started.set()
        assert finish.wait(30)
        echo(conn, request)

    runners["good"].behaviour = slow_echo
    message = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
    assert started.wait(30)
    threading.Timer(0.3, finish.set).start()  # it ends while drain waits
    assert daemon.drain(30) is True
    done = daemon.queue.get(message.id)
    assert done is not None and (done.state, done.replies) == (DONE, ("echo: hi",))


def test_a_turns_memory_changes_are_also_attributed_to_its_groups_other_turns(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.daemon.core import Delivery
    from orchestrator.runtime.channel import Cancel

    GroupStore(idle.home).add(GroupConfig(name="other", creators=("op",)))
    mine = idle.submit("good", "one", chat="a", sender="op", channel="cli")
    same_group = idle.submit("good", "two", chat="b", sender="op", channel="cli")
    elsewhere = idle.submit("other", "three", chat="c", sender="op", channel="cli")
    with idle.cond:
        for message in (mine, same_group, elsewhere):
            idle.active[message.id] = Delivery(message, Cancel())
    recorded: list[Any] = []

    class Recorder:
        def record(self, provenance: Any) -> None:
            recorded.append(provenance)

    monkeypatch.setattr(idle, "history", lambda folder: Recorder())
    idle._record_turn(mine, idle.runtime.store.load("good"))
    [provenance] = recorded
    assert (provenance.message_id, provenance.also) == (mine.id, (same_group.id,))
    assert provenance.sender == "op" and provenance.chat == "a"


def test_a_history_that_fails_is_logged_and_never_fails_the_turn(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.memory.history import Gap

    class Broken:
        def record(self, provenance: Any) -> None:
            raise OSError("no space left")

        def changed(self) -> bool:
            raise OSError("cannot read the memory folder")

        def gap(self) -> Gap:
            return Gap(0.0, "OSError: no space left", 0.0)

    monkeypatch.setattr(idle, "history", lambda folder: Broken())
    message = idle.submit("good", "one", chat="a", sender="op", channel="cli")
    with caplog.at_level("WARNING", logger="orchestrator.daemon"):
        idle._record_turn(message, None)  # as after a turn whose group could not be loaded
        idle._record_outside("good", "t-good")
    assert caplog.messages == [
        "memory history of good not recorded after a turn (not recording since 1970-01-01 "
        "00:00:00 UTC: OSError: no space left): no space left",
        "memory history of good not checked before a turn: cannot read the memory folder",
    ]


def _in_flight(daemon: Daemon, message: Message) -> Any:
    from orchestrator.daemon.core import Delivery
    from orchestrator.runtime.channel import Cancel

    assert daemon.queue.claim(message.id)
    delivery = Delivery(message, Cancel())
    with daemon.cond:
        daemon.active[message.id] = delivery
        daemon.running[message.group] = daemon.running.get(message.group, 0) + 1
    return delivery


def test_a_delivery_passes_its_cancel_to_the_turn_and_counts_the_outcome(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = idle.submit("good", "hi", chat="c", sender="op", channel="cli")
    delivery = _in_flight(idle, message)
    given: list[Any] = []
    monkeypatch.setattr(
        idle,
        "_turn",
        lambda m, group, cancel: given.append(cancel) or {"ok": True, "replies": ["x"]},
    )
    idle._deliver(message)
    assert given == [delivery.cancel]
    assert idle.queue.get(message.id).state == DONE  # type: ignore[union-attr]
    assert (idle.stats.delivered, idle.stats.failed, idle.active) == (1, 0, {})
    assert idle.disk_dirty == {"good"}  # its disk use is measured at the next housekeeping
    second = idle.submit("good", "again", chat="d", sender="op", channel="cli")
    _in_flight(idle, second)
    idle._deliver(second)
    assert (idle.stats.delivered, idle.stats.failed, idle.running["good"]) == (2, 0, 0)
    assert idle.history("good") is idle.history("good")  # one history per group, kept


def test_a_failure_while_stopping_is_a_failure_unless_the_turn_was_cancelled(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(message: Message, group: Any, cancel: Any) -> dict[str, Any]:
        raise OSError("the runner went away")

    monkeypatch.setattr(idle, "_turn", fails)
    cancelled = idle.submit("good", "one", chat="a", sender="op", channel="cli")
    _in_flight(idle, cancelled).cancel.cancel()
    idle._deliver(cancelled)  # cancelled, not stopping: a failure like any other
    assert idle.queue.get(cancelled.id).state == QUEUED  # type: ignore[union-attr]
    idle.stopping.set()
    stopping = idle.submit("good", "two", chat="b", sender="op", channel="cli")
    _in_flight(idle, stopping)
    idle._deliver(stopping)  # stopping, not cancelled: a failure too
    failed = idle.queue.get(stopping.id)
    assert failed is not None and failed.state == QUEUED
    assert failed.last_error == "OSError: the runner went away"
    assert idle.stats.failed == 2
    both = idle.submit("good", "three", chat="c", sender="op", channel="cli")
    _in_flight(idle, both).cancel.cancel()
    idle._deliver(both)  # cancelled at shutdown: left in flight for the next start
    left = idle.queue.get(both.id)
    assert left is not None and (left.state, left.last_error) == (INFLIGHT, None)
    assert idle.stats.failed == 2


def test_a_turn_sends_its_cancel_and_frame_limit_and_starts_an_unavailable_runner(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.relay.turn import TurnRelay
    from orchestrator.runtime.channel import Cancel, RunnerUnavailable

    calls: list[dict[str, Any]] = []

    class Client:
        def turn(self, payload: dict[str, Any], **options: Any) -> dict[str, Any]:
            calls.append({"payload": payload, **options})
            if len(calls) == 1:
                raise RunnerUnavailable("nothing listens on runner.sock")
            return {"ok": True, "replies": ["hi"]}

    ensured: list[str] = []
    inspected: list[str] = []
    outside: list[Any] = []

    class Changed:
        def changed(self) -> bool:
            return True

        def record_outside(self, info: Any) -> None:
            outside.append(info)

    monkeypatch.setattr(idle.runtime, "runner", lambda group: Client())
    monkeypatch.setattr(idle.runtime, "ensure_running", lambda group: ensured.append(group.folder))
    monkeypatch.setattr(
        idle.runtime.backend, "inspect", lambda name: inspected.append(name) or f"info of {name}"
    )
    monkeypatch.setattr(idle, "history", lambda folder: Changed())
    message = idle.submit("good", "hello", chat="c", sender="op", channel="cli")
    cancel = Cancel()
    with caplog.at_level("INFO", logger="orchestrator.daemon"):
        group = idle.runtime.store.load("good")
        assert idle._turn(message, group, cancel) == {"ok": True, "replies": ["hi"]}
    name = idle.runtime.container_name(group)
    assert inspected == [name] and outside == [f"info of {name}"]  # changes made outside a turn
    assert ensured == ["good"] and set(idle.group_locks) == {"good"}
    assert caplog.messages == [
        "runner of good unavailable (nothing listens on runner.sock); ensuring its container"
    ]
    limit = TurnRelay(idle.relay, message, group, time.monotonic() + 60).frame_limit()
    for call in calls:
        assert call["cancel"] is cancel and call["request_limit"]() == limit
        assert call["handle"].__self__.message is message  # the turn's own relay
        assert call["payload"] == {
            "turn_id": message.id,
            "chat": "c",
            "thread": None,
            "channel": "cli",
            "session": "cli.chat-c",
            "sender": "op",
            "trust": message.trust,
            "text": "hello",
            "said": None,
            "tools": [
                "files",
                "messages",
                "memory",
                "tasks",
                "skills",
                "shell",
                "mcp-requests",
                "sessions",
            ],
            "window_tokens": None,
            "answer_tokens": None,
            "deadline_seconds": float(group.config.turn_timeout_seconds),
            "timezone": "UTC",
        }
    assert calls[0]["timeout"] == group.config.turn_timeout_seconds
    assert 0 < calls[1]["timeout"] <= group.config.turn_timeout_seconds


def test_a_turns_time_runs_from_its_delivery_not_from_its_containers_start(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Making the group's container (and flushing the one it replaces) comes before the
    turn's delivery: a start that takes the turn's whole time still leaves the turn all
    of it, at the runner and at the relay."""
    import types

    from orchestrator.daemon import core as daemon_module
    from orchestrator.runtime.channel import Cancel, RunnerUnavailable

    clock = [1000.0]
    fake_time = types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time)
    monkeypatch.setattr(daemon_module, "time", fake_time)
    given: list[tuple[float, float]] = []  # the runner's timeout, the relay's time left

    class Late:
        def turn(self, payload: dict[str, Any], **options: Any) -> dict[str, Any]:
            relay = options["handle"].__self__
            given.append((options["timeout"], relay.deadline - clock[0]))
            if len(given) == 1:
                raise RunnerUnavailable("nothing listens")
            return {"ok": True, "replies": ["hi"]}

    def slow_start(group: Any) -> None:
        clock[0] += group.config.turn_timeout_seconds + 5  # longer than the whole turn

    monkeypatch.setattr(idle.runtime, "runner", lambda group: Late())
    monkeypatch.setattr(idle.runtime, "ensure_running", slow_start)
    message = idle.submit("good", "hello", chat="c", sender="op", channel="cli")
    group = idle.runtime.store.load("good")
    timeout = group.config.turn_timeout_seconds
    assert idle._turn(message, group, Cancel()) == {"ok": True, "replies": ["hi"]}
    assert given == [(timeout, timeout), (timeout, timeout)]


def test_start_queues_again_what_was_in_flight_and_says_how_many(
    idle: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    message = idle.submit("good", "hi", chat="c", sender="op", channel="cli")
    assert idle.queue.claim(message.id)  # in flight when the last daemon stopped
    idle.queue.pause("good", "operator", "hold")  # nothing runs during the test
    with caplog.at_level("INFO", logger="orchestrator.daemon"):
        idle.start()
    try:
        assert "1 messages in flight at the last stop are queued again" in caplog.messages
        assert idle.queue.get(message.id).state == QUEUED  # type: ignore[union-attr]
    finally:
        idle.drain(1)


def test_start_logs_what_reconcile_did_but_adoptions_and_a_reconcile_that_failed(
    home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.errors import EngineUnreachable
    from orchestrator.runtime.reconcile import Action

    actions = [
        Action("adopt", "t-good", "good", "current"),
        Action("remove", "t-gone", None, "its group is gone"),
    ]
    for outcome in ("actions", "failure"):
        h = Home(home)
        config = OrchestratorConfig(project="t", mount_allowlist=home / "none.yaml")
        runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)

        def reconcile(outcome: str = outcome) -> list[Action]:
            if outcome == "failure":
                raise EngineUnreachable("the engine is not answering")
            return actions

        monkeypatch.setattr(runtime, "plan", reconcile)  # what reconcile plans
        daemon = Daemon(h, config, runtime, open_queue(h), concurrency=1)
        caplog.clear()
        with caplog.at_level("INFO", logger="orchestrator.daemon"):
            daemon.start()
        try:
            expected = (
                ["reconcile: remove t-gone (its group is gone)"]
                if outcome == "actions"
                else ["reconcile at start failed: the engine is not answering"]
            )
            assert caplog.messages == expected
        finally:
            daemon.drain(1)
            daemon.relay.close()
            daemon.relay.usage.close()
            daemon.queue.close()


def test_a_groups_history_keeps_the_configured_file_size(home: Path) -> None:
    with unstarted(home, history_max_file_bytes=12345) as daemon:
        assert daemon.history("good").max_file_bytes == 12345
        assert daemon.history("good") is daemon.history("good")
        assert daemon.history("good") is not daemon.history("other")


def test_the_daemons_threads_are_named_daemon_threads(idle: Daemon) -> None:
    idle.start()
    try:
        assert [t.name for t in idle.threads] == [
            "dispatch",
            "reconcile",
            "housekeeping",
            "scheduler",
        ]
        assert all(t.daemon and t.is_alive() for t in idle.threads)
    finally:
        idle.drain(1)


def test_a_dispatch_that_fails_is_logged_and_tried_again(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        idle.stopping.set()

    class Stopping(threading.Event):
        waits: list[float | None] = []

        def wait(self, timeout: float | None = None) -> bool:
            self.waits.append(timeout)
            return self.is_set()  # the pause itself is not waited out

    idle.stopping = Stopping()
    monkeypatch.setattr(idle, "_dispatch_once", once)
    with caplog.at_level("ERROR", logger="orchestrator.daemon"):
        idle._dispatch_loop()
    assert calls == [1, 1]
    assert caplog.messages == ["dispatch failed; trying again"]
    assert Stopping.waits == [1.0]  # one pause of a second before trying again


def test_dispatch_with_nothing_to_start_waits_until_the_next_backoff_ends_or_a_second(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    from orchestrator.daemon import core as daemon_module

    waits: list[float | None] = []
    monkeypatch.setattr(idle.cond, "wait", lambda timeout=None: waits.append(timeout))
    idle._dispatch_once()  # nothing queued
    message = idle.submit("good", "hi", chat="c", sender="op", channel="cli")
    assert idle.queue.claim(message.id)
    assert idle.queue.defer(message.id, 100, "the engine is away")  # runnable in 100 s
    idle._dispatch_once()  # its backoff ends beyond the second
    wake = idle.queue.next_wakeup()
    assert wake is not None
    now = [wake - 0.25]
    monkeypatch.setattr(
        daemon_module, "time", types.SimpleNamespace(time=lambda: now[0], monotonic=time.monotonic)
    )
    idle._dispatch_once()  # ends in a quarter of a second
    now[0] = wake + 5
    idle._dispatch_once()  # already past (the clocks differ): the shortest wait
    assert waits == [1.0, 1.0, pytest.approx(0.25), 0.01]
    assert idle.active == {}


def test_dispatch_counts_each_groups_running_turns(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with unstarted(home, concurrency=4) as daemon:  # two per group
        started: list[str] = []
        monkeypatch.setattr(daemon.pool, "submit", lambda fn, message: started.append(message.id))
        for chat in ("a", "b", "c"):
            daemon.submit("good", "hi", chat=chat, sender="op", channel="cli")
        daemon._dispatch_once()
        assert len(started) == 2 and daemon.running == {"good": 2}
        daemon._dispatch_once()  # the group is at its share: the third waits
        assert len(started) == 2


def test_a_message_not_claimed_after_the_read_gives_its_slot_back(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue is read without the condition held: a group paused between the read and
    the claim takes no turn, and the slot held for its message is free again."""
    with unstarted(home, concurrency=4) as daemon:
        started: list[str] = []
        monkeypatch.setattr(daemon.pool, "submit", lambda fn, message: started.append(message.id))
        message = daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
        read = daemon.queue.runnable

        def read_then_pause() -> list[Message]:
            found = read()
            daemon.queue.pause("good", "operator", "hold")
            return found

        monkeypatch.setattr(daemon.queue, "runnable", read_then_pause)
        told = daemon.changes
        daemon._dispatch_once()
        assert started == []
        assert (daemon.active, daemon.busy, daemon.running) == ({}, set(), {"good": 0})
        assert daemon.changes == told + 1  # the slot given back is told of
        assert daemon.queue.get(message.id).state == QUEUED  # type: ignore[union-attr]


def test_a_claim_that_cannot_commit_gives_back_every_slot_of_its_pass(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    with unstarted(home, concurrency=4) as daemon:
        started: list[str] = []
        monkeypatch.setattr(daemon.pool, "submit", lambda fn, message: started.append(message.id))
        first = daemon.submit("good", "one", chat="a", sender="op", channel="cli")
        second = daemon.submit("good", "two", chat="b", sender="op", channel="cli")
        claim = daemon.queue.claim

        def claim_once(message_id: str) -> bool:
            if message_id != first.id:
                raise sqlite3.OperationalError("disk I/O error")
            return claim(message_id)

        monkeypatch.setattr(daemon.queue, "claim", claim_once)
        with pytest.raises(sqlite3.OperationalError):
            daemon._dispatch_once()
        assert started == [first.id]  # claimed before the failure: it runs
        assert set(daemon.active) == {first.id} and daemon.running == {"good": 1}
        assert daemon.busy == {("good", first.session)}
        assert daemon.queue.get(second.id).state == QUEUED  # type: ignore[union-attr]


def test_a_change_told_while_the_queue_is_read_starts_the_next_pass_at_once(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float | None] = []
    monkeypatch.setattr(idle.cond, "wait", lambda timeout=None: waits.append(timeout))
    read = idle.queue.runnable

    def read_then_wake() -> list[Message]:
        found = read()
        idle.wake()  # as a message queued by another thread meanwhile
        return found

    monkeypatch.setattr(idle.queue, "runnable", read_then_wake)
    idle._dispatch_once()
    assert waits == []  # the pass did not wait: the next one reads again
    monkeypatch.setattr(idle.queue, "runnable", read)
    idle._dispatch_once()
    assert waits == [1.0]  # nothing told since its read: it waits


class _Ticks(threading.Event):
    """A stopping event whose wait returns at once: not set for ``rounds`` waits, then
    set. Each wait's timeout is noted."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) > self.rounds:
            self.set()
        return self.is_set()


def test_the_reconcile_loop_runs_every_minute_logs_changes_and_survives_a_failure(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.limits import RECONCILE_INTERVAL_SECONDS
    from orchestrator.runtime.reconcile import Action

    rounds = iter(
        [
            [Action("adopt", "t-good", "good", "running, config unchanged")],
            RuntimeError("the engine went away"),
            [Action("remove", "t-old", None, "no such group")],
        ]
    )

    def reconcile() -> list[Action]:
        answer = next(rounds)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(idle.runtime, "plan", reconcile)  # what reconcile plans
    idle.stopping = ticks = _Ticks(3)
    with caplog.at_level("INFO", logger="orchestrator.daemon"):
        idle._reconcile_loop()
    assert RECONCILE_INTERVAL_SECONDS == 60
    assert ticks.waits == [60] * 4
    assert caplog.messages == [
        "reconcile failed: the engine went away",
        "reconcile: remove t-old (no such group)",
    ]


def test_the_scheduler_loop_ticks_every_second_and_survives_a_failure(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.limits import SCHEDULER_TICK_SECONDS

    ran: list[int] = []

    def due() -> int:
        ran.append(1)
        if len(ran) == 1:
            raise RuntimeError("the tasks file is unreadable")
        return 0

    monkeypatch.setattr(idle, "run_due_tasks", due)
    idle.stopping = ticks = _Ticks(2)
    with caplog.at_level("WARNING", logger="orchestrator.daemon"):
        idle._scheduler_loop()
    assert SCHEDULER_TICK_SECONDS == 1
    assert ran == [1, 1] and ticks.waits == [1, 1, 1]
    assert caplog.messages == ["the scheduler failed; trying again: the tasks file is unreadable"]


def test_housekeeping_measures_every_group_first_and_then_once_a_minute(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import types

    from orchestrator.daemon import core as daemon_module
    from orchestrator.limits import DISK_CHECK_INTERVAL_SECONDS, HOUSEKEEPING_INTERVAL_SECONDS

    # a host booted 30 s ago (the monotonic clock counts from boot): the first round is
    # full all the same
    clock = iter([30.0, 31.0, 32.0, 89.9, 90.0, 90.0, 92.0])
    fake_time = types.SimpleNamespace(monotonic=lambda: next(clock), time=time.time)
    monkeypatch.setattr(daemon_module, "time", fake_time)
    rounds: list[bool] = []

    def housekeeping(*, all_groups: bool = False) -> None:
        rounds.append(all_groups)
        if len(rounds) == 2:
            raise RuntimeError("the state folder is gone")

    monkeypatch.setattr(idle, "housekeeping", housekeeping)
    idle.stopping = ticks = _Ticks(6)
    with caplog.at_level("WARNING", logger="orchestrator.daemon"):
        idle._housekeeping_loop()
    assert (HOUSEKEEPING_INTERVAL_SECONDS, DISK_CHECK_INTERVAL_SECONDS) == (2, 60)
    assert ticks.waits == [2] * 7
    assert rounds == [True, False, False, False, True, False]  # full at 30 s, then at 90 s
    assert caplog.messages == ["housekeeping failed: the state folder is gone"]


def test_submit_checks_refuses_and_keys_the_session_by_the_groups_mode(
    home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from orchestrator.errors import SenderRefused

    GroupStore(Home(home)).add(
        GroupConfig(name="together", creators=("op",), session_mode="shared")
    )
    with unstarted(home) as daemon:
        with pytest.raises(BadInput, match="thread contains the control character U"):
            daemon.submit("good", "hi", chat="c", sender="op", channel="cli", thread="t\x00")
        with caplog.at_level(logging.INFO, logger="orchestrator.daemon"):
            with pytest.raises(SenderRefused):
                daemon.submit("good", "hi", chat="c", sender="stranger", channel="matrix")
            confirmed = daemon.submit("good", "/confirm", chat="c", sender="op", channel="cli")
        assert confirmed.replies == ("Nothing is waiting for approval in this chat.",)
        assert caplog.messages == [
            "refused a message from 'stranger' to group good via matrix: unknown sender",
            "group good: /confirm from 'op': Nothing is waiting for approval in this chat.",
        ]
        shared = daemon.submit("together", "hi", chat="c", sender="op", channel="cli", thread="t")
        own = daemon.submit("good", "hi", chat="c", sender="op", channel="cli", thread="t")
        assert (shared.session, own.session) == ("shared", "cli.chat-c")  # per-chat: threads share
        daemon.queue.pause("good", "operator", "hold", refuse_new=True)
        with pytest.raises(GroupPaused, match=r"^hold$"):
            daemon.submit("good", "hi", chat="c", sender="op", channel="cli")
        daemon.submit("together", "hi", chat="c", sender="op", channel="cli")  # not paused


def test_a_listener_that_fails_is_logged_and_the_others_still_hear(
    idle: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    heard: list[str] = []

    def broken(message_id: str) -> None:
        raise RuntimeError("gone")

    idle.add_listener(broken)
    idle.add_listener(heard.append)
    with caplog.at_level("ERROR", logger="orchestrator.daemon"):
        idle._changed("m1")
    assert heard == ["m1"]
    assert caplog.messages == ["a message listener failed"]


def test_the_worker_count_defaults_to_four_a_cpu_and_at_least_eight(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    for cpus, workers in ((3, 12), (2, 8), (1, 8), (None, 8), (16, 64)):  # None: unknown
        monkeypatch.setattr(os, "cpu_count", lambda cpus=cpus: cpus)
        with unstarted(home, concurrency=None) as daemon:  # type: ignore[arg-type]
            assert (daemon.concurrency, daemon.per_group) == (workers, workers // 2)


def test_a_new_daemon_is_wired_to_its_home(home: Path) -> None:
    from orchestrator.channels.control import ControlChannel

    before = time.time()
    with unstarted(home, concurrency=8, per_group_concurrency=3) as daemon:
        after = time.time()
        assert before <= daemon.started <= after
        assert (daemon.concurrency, daemon.per_group) == (8, 3)  # the configured share
        # a message's change mid-turn (a reply the relay adds) reaches the listeners
        assert daemon.relay.notify == daemon._changed
        # only the service that runs a daemon gives it a way to reload its configuration
        answer = ControlChannel(daemon).answer({"op": "reload"})
        assert answer == {"ok": False, "error": "this daemon cannot reload"}
        assert daemon.relay.state_dir == Home(home).state_dir  # memory indexes live there
        assert daemon.relay.usage.path == daemon.queue.path
        names = {daemon.pool.submit(lambda: threading.current_thread().name).result()}
        assert all(n.startswith("turn_") for n in names)
        # the scheduler sees the trust a chat binding gives: a task's author unknown to
        # the group is a member in a chat bound with member trust, and nothing elsewhere
        daemon.chats.bind("tg", "telegram:-100", "good", trust="member")
        found = daemon.scheduler.lookup("good", "telegram:9", "telegram:tg", "telegram:-100", None)
        assert found is not None and found[1] == "member"
        elsewhere = daemon.scheduler.lookup(
            "good", "telegram:9", "telegram:tg", "telegram:-200", None
        )
        assert elsewhere is not None and elsewhere[1] is None
        # the binding is the account's: the same chat id on another channel is not bound
        other = daemon.scheduler.lookup("good", "telegram:9", "cli", "telegram:-100", None)
        assert other is not None and other[1] is None


def test_a_container_is_made_again_only_between_its_groups_turns(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runtime.reconcile import Action

    plan = [Action("recreate", "t.good", "good", "its spec changed")]
    monkeypatch.setattr(idle.runtime, "plan", lambda: plan)
    during: list[set[str]] = []

    def recreate(folder: str, name: str) -> None:
        during.append(set(idle.reconciling))
        # no turn of the group is dispatched while its container is made again
        idle._dispatch_once()
        assert idle.queue.get(waiting.id).state == QUEUED  # type: ignore[union-attr]

    monkeypatch.setattr(idle.runtime, "recreate_container", recreate)
    waiting = idle.submit("good", "hi", chat="c", sender="op", channel="cli")
    idle.busy.add(("good", "cli.chat-other"))  # a turn of the group is in flight
    idle._reconcile()
    assert during == []  # it waits for a later round
    idle.busy.clear()
    idle._reconcile()
    assert during == [{"good"}] and idle.reconciling == set()


def test_a_container_of_an_older_image_is_made_again_at_its_groups_next_turn(
    idle: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an upgrade reconcile keeps it (it would take every container at once); the
    group's next turn makes it again first, unless another turn of the group is running
    in it."""
    from orchestrator.runtime.reconcile import OLDER_IMAGE

    group = idle.runtime.store.load("good")
    monkeypatch.setattr(idle.runtime, "image", lambda: "img:0")  # the release before
    first = idle.runtime.ensure_running(group)
    monkeypatch.setattr(idle.runtime, "image", lambda: "img:1")  # this release's
    plan = idle._reconcile()
    assert [(a.kind, a.reason) for a in plan] == [("adopt", OLDER_IMAGE)]
    assert idle.outdated == {"good"}
    assert idle.runtime.backend.inspect(first.name).id == first.id  # type: ignore[union-attr]
    idle.running["good"] = 2  # another turn of the group runs in it: left for a later one
    idle._replace_outdated(group)
    assert idle.runtime.backend.inspect(first.name).image == "img:0"  # type: ignore[union-attr]
    idle.running["good"] = 1
    idle._replace_outdated(group)
    again = idle.runtime.backend.inspect(first.name)
    assert again is not None and again.image == "img:1" and again.id != first.id
    assert idle.outdated == set() and idle.reconciling == set()
    assert [a.kind for a in idle._reconcile()] == ["adopt"] and idle.outdated == set()
