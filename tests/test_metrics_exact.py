"""Exact behaviour of the metrics (the turn series, the scrape's collector, the listener),
rate-limited logging, the version refusals and the CLI's printing: each value, label and
message as it is, at the edges of each rule."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from orchestrator import lograte
from orchestrator.cli import output
from orchestrator.config import OrchestratorConfig
from orchestrator.config.metrics import MetricsConfig
from orchestrator.errors import OrchestratorError
from orchestrator.metrics import Metrics
from orchestrator.metrics.groups import OTHER, GroupSlots
from orchestrator.metrics.listener import (
    LISTENER_MAX_CONNECTIONS,
    LISTENER_TIMEOUT_SECONDS,
    Listener,
    _Handler,
)
from orchestrator.units import plural
from orchestrator.versions import (
    BACKUP_FORMAT_VERSION,
    RELEASE,
    FileTooNew,
    describe,
    file_version,
    too_new,
)
from tests.waits import record_joins

# --- the CLI's printing ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x00", "\\u{0000}"),
        ("\x08", "\\u{0008}"),
        ("\x0b", "\\u{000b}"),
        ("\x1f", "\\u{001f}"),
        ("\x1b[2J", "\\e[2J"),
        ("a\rb", "a\\rb"),
        ("\x7f", "\\u{007f}"),
        ("\x9f", "\\u{009f}"),
        ("\u202a\u202e", "\\u{202a}\\u{202e}"),
        ("\u2066\u2069", "\\u{2066}\\u{2069}"),
        ("\u200e\u200f", "\\u{200e}\\u{200f}"),
        ("\udc80", "\\x80"),
        ("\udcff", "\\xff"),
        ("\udc7f", "\\u{dc7f}"),  # a lone surrogate that no byte made
        ("\ud800", "\\u{d800}"),
        ("\udd00", "\\u{dd00}"),
        ("tab\tand\nline", "tab\tand\nline"),
        ("\u200d\u00a0é", "\u200d\u00a0é"),  # a joiner and what is printable stay
    ],
)
def test_safe_text_escapes_each_unsafe_character_as_itself(text: str, shown: str) -> None:
    assert output.safe_text(text) == shown


def test_safe_line_escapes_newlines_and_tabs_and_takes_any_object() -> None:
    assert output.safe_line("a\nb\tc\x1b") == "a\\nb\\tc\\e"
    assert output.safe_line(12) == "12"
    assert output.safe_line(None) == "None"


def _printed(fn: Any, *args: Any, color: bool = False) -> tuple[str, str]:
    @click.command()
    def cmd() -> None:
        fn(*args)

    result = CliRunner().invoke(cmd, color=color)
    assert result.exception is None, result.exception
    return result.stdout, result.stderr


def test_print_json_is_indented_in_the_given_order_and_shows_other_objects_as_text() -> None:
    out, _ = _printed(output.print_json, {"b": 1, "a": [Path("/x")]})
    assert out == '{\n  "b": 1,\n  "a": [\n    "/x"\n  ]\n}\n'
    out, _ = _printed(output.print_json, {"é": 1})
    assert out == '{\n  "\\u00e9": 1\n}\n'


def test_print_table_pads_columns_to_their_widest_cell_and_makes_the_header_bold() -> None:
    rows = [["alpha", 1, "x"], ["b", 22222, ""]]
    out, _ = _printed(output.print_table, ["NAME", "N", "NOTE"], rows)
    assert out == "NAME   N      NOTE\nalpha  1      x\nb      22222\n"
    bold, _ = _printed(output.print_table, ["NAME", "N"], [["a", "bb"]], color=True)
    assert bold == "\x1b[1mNAME  N\x1b[0m\na     bb\n"


def test_print_table_refuses_a_row_with_more_cells_than_headers() -> None:
    @click.command()
    def cmd() -> None:
        output.print_table(["A"], [["x", "y"]])

    result = CliRunner().invoke(cmd)
    assert isinstance(result.exception, ValueError)
    assert result.stdout == "A\n"  # the header, then no row cut to fit


def test_print_table_cells_are_one_safe_line_each() -> None:
    out, _ = _printed(output.print_table, ["A", "B"], [["x\ny", "\x1b]0;t\x07"]])
    assert out == "A     B\nx\\ny  \\e]0;t\\u{0007}\n"


def test_print_error_puts_error_and_hint_on_stderr_each_one_line() -> None:
    out, err = _printed(output.print_error, "bad\nthing", "do\tthis")
    assert (out, err) == ("", "error: bad\\nthing\nhint: do\\tthis\n")
    out, err = _printed(output.print_error, "bad", "")
    assert (out, err) == ("", "error: bad\n")


def test_plural() -> None:
    assert [plural(n, "finding") for n in (0, 1, 2)] == [
        "0 findings",
        "1 finding",
        "2 findings",
    ]


# --- rate-limited logging ---------------------------------------------------------------


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(lograte.time, "monotonic", c)
    return c


def _record(msg: object, name: str = "x", arg: object = 1) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, (arg,), None)


def test_a_kind_passes_burst_lines_per_window_then_says_how_many_were_suppressed(
    clock: Clock,
) -> None:
    limiter = lograte.RateLimitFilter(burst=3, window=10.0)
    records = [_record("fault %s", arg=i) for i in range(5)]
    assert [limiter.filter(r) for r in records] == [True, True, True, False, False]
    assert [r.getMessage() for r in records[:3]] == ["fault 0", "fault 1", "fault 2"]
    clock.now += 9.999
    assert limiter.filter(_record("fault %s")) is False
    clock.now += 0.001  # the window is over exactly at its length
    first = _record("fault %s")
    assert limiter.filter(first) is True
    assert first.msg == "fault %s [3 similar lines suppressed]"
    assert first.getMessage() == "fault 1 [3 similar lines suppressed]"
    # the new window counts from 1, and its first line said nothing of suppression
    assert [limiter.filter(_record("fault %s")) for _ in range(3)] == [True, True, False]
    clock.now += 10.0
    quiet = _record("fault %s")
    assert limiter.filter(quiet) is True and quiet.msg == "fault %s [1 similar lines suppressed]"
    clock.now += 10.0
    again = _record("fault %s")
    assert limiter.filter(again) is True and again.msg == "fault %s"


def test_the_kind_is_the_logger_and_the_template_not_the_arguments(clock: Clock) -> None:
    limiter = lograte.RateLimitFilter(burst=1, window=10.0)
    assert limiter.filter(_record("a %s", "one", 1)) is True
    assert limiter.filter(_record("a %s", "one", 2)) is False
    assert limiter.filter(_record("a %s", "two", 1)) is True
    assert limiter.filter(_record("b %s", "one", 1)) is True


def test_old_kinds_are_forgotten_only_past_ten_thousand(clock: Clock) -> None:
    limiter = lograte.RateLimitFilter(burst=1, window=10.0)
    for i in range(9_999):
        limiter.filter(_record(f"old {i}"))
    clock.now += 10.0  # every old kind's window is over
    limiter.filter(_record("new"))
    assert len(limiter._kinds) == 10_000  # at the bound, not past it: nothing forgotten
    limiter.filter(_record("newer"))
    assert set(limiter._kinds) == {("x", "new"), ("x", "newer")}


def test_the_defaults_are_the_limits(clock: Clock) -> None:
    limiter = lograte.RateLimitFilter()
    assert (limiter.burst, limiter.window) == (
        lograte.LOG_KIND_BURST,
        lograte.LOG_KIND_WINDOW_SECONDS,
    )


def test_past_ten_thousand_kinds_the_ones_whose_window_ended_are_forgotten(clock: Clock) -> None:
    limiter = lograte.RateLimitFilter(burst=1, window=10.0)
    for i in range(10_000):
        limiter.filter(_record(f"old {i}"))
    assert limiter.filter(_record("old 0")) is False  # suppressed once: remembered
    clock.now += 5.0
    limiter.filter(_record("recent"))
    assert len(limiter._kinds) == 10_001  # 10,001 kinds: over the bound, none old enough
    clock.now += 5.0  # the old ones' window is over, the recent one's is not
    kept = _record("old 0")
    assert limiter.filter(kept) is True
    assert kept.msg == "old 0 [1 similar lines suppressed]"
    assert set(limiter._kinds) == {("x", "recent"), ("x", "old 0")}
    assert limiter._kinds[("x", "old 0")] == [clock.now, 1, 0]


# --- versions ---------------------------------------------------------------------------


def test_too_new_names_the_file_its_version_this_release_and_what_it_reads() -> None:
    error = too_new("groups/a/group.yaml", 3, 1)
    assert isinstance(error, FileTooNew) and isinstance(error, OrchestratorError)
    assert error.message == (
        "groups/a/group.yaml is at version 3, written by a newer release than this "
        f"orchestrator ({RELEASE}, which reads up to version 1); nothing was changed"
    )
    assert error.hint == "run the release that wrote it, or a newer one (see CHANGELOG.md)"


@pytest.mark.parametrize(
    ("value", "version"),
    [(1, 1), (7, 7), (0, None), (-1, None), (True, None), (False, None), ("2", None), (2.0, None)],
)
def test_file_version_is_a_whole_number_from_one(value: object, version: int | None) -> None:
    assert file_version(value) == version


def test_describe_names_every_format() -> None:
    assert describe() == (
        "group.yaml 1, orchestrator.yaml 1, transcripts 1, home layout 2, "
        f"backups {BACKUP_FORMAT_VERSION}"
    )


# --- the listener of metrics.listen -----------------------------------------------------


def _taken_port() -> Iterator[tuple[socket.socket, int]]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s, s.getsockname()[1]
    s.close()


def _get(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read()


def _registry_with_one_counter() -> Any:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry(auto_describe=False)
    Counter("probe", "A probe.", registry=registry).inc(3)
    return registry


def test_closing_the_listener_waits_for_its_thread_as_long_as_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    listener = Listener(_registry_with_one_counter(), "127.0.0.1:0")
    thread = listener.thread
    asked = record_joins(monkeypatch, thread)
    listener.close()
    listener.close(timeout=0.5)
    assert asked == [5.0, 0.5]
    assert not thread.is_alive()


def test_the_listener_serves_the_registry_on_ipv4_from_a_daemon_thread(
    capfd: pytest.CaptureFixture[str],
) -> None:
    listener = Listener(_registry_with_one_counter(), "127.0.0.1:0")
    try:
        host, port = listener.server.server_address[:2]
        assert (host, listener.server.address_family) == ("127.0.0.1", socket.AF_INET)
        assert listener.listen == "127.0.0.1:0"
        assert listener.thread.name == "metrics-listener" and listener.thread.daemon
        assert listener.thread.is_alive()
        status, content_type, body = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert content_type == "text/plain; version=0.0.4; charset=utf-8"
        assert "probe_total 3.0" in body.decode()
        assert capfd.readouterr().err == ""  # no line per scrape
    finally:
        listener.close()
    assert not listener.thread.is_alive()
    assert listener.server.socket.fileno() == -1  # closed
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_close_stops_the_thread_even_when_closing_the_socket_fails() -> None:
    listener = Listener(_registry_with_one_counter(), "127.0.0.1:0")

    def failing() -> None:
        raise OSError("bad descriptor")

    listener.server.server_close = failing  # type: ignore[method-assign]
    try:
        listener.close()
        assert not listener.thread.is_alive()
    finally:
        listener.server.socket.close()


def test_the_listener_takes_an_ipv6_address_in_brackets() -> None:
    listener = Listener(_registry_with_one_counter(), "[::1]:0")
    try:
        assert listener.server.address_family == socket.AF_INET6
        port = listener.server.server_address[1]
        status, _, body = _get(f"http://[::1]:{port}/metrics")
        assert status == 200 and b"probe_total 3.0" in body
    finally:
        listener.close()


def test_the_host_loses_only_its_brackets(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.metrics import listener as listener_module

    made: list[tuple[tuple[str, int], socket.AddressFamily]] = []

    class Refused(OSError):
        strerror = "refused here"

    def server(address: tuple[str, int], family: socket.AddressFamily) -> Any:
        made.append((address, family))
        raise Refused()

    monkeypatch.setattr(listener_module, "_Server", server)
    for listen in ("XHOSTX:9100", "[X::1X]:9101"):
        with pytest.raises(OrchestratorError, match="refused here"):
            Listener(_registry_with_one_counter(), listen)
    assert made == [(("XHOSTX", 9100), socket.AF_INET), (("X::1X", 9101), socket.AF_INET6)]


def test_an_address_in_use_is_refused_naming_it() -> None:
    for _s, port in _taken_port():
        with pytest.raises(OrchestratorError) as caught:
            Listener(_registry_with_one_counter(), f"127.0.0.1:{port}")
        assert caught.value.message == (
            f"metrics.listen 127.0.0.1:{port}: cannot listen there (Address already in use)"
        )
        assert caught.value.hint == (
            "choose a free address in orchestrator.yaml, or remove metrics.listen"
        )


def test_a_request_must_arrive_within_the_listeners_timeout() -> None:
    assert _Handler.timeout == LISTENER_TIMEOUT_SECONDS == 10.0
    assert LISTENER_MAX_CONNECTIONS == 16


def test_a_connection_over_the_cap_is_closed_and_the_held_ones_are_served(
    capfd: pytest.CaptureFixture[str],
) -> None:
    listener = Listener(_registry_with_one_counter(), "127.0.0.1:0")
    port = listener.server.server_address[1]
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(16)]
    try:
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(10)  # accepted after the 16 (in order), and closed at once
        with contextlib.suppress(ConnectionResetError):
            assert extra.recv(1) == b""
        extra.close()
        for conn in held:  # each held one is a connection with a thread of its own
            conn.settimeout(10)
            conn.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            assert conn.recv(12) == b"HTTP/1.0 200"
            conn.close()
        status, _, _ = _get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        deadline = time.monotonic() + 10  # each thread gives its place back as it ends
        while listener.server.slots._value != 16 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert listener.server.slots._value == 16
        assert capfd.readouterr().err == ""  # closed as refused, not as a failed request
    finally:
        for conn in held:
            conn.close()
        listener.close()


# --- the turn series and the listener's start ------------------------------------------


class _Backend:
    def __init__(self, hosts: tuple[str, ...]) -> None:
        self.hosts = hosts
        self.asked: list[str] = []

    def listen_hosts(self, host: str) -> tuple[str, ...]:
        self.asked.append(host)
        return self.hosts


def _watched(metrics: MetricsConfig, hosts: tuple[str, ...] = ()) -> Any:
    config = OrchestratorConfig(project="t", mount_allowlist=Path("/none"), metrics=metrics)
    return SimpleNamespace(config=config, runtime=SimpleNamespace(backend=_Backend(hosts)))


class _NoDB:
    """A connection no test here reaches (the scrapes' store)."""


def _samples(metrics: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    from prometheus_client import generate_latest

    families = text_string_to_metric_families(
        generate_latest(_TurnsOnly(metrics.registry)).decode()
    )
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in families
        for s in family.samples
        if s.name == name
    }


class _TurnsOnly:
    """The registry's turn series without its scrape-time collector."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        yield from self.registry._names_to_collectors["orchestrator_turns"].collect()
        yield from self.registry._names_to_collectors[
            "orchestrator_turn_duration_seconds"
        ].collect()


def _turns_only(metrics: Metrics) -> None:
    """The registry's scrape-time collector taken out (no store is here to read)."""
    from orchestrator.metrics.collector import DaemonCollector

    for collector in list(metrics.registry._collector_to_names):
        if isinstance(collector, DaemonCollector):
            metrics.registry.unregister(collector)


def test_enabled_follows_the_settings_unless_given() -> None:
    on, off = MetricsConfig(enabled=True), MetricsConfig(enabled=False)
    assert Metrics(_watched(on), _NoDB()).enabled is True  # type: ignore[arg-type]
    assert Metrics(_watched(off), _NoDB()).enabled is False  # type: ignore[arg-type]
    assert Metrics(_watched(on), _NoDB(), enabled=False).enabled is False  # type: ignore[arg-type]
    assert Metrics(_watched(off), _NoDB(), enabled=True).enabled is True  # type: ignore[arg-type]


def test_the_group_slots_take_max_groups() -> None:
    metrics = Metrics(_watched(MetricsConfig(max_groups=3)), _NoDB())  # type: ignore[arg-type]
    assert metrics.slots.limit == 3 and metrics.slots.named == set()
    assert metrics.listeners == []


def test_turn_done_counts_by_group_and_outcome_and_observes_the_duration() -> None:
    metrics = Metrics(_watched(MetricsConfig(max_groups=1)), _NoDB())  # type: ignore[arg-type]
    metrics.turn_done("a", "delivered", 0.05)
    metrics.turn_done("a", "failed", 3.0)
    metrics.turn_done("b", "delivered", 0.2)  # no place left: under _other
    turns = _samples(metrics, "orchestrator_turns_total")
    assert turns == {
        (("group", "a"), ("outcome", "delivered")): 1.0,
        (("group", "a"), ("outcome", "failed")): 1.0,
        (("group", OTHER), ("outcome", "delivered")): 1.0,
    }
    buckets = _samples(metrics, "orchestrator_turn_duration_seconds_bucket")
    assert buckets[(("group", "a"), ("le", "0.05"))] == 1.0  # the bound is in its bucket
    assert buckets[(("group", "a"), ("le", "2.5"))] == 1.0
    assert buckets[(("group", "a"), ("le", "5.0"))] == 2.0
    assert buckets[(("group", "a"), ("le", "120.0"))] == 2.0
    assert buckets[(("group", OTHER), ("le", "0.25"))] == 1.0
    sums = _samples(metrics, "orchestrator_turn_duration_seconds_sum")
    assert sums == {(("group", "a"),): 3.05, (("group", OTHER),): 0.2}


def test_the_turn_series_names_and_help() -> None:
    metrics = Metrics(_watched(MetricsConfig()), _NoDB())  # type: ignore[arg-type]
    families = [(f.name, f.type, f.documentation) for f in _TurnsOnly(metrics.registry).collect()]
    assert families == [
        (
            "orchestrator_turns",
            "counter",
            "Turns that ended, by group and outcome (delivered, failed, deferred, cancelled).",
        ),
        (
            "orchestrator_turn_duration_seconds",
            "histogram",
            "Seconds from a turn's start to its end, by group.",
        ),
    ]


def test_turn_done_counts_nothing_when_off() -> None:
    metrics = Metrics(_watched(MetricsConfig(enabled=False)), _NoDB())  # type: ignore[arg-type]
    metrics.turn_done("a", "delivered", 1.0)
    assert _samples(metrics, "orchestrator_turns_total") == {}
    assert metrics.slots.named == set()


def test_turn_done_never_raises_and_logs_what_was_not_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics(_watched(MetricsConfig()), _NoDB())  # type: ignore[arg-type]

    def broken(group: str) -> str:
        raise RuntimeError("no")

    metrics.slots.label = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="orchestrator.metrics"):
        metrics.turn_done("fam", "delivered", 1.0)
    assert [(r.name, r.getMessage()) for r in caplog.records] == [
        ("orchestrator.metrics", "a turn of fam was not counted")
    ]
    assert caplog.records[0].exc_info is not None


def test_places_show_every_outcome_at_zero_and_drop_the_series_of_groups_that_lost_one() -> None:
    metrics = Metrics(_watched(MetricsConfig()), _NoDB())  # type: ignore[arg-type]
    metrics.turn_done("gone", "failed", 1.0)
    metrics._places({"a"}, {"gone"})
    turns = _samples(metrics, "orchestrator_turns_total")
    assert turns == {
        (("group", g), ("outcome", o)): 0.0
        for g in ("a", OTHER)
        for o in ("delivered", "failed", "deferred", "cancelled")
    }
    counts = _samples(metrics, "orchestrator_turn_duration_seconds_count")
    assert counts == {(("group", "a"),): 0.0, (("group", OTHER),): 0.0}


def test_exposition_gives_openmetrics_only_when_asked() -> None:
    metrics = Metrics(_watched(MetricsConfig()), _NoDB())  # type: ignore[arg-type]
    metrics.registry = _TurnsOnly(metrics.registry)  # type: ignore[assignment]
    body, content_type = metrics.exposition()
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert not body.endswith(b"# EOF\n")
    body, content_type = metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith(b"# EOF\n")


def test_start_listens_on_each_address_the_backend_gives_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watched = _watched(MetricsConfig(listen="0.0.0.0:0"), hosts=("127.0.0.1", "::1"))
    metrics = Metrics(watched, _NoDB())  # type: ignore[arg-type]
    _turns_only(metrics)
    try:
        with caplog.at_level(logging.INFO, logger="orchestrator.metrics"):
            metrics.start()
            metrics.start()  # already listening: nothing more
        assert watched.runtime.backend.asked == ["0.0.0.0"]
        assert [listener.listen for listener in metrics.listeners] == ["127.0.0.1:0", "[::1]:0"]
        metrics.turn_done("fam", "delivered", 1.0)
        port = metrics.listeners[0].server.server_address[1]
        _, _, body = _get(f"http://127.0.0.1:{port}/metrics")
        assert b'orchestrator_turns_total{group="fam",outcome="delivered"} 1.0' in body
        assert [r.getMessage() for r in caplog.records] == [
            "metrics listening on http://0.0.0.0:0/metrics (no token)"
        ]
    finally:
        metrics.stop()
    assert metrics.listeners == []


def test_start_gives_the_backend_the_host_without_brackets() -> None:
    watched = _watched(MetricsConfig(listen="[X::1X]:0"))  # the backend gives no address
    Metrics(watched, _NoDB()).start()  # type: ignore[arg-type]
    assert watched.runtime.backend.asked == ["X::1X"]


def test_start_strips_the_brackets_of_an_ipv6_listen_address() -> None:
    watched = _watched(MetricsConfig(listen="[::1]:0"), hosts=("::1",))
    metrics = Metrics(watched, _NoDB())  # type: ignore[arg-type]
    try:
        metrics.start()
        assert watched.runtime.backend.asked == ["::1"]
        assert metrics.listeners[0].server.address_family == socket.AF_INET6
    finally:
        metrics.stop()


@pytest.mark.parametrize(
    "settings", [MetricsConfig(enabled=False, listen="127.0.0.1:0"), MetricsConfig()]
)
def test_start_listens_nowhere_when_off_or_without_listen(settings: MetricsConfig) -> None:
    watched = _watched(settings, hosts=("127.0.0.1",))
    metrics = Metrics(watched, _NoDB())  # type: ignore[arg-type]
    metrics.start()
    assert metrics.listeners == [] and watched.runtime.backend.asked == []


def test_stop_closes_every_listener() -> None:
    watched = _watched(MetricsConfig(listen="0.0.0.0:0"), hosts=("127.0.0.1", "127.0.0.1"))
    metrics = Metrics(watched, _NoDB())  # type: ignore[arg-type]
    metrics.start()
    listeners = list(metrics.listeners)
    metrics.stop()
    assert [listener.thread.is_alive() for listener in listeners] == [False, False]


# --- the group slots ----------------------------------------------------------------------


def test_a_group_takes_a_free_place_on_its_turn_and_keeps_it() -> None:
    slots = GroupSlots(2)
    assert [slots.label(g) for g in ("a", "b", "c", "a")] == ["a", "b", OTHER, "a"]
    assert slots.named == {"a", "b"}
    assert (slots.of("a"), slots.of("c")) == ("a", OTHER)


def test_refresh_frees_removed_groups_fills_by_recent_activity_and_cuts_to_the_limit() -> None:
    slots = GroupSlots(2)
    slots.label("old")
    slots.label("gone")
    existing = {"old": 10.0, "new": 30.0, "mid": 20.0, "never": None}
    assert slots.refresh(existing, 2) == {"gone"}
    assert slots.named == {"old", "new"}  # old keeps its place; new was the most recent
    assert slots.refresh(existing, 3) == set()
    assert slots.named == {"old", "new", "mid"}
    assert slots.refresh(existing, 1) == {"old", "mid"}  # the least recently active go
    assert slots.named == {"new"} and slots.limit == 1
    assert slots.refresh(existing, 4) == set()
    assert slots.named == {"new", "mid", "old", "never"}


def test_a_group_never_active_comes_after_any_activity() -> None:
    slots = GroupSlots(1)
    slots.refresh({"a": None, "b": 0.5}, 1)
    assert slots.named == {"b"}


def test_refresh_breaks_ties_of_activity_by_name() -> None:
    slots = GroupSlots(1)
    assert slots.refresh({"b": None, "a": None, "c": 0.0}, 1) == set()
    assert slots.named == {"a"}
    assert slots.refresh({"b": 5.0, "a": 5.0}, 1) == set()
    assert slots.named == {"a"}
    assert slots.refresh({"b": 5.0, "a": 5.0}, 0) == {"a"}
    assert slots.named == set()
    assert slots.label("b") == OTHER


def test_label_is_safe_from_many_threads_at_once() -> None:
    slots = GroupSlots(5)
    got: list[str] = []
    lock = threading.Lock()

    def take(group: str) -> None:
        label = slots.label(group)
        with lock:
            got.append(label)

    threads = [threading.Thread(target=take, args=(f"g{i}",)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(slots.named) == 5 and got.count(OTHER) == 35


def test_print_json_keeps_unicode_escaped_as_json_text() -> None:
    out, _ = _printed(output.print_json, ["a\x1bb"])
    assert json.loads(out) == ["a\x1bb"] and "\\u001b" in out


# --- the scrape's collector ----------------------------------------------------------------

from orchestrator.metrics import collector as collector_module  # noqa: E402
from orchestrator.metrics.collector import DaemonCollector  # noqa: E402
from orchestrator.store.metrics import GroupQueue, UsageTotal  # noqa: E402
from orchestrator.store.usage import WEB  # noqa: E402


def _group(disk: int) -> Any:
    return SimpleNamespace(config=SimpleNamespace(container=SimpleNamespace(disk_bytes=disk)))


def _listing(**groups: Any) -> list[Any]:
    """GroupListing-like rows: folder -> its group (None: a folder that is not one)."""
    return [
        SimpleNamespace(folder=f, path=Path("/g") / f, group=g, problem=None)
        for f, g in groups.items()
    ]


class _Store:
    """The store a scrape reads: the queue by group, and usage rows after an id."""

    def __init__(self) -> None:
        self.queues: dict[str, GroupQueue] = {}
        self.rows: list[UsageTotal] = []
        self.last_id = 0
        self.asked: list[int] = []

    def queue_by_group(self) -> dict[str, GroupQueue]:
        return self.queues

    def usage_after(self, after: int) -> tuple[int, list[UsageTotal]]:
        self.asked.append(after)
        rows, self.rows = self.rows, []
        self.last_id += len(rows)
        return self.last_id, rows


class _Engine:
    def __init__(self) -> None:
        self.containers: list[Any] = []
        self.fail: OrchestratorError | None = None
        self.asked: list[Any] = []

    def list(self, labels: Any) -> list[Any]:
        self.asked.append(labels)
        if self.fail is not None:
            raise self.fail
        return self.containers


class Rig:
    def __init__(self, max_groups: int = 10, **groups: Any) -> None:
        self.groups = groups
        self.activity: dict[str, float | None] = {}
        self.engine = _Engine()
        self.runtime = SimpleNamespace(
            store=SimpleNamespace(listing=lambda: _listing(**self.groups), root=Path("/g")),
            activity=SimpleNamespace(last=lambda f: self.activity.get(f)),
            backend=self.engine,
            project_labels={"org.orchestrator.project": "t"},
            dead_sockets={},
            starts={},
        )
        self.pauses: list[Any] = []
        self.health: dict[str, dict[str, object]] = {}
        self.daemon = SimpleNamespace(
            config=OrchestratorConfig(
                project="t",
                mount_allowlist=Path("/none"),
                metrics=MetricsConfig(max_groups=max_groups),
            ),
            queue=SimpleNamespace(pauses=lambda: self.pauses),
            runtime=self.runtime,
            chats=SimpleNamespace(health=lambda name: self.health.get(name)),
            started=1234.5,
            accepting=True,
        )
        self.store = _Store()
        self.places: list[tuple[set[str], set[str]]] = []
        self.collector = DaemonCollector(
            self.daemon,  # type: ignore[arg-type]
            self.store,  # type: ignore[arg-type]
            GroupSlots(max_groups),
            lambda named, dropped: self.places.append((set(named), set(dropped))),
        )

    def scrape(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        """name -> sorted labels -> value, for every sample of one scrape."""
        out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
        for family in self.collector.collect():
            for sample in family.samples:
                out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
        return out

    def families(self) -> list[tuple[str, str, str]]:
        return [(f.name, f.type, f.documentation) for f in self.collector.collect()]


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """group_disk_usage faked (what a scrape measures, and when), on a stepped clock."""
    state: dict[str, Any] = {"sizes": {}, "measured": [], "now": 500.0, "step": 0.0, "times": []}

    def usage(root: Path, folder: str) -> int:
        state["measured"].append((root, folder))
        return int(state["sizes"].get(folder, 0))

    def monotonic() -> float:
        if state["times"]:  # the clock's next readings, when given
            state["now"] = state["times"].pop(0)
        state["now"] += state["step"]
        return float(state["now"])

    monkeypatch.setattr(collector_module, "group_disk_usage", usage)
    monkeypatch.setattr(collector_module.time, "monotonic", monotonic)
    monkeypatch.setattr(collector_module.time, "time", lambda: 10_000.0)
    return state


def L(**labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def test_describe_reads_nothing() -> None:
    rig = Rig()
    assert list(rig.collector.describe()) == []
    assert rig.store.asked == []


def test_every_family_has_its_name_type_and_help(disk: dict[str, Any]) -> None:
    rig = Rig(a=_group(1))
    assert rig.families() == [
        ("orchestrator_daemon_start_time_seconds", "gauge", "When the daemon started (Unix time)."),
        ("orchestrator_daemon_accepting", "gauge", "1 while the daemon accepts new messages."),
        ("orchestrator_groups", "gauge", "Group folders under groups/."),
        (
            "orchestrator_queue_messages",
            "gauge",
            "Messages waiting (queued) or being delivered (inflight), by group.",
        ),
        (
            "orchestrator_queue_oldest_age_seconds",
            "gauge",
            "Age of the oldest queued message, by group (0 when none is queued).",
        ),
        ("orchestrator_dead_letters", "gauge", "Dead-lettered messages, by group."),
        (
            "orchestrator_model_calls",
            "counter",
            "Model calls the relay made or refused (a budget), by outcome.",
        ),
        (
            "orchestrator_model_tokens",
            "counter",
            "Tokens of model calls, by kind: input, output, cache_read, cache_write.",
        ),
        (
            "orchestrator_model_cost",
            "counter",
            "Cost of model calls with prices, in the currency of the label.",
        ),
        (
            "orchestrator_web_requests",
            "counter",
            "Web fetches and searches the host made for turns, by outcome.",
        ),
        (
            "orchestrator_engine_up",
            "gauge",
            "1 when the container engine answered this scrape.",
        ),
        (
            "orchestrator_containers",
            "gauge",
            "Group containers by state: running, stopped (any other state), absent.",
        ),
        (
            "orchestrator_container_recreations",
            "counter",
            "Containers made again because their runner stopped answering, since the "
            "daemon started.",
        ),
        (
            "orchestrator_container_starts",
            "counter",
            "Containers the daemon made or started since it began, by why: created, "
            "drifted (configuration changed), started (it had stopped), restarted, "
            "dead-runner (its runner stopped answering).",
        ),
        (
            "orchestrator_group_disk_bytes",
            "gauge",
            "Disk the groups' memory, sessions, files and history take, by group.",
        ),
        (
            "orchestrator_group_disk_limit_bytes",
            "gauge",
            "The groups' disk limits (group.yaml container.disk), by group.",
        ),
        (
            "orchestrator_pauses",
            "gauge",
            "Pauses in force, by group and holder (operator, disk, budget, ...).",
        ),
        ("orchestrator_channel_up", "gauge", "1 when the chat-app account is connected."),
        (
            "orchestrator_channel_messages",
            "counter",
            "Messages a chat-app account received (in) and sent (out) since the daemon started.",
        ),
    ]


def test_the_daemons_own_series(disk: dict[str, Any]) -> None:
    rig = Rig(a=_group(1), b=None)  # b: a folder that is not a group still counts
    samples = rig.scrape()
    assert samples["orchestrator_daemon_start_time_seconds"] == {(): 1234.5}
    assert samples["orchestrator_daemon_accepting"] == {(): 1.0}
    assert samples["orchestrator_groups"] == {(): 2.0}
    rig.daemon.accepting = False
    assert rig.scrape()["orchestrator_daemon_accepting"] == {(): 0.0}


def test_places_are_brought_in_line_before_the_series_by_last_activity(
    disk: dict[str, Any],
) -> None:
    rig = Rig(max_groups=2, a=_group(1), b=_group(1), c=_group(1))
    rig.activity = {"a": 5.0, "b": 7.0, "c": 6.0}
    rig.scrape()
    assert rig.places == [({"b", "c"}, set())]
    del rig.groups["c"]
    rig.daemon.config = OrchestratorConfig(
        project="t", mount_allowlist=Path("/none"), metrics=MetricsConfig(max_groups=2)
    )
    samples = rig.scrape()
    assert rig.places[-1] == ({"a", "b"}, {"c"})
    assert set(samples["orchestrator_dead_letters"]) == {L(group="a"), L(group="b"), L(group=OTHER)}


def test_the_queue_by_group_with_the_rest_summed_under_other(disk: dict[str, Any]) -> None:
    rig = Rig(max_groups=1, a=_group(1), b=_group(1), c=_group(1))
    rig.activity = {"a": 9.0}
    rig.store.queues = {
        "a": GroupQueue(queued=2, inflight=1, dead=3, oldest_queued=9_990.0),
        "b": GroupQueue(queued=1, inflight=0, dead=1, oldest_queued=9_900.0),
        "c": GroupQueue(queued=4, inflight=2, dead=0, oldest_queued=9_950.0),
        "removed": GroupQueue(queued=0, inflight=0, dead=5, oldest_queued=None),
    }
    samples = rig.scrape()
    assert samples["orchestrator_queue_messages"] == {
        L(group="a", state="queued"): 2.0,
        L(group="a", state="inflight"): 1.0,
        L(group=OTHER, state="queued"): 5.0,
        L(group=OTHER, state="inflight"): 2.0,
    }
    assert samples["orchestrator_dead_letters"] == {L(group="a"): 3.0, L(group=OTHER): 6.0}
    # the oldest of the groups summed: 10,000 - 9,900
    assert samples["orchestrator_queue_oldest_age_seconds"] == {
        L(group="a"): 10.0,
        L(group=OTHER): 100.0,
    }


def test_an_oldest_message_from_the_future_is_zero_seconds_old(disk: dict[str, Any]) -> None:
    rig = Rig(a=_group(1))
    rig.store.queues = {"a": GroupQueue(queued=1, oldest_queued=10_050.0)}
    assert rig.scrape()["orchestrator_queue_oldest_age_seconds"] == {
        L(group="a"): 0.0,
        L(group=OTHER): 0.0,
    }


def _total(group: str, **fields: Any) -> UsageTotal:
    base: dict[str, Any] = {
        "group": group,
        "provider": "p",
        "model": "m",
        "purpose": "turn",
        "outcome": "ok",
        "currency": None,
        "calls": 1,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "cost": None,
    }
    base.update(fields)
    return UsageTotal(**base)


def test_usage_totals_add_the_rows_since_the_last_scrape(disk: dict[str, Any]) -> None:
    rig = Rig(max_groups=1, a=_group(1), b=_group(1))
    rig.activity = {"a": 9.0}
    rig.store.rows = [
        _total(
            "a",
            calls=2,
            input_tokens=10,
            output_tokens=3,
            cache_read_tokens=4,
            cache_write_tokens=5,
            cost=0.5,
            currency="EUR",
        ),
        _total("b", calls=1, input_tokens=7, cost=0.25, currency="EUR"),
        _total("gone", calls=1, input_tokens=1, cost=1.0, currency="EUR"),
        _total("a", calls=1, cost=2.0, currency=None),  # a cost without a currency: none
        _total("a", calls=1, cost=None, currency="USD"),  # and a currency without one
        _total("a", purpose=WEB, model="fetch", outcome="ok", calls=3, input_tokens=99),
        _total("b", purpose=WEB, model="search", outcome="failed", calls=1),
        _total("a", purpose=WEB, model="fetch", outcome="ok", calls=2),
        _total("a", calls=0, cost=0.125, currency="EUR"),
    ]
    samples = rig.scrape()
    assert rig.store.asked == [0]
    turn = {"provider": "p", "model": "m", "purpose": "turn"}
    assert samples["orchestrator_model_calls_total"] == {
        L(group="a", outcome="ok", **turn): 4.0,
        L(group=OTHER, outcome="ok", **turn): 2.0,
    }
    assert samples["orchestrator_model_tokens_total"] == {
        L(group="a", kind="input", **turn): 10.0,
        L(group="a", kind="output", **turn): 3.0,
        L(group="a", kind="cache_read", **turn): 4.0,
        L(group="a", kind="cache_write", **turn): 5.0,
        L(group=OTHER, kind="input", **turn): 8.0,
        L(group=OTHER, kind="output", **turn): 0.0,
        L(group=OTHER, kind="cache_read", **turn): 0.0,
        L(group=OTHER, kind="cache_write", **turn): 0.0,
    }
    assert samples["orchestrator_model_cost_total"] == {
        L(group="a", currency="EUR", **turn): 0.625,
        L(group=OTHER, currency="EUR", **turn): 1.25,
    }
    assert samples["orchestrator_web_requests_total"] == {
        L(group="a", request="fetch", outcome="ok"): 5.0,
        L(group=OTHER, request="search", outcome="failed"): 1.0,
    }
    rig.store.rows = [_total("a", calls=5, input_tokens=1)]
    again = rig.scrape()
    assert rig.store.asked == [0, 9]  # after the last row read
    assert again["orchestrator_model_calls_total"][L(group="a", outcome="ok", **turn)] == 9.0
    assert again["orchestrator_model_tokens_total"][L(group="a", kind="input", **turn)] == 11.0
    assert (
        again["orchestrator_web_requests_total"][L(group="a", request="fetch", outcome="ok")] == 5.0
    )


def test_usage_series_come_sorted_by_their_labels(disk: dict[str, Any]) -> None:
    rig = Rig(z=_group(1), a=_group(1))
    rig.store.rows = [_total("z", outcome="ok"), _total("a", outcome="refused"), _total("a")]
    calls = next(f for f in rig.collector.collect() if f.name == "orchestrator_model_calls")
    assert [(s.labels["group"], s.labels["outcome"]) for s in calls.samples] == [
        ("a", "ok"),
        ("a", "refused"),
        ("z", "ok"),
    ]


def test_containers_by_state_recreations_and_starts(disk: dict[str, Any]) -> None:
    rig = Rig(max_groups=2, a=_group(1), b=_group(1), c=_group(1), d=None, e=None)
    rig.activity = {"a": 9.0, "b": 8.0}
    rig.engine.containers = [
        SimpleNamespace(group="a", running=True),
        SimpleNamespace(group="b", running=False),
        SimpleNamespace(group="c", running=True),
        SimpleNamespace(group="", running=True),  # not a group's: left out
    ]
    rig.runtime.dead_sockets = {"a": 2, "c": 1, "gone": 4}
    rig.runtime.starts = {
        ("b", "created"): 1,
        ("c", "drifted"): 2,
        ("gone", "drifted"): 1,
        ("a", "started"): 3,
    }
    samples = rig.scrape()
    assert rig.engine.asked == [{"org.orchestrator.project": "t"}]
    assert samples["orchestrator_engine_up"] == {(): 1.0}
    assert samples["orchestrator_containers"] == {
        L(group="a", state="running"): 1.0,
        L(group="a", state="stopped"): 0.0,
        L(group="a", state="absent"): 0.0,
        L(group="b", state="running"): 0.0,
        L(group="b", state="stopped"): 1.0,
        L(group="b", state="absent"): 0.0,
        L(group=OTHER, state="running"): 1.0,
        L(group=OTHER, state="stopped"): 0.0,
        L(group=OTHER, state="absent"): 2.0,  # d and e: folders with no container
    }
    assert samples["orchestrator_container_recreations_total"] == {
        L(group="a"): 2.0,
        L(group="b"): 0.0,
        L(group=OTHER): 5.0,
    }
    assert samples["orchestrator_container_starts_total"] == {
        L(group="a", why="started"): 3.0,
        L(group="b", why="created"): 1.0,
        L(group=OTHER, why="drifted"): 3.0,
    }
    starts = next(f for f in rig.collector.collect() if f.name == "orchestrator_container_starts")
    assert [(s.labels["group"], s.labels["why"]) for s in starts.samples] == [
        (OTHER, "drifted"),
        ("a", "started"),
        ("b", "created"),
    ]


def test_an_engine_that_does_not_answer_gives_engine_up_zero_and_nothing_more(
    disk: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(a=_group(1))
    rig.engine.fail = OrchestratorError("the engine is away")
    with caplog.at_level(logging.DEBUG, logger="orchestrator.metrics"):
        samples = rig.scrape()
    assert samples["orchestrator_engine_up"] == {(): 0.0}
    for name in ("orchestrator_containers", "orchestrator_container_starts_total"):
        assert name not in samples
    assert "orchestrator_group_disk_bytes" in samples  # the other series go on
    assert [r.getMessage() for r in caplog.records] == [
        "metrics: the engine did not list containers: the engine is away"
    ]


def test_disk_is_measured_when_a_minute_old_and_summed_against_the_limits(
    disk: dict[str, Any],
) -> None:
    rig = Rig(max_groups=1, a=_group(100), b=_group(1000), c=_group(10), d=None)
    rig.activity = {"a": 9.0}
    disk["sizes"] = {"a": 7, "b": 70, "c": 700, "d": 7000}
    samples = rig.scrape()
    assert sorted(disk["measured"]) == [(Path("/g"), "a"), (Path("/g"), "b"), (Path("/g"), "c")]
    assert samples["orchestrator_group_disk_bytes"] == {L(group="a"): 7.0, L(group=OTHER): 770.0}
    assert samples["orchestrator_group_disk_limit_bytes"] == {
        L(group="a"): 100.0,
        L(group=OTHER): 1010.0,
    }
    disk["measured"].clear()
    disk["sizes"]["a"] = 8
    disk["now"] += 59.999
    assert rig.scrape()["orchestrator_group_disk_bytes"][L(group="a")] == 7.0
    assert disk["measured"] == []
    disk["now"] += 0.001  # a minute exactly: measured again
    assert rig.scrape()["orchestrator_group_disk_bytes"][L(group="a")] == 8.0
    assert sorted(f for _, f in disk["measured"]) == ["a", "b", "c"]


def test_a_scrape_measures_the_oldest_first_for_at_most_two_seconds(
    disk: dict[str, Any],
) -> None:
    rig = Rig(d=_group(1), c=_group(1), b=_group(1), a=_group(1))  # listed d first
    disk["sizes"] = {"a": 1, "b": 2, "c": 3, "d": 4}
    disk["step"] = 0.5  # each read of the clock half a second later
    first = rig.scrape()
    # started at t, then each check and each measure reads the clock: two measured, in
    # the listing's order (none was measured before)
    assert [f for _, f in disk["measured"]] == ["d", "c"]
    assert first["orchestrator_group_disk_bytes"] == {
        L(group="a"): 0.0,  # not measured yet: nothing, and no limit either
        L(group="b"): 0.0,
        L(group="c"): 3.0,
        L(group="d"): 4.0,
        L(group=OTHER): 0.0,
    }
    assert first["orchestrator_group_disk_limit_bytes"][L(group="a")] == 0.0
    assert first["orchestrator_group_disk_limit_bytes"][L(group="d")] == 1.0
    disk["measured"].clear()
    rig.scrape()
    assert [f for _, f in disk["measured"]] == ["b", "a"]  # never measured: first
    disk["measured"].clear()
    disk["step"] = 0.0
    disk["now"] += 60.0
    rig.scrape()
    assert [f for _, f in disk["measured"]] == ["d", "c", "b", "a"]  # oldest first


def test_the_disk_budget_ends_at_two_seconds_exactly(disk: dict[str, Any]) -> None:
    rig = Rig(a=_group(1), b=_group(1))
    # the scrape's start, the first check, a's measure, then the second check 2 s on
    disk["times"] = [100.0, 100.0, 100.0, 102.0]
    rig.scrape()
    assert [f for _, f in disk["measured"]] == ["a"]


def test_the_disk_of_a_removed_group_is_forgotten(disk: dict[str, Any]) -> None:
    rig = Rig(a=_group(1), b=_group(1))
    rig.scrape()
    assert set(rig.collector.disk) == {"a", "b"}
    del rig.groups["b"]
    rig.scrape()
    assert set(rig.collector.disk) == {"a"}


def test_pauses_by_group_and_holder(disk: dict[str, Any]) -> None:
    rig = Rig(max_groups=1, a=_group(1), b=_group(1))
    rig.activity = {"a": 1.0}
    rig.pauses = [
        SimpleNamespace(group="b", holder="operator"),
        SimpleNamespace(group="a", holder="disk"),
        SimpleNamespace(group="a", holder="budget"),
        SimpleNamespace(group="gone", holder="operator"),
    ]
    pauses = next(f for f in rig.collector.collect() if f.name == "orchestrator_pauses")
    assert [(s.labels["group"], s.labels["holder"], s.value) for s in pauses.samples] == [
        (OTHER, "operator", 2.0),
        ("a", "budget", 1.0),
        ("a", "disk", 1.0),
    ]


def test_each_chat_account_from_the_health_it_recorded(disk: dict[str, Any]) -> None:
    rig = Rig()
    accounts = {
        "tg": SimpleNamespace(kind="telegram"),
        "mx": SimpleNamespace(kind="matrix"),
        "new": SimpleNamespace(kind="slack"),
    }
    rig.daemon.config = SimpleNamespace(metrics=MetricsConfig(), channel_accounts=accounts)
    rig.health = {
        "tg": {"state": "connected", "messages_in": 4, "messages_out": 2},
        "mx": {"state": "reconnecting", "messages_in": "x", "messages_out": 1.5},
    }
    samples = rig.scrape()
    assert samples["orchestrator_channel_up"] == {
        L(account="mx", kind="matrix"): 0.0,
        L(account="new", kind="slack"): 0.0,
        L(account="tg", kind="telegram"): 1.0,
    }
    assert samples["orchestrator_channel_messages_total"] == {
        L(account="mx", kind="matrix", direction="in"): 0.0,
        L(account="mx", kind="matrix", direction="out"): 0.0,
        L(account="new", kind="slack", direction="in"): 0.0,
        L(account="new", kind="slack", direction="out"): 0.0,
        L(account="tg", kind="telegram", direction="in"): 4.0,
        L(account="tg", kind="telegram", direction="out"): 2.0,
    }
    up = next(f for f in rig.collector.collect() if f.name == "orchestrator_channel_up")
    assert [s.labels["account"] for s in up.samples] == ["mx", "new", "tg"]


def test_scrapes_run_one_at_a_time(disk: dict[str, Any]) -> None:
    rig = Rig(a=_group(1))
    inside = threading.Event()
    release = threading.Event()
    seen: list[bool] = []

    def listing() -> list[Any]:
        seen.append(rig.collector.lock.locked())
        if len(seen) == 1:
            inside.set()
            release.wait(10)
        return _listing(**rig.groups)

    rig.runtime.store.listing = listing
    first = threading.Thread(target=rig.scrape)
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=rig.scrape)
    second.start()
    second.join(0.2)
    assert second.is_alive() and len(seen) == 1  # waiting for the lock
    release.set()
    first.join(10)
    second.join(10)
    assert seen == [True, True]
