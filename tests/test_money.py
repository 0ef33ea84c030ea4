"""Money: prices and each call's cost (cache tokens, streamed usage, both providers), days
and months in the group's time zone, hard caps that pause a group (its messages wait,
its chat told once) until the next period or the operator lifts them, and a model per
purpose. End to end with the real runner, the daemon and the fake provider servers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from orchestrator.cli import cli as main
from orchestrator.config import load_config
from orchestrator.daemon.core import Daemon
from orchestrator.errors import InvalidConfig
from orchestrator.groups import GroupStore
from orchestrator.groups.config import parse_group_config
from orchestrator.home import Home
from orchestrator.money import (
    Prices,
    Tokens,
    cost_of,
    day_start,
    month_start,
    next_day,
    next_month,
    worst_cost,
)
from orchestrator.relay.ops.model import BUDGET_HOLDER
from orchestrator.relay.providers.base import Deadline, ModelCall
from orchestrator.relay.providers.openai import OpenAIProvider
from orchestrator.relay.turn import TurnRelay
from orchestrator.runtime.fake import FakeBackend
from orchestrator.runtime.lifecycle import GroupRuntime
from orchestrator.store.messages import DONE, HOST_NOTICE_SEQ, QUEUED, open_queue
from orchestrator.store.usage import Call, UsageStore
from tests.fakeproviders import FakeProvider, Text, ToolUse
from tests.relayrig import KEY, runners

ZONE = "Pacific/Auckland"  # UTC+13 in December: its day starts at 11:00 UTC the day before

# per million tokens: input 1, output 2, cache read 0.1, cache write 1.25 (in EUR)
PRICES = "{input: 1, output: 2, cache_read: 0.1, cache_write: 1.25}"


def test_cost_counts_every_kind_of_token_at_its_price() -> None:
    prices = Prices(input=3, output=15, cache_read=0.3, cache_write=3.75)
    tokens = Tokens(input=1_000, output=2_000, cache_read=10_000, cache_write=4_000)
    assert cost_of(prices, tokens) == pytest.approx((3_000 + 30_000 + 3_000 + 15_000) / 1e6)
    # cache prices not given are the input price; a model without prices has no cost
    assert cost_of(Prices(input=2, output=4), Tokens(cache_read=1_000_000)) == 2.0
    assert cost_of(None, tokens) is None
    assert cost_of(Prices(input=0, output=0), tokens) == 0.0  # a local model
    # before a call: the whole prompt at the input price, the longest answer allowed
    assert worst_cost(prices, 4_001, 1_000) == pytest.approx((1_001 * 3 + 1_000 * 15) / 1e6)


def test_days_and_months_are_the_groups() -> None:
    zone = ZoneInfo(ZONE)
    # 2026-12-31 10:30 UTC is 23:30 on the 31st in Auckland; 11:30 UTC is the 1st of January
    before = datetime(2026, 12, 31, 10, 30, tzinfo=ZoneInfo("UTC")).timestamp()
    after = before + 3600
    assert datetime.fromtimestamp(day_start(before, ZONE), zone) == datetime(
        2026, 12, 31, tzinfo=zone
    )
    assert next_day(before, ZONE) == day_start(after, ZONE) == next_month(before, ZONE)
    assert month_start(after, ZONE) == datetime(2027, 1, 1, tzinfo=zone).timestamp()
    assert month_start(before, ZONE) == datetime(2026, 12, 1, tzinfo=zone).timestamp()
    # a day with a clock change is longer or shorter: Auckland's clocks go back an hour
    # on the first Sunday of April 2027
    april = datetime(2027, 4, 4, 12, tzinfo=zone).timestamp()
    assert next_day(april, ZONE) - day_start(april, ZONE) == 25 * 3600
    # UTC days are what they were
    assert day_start(before, "UTC") == datetime(2026, 12, 31, tzinfo=ZoneInfo("UTC")).timestamp()


def test_usage_days_follow_each_groups_zone(home: Path) -> None:
    queue = open_queue(Home(home))
    store = UsageStore(queue.path)
    try:
        late = datetime(2026, 12, 31, 10, 30, tzinfo=ZoneInfo("UTC")).timestamp()  # 23:30 local
        for started, cost in ((late, 0.5), (late + 3600, 0.25)):  # the second: 00:30 local
            store.record(
                Call(
                    "m",
                    "fam",
                    "p",
                    "m-1",
                    "turn",
                    started,
                    1.0,
                    10,
                    5,
                    "ok",
                    None,
                    3,
                    2,
                    cost,
                    "EUR",
                )
            )
        store.record(Call("m", "work", "p", "m-1", "turn", late, 1.0, 1, 1, "ok"))  # unpriced
        days = store.by_day(zones={"fam": ZONE})
    finally:
        store.close()
        queue.close()
    assert [(d.group, d.day, d.cost, d.cache_read_tokens) for d in days] == [
        ("fam", "2026-12-31", 0.5, 3),
        ("fam", "2027-01-01", 0.25, 3),
        ("work", "2026-12-31", None, 0),  # UTC, and no cost (not 0: no prices)
    ]


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
@pytest.mark.parametrize("stream", [True, False])
def test_cache_tokens_come_from_both_providers_streamed_or_not(kind: str, stream: bool) -> None:
    from orchestrator.config.providers import ProviderDef
    from orchestrator.relay.providers.anthropic import AnthropicProvider

    fake = FakeProvider(kind, KEY)
    try:
        definition = ProviderDef("p", kind, fake.base_url, stream=stream)
        adapter = (AnthropicProvider if kind == "anthropic" else OpenAIProvider)(definition, KEY)
        write = 400 if kind == "anthropic" else 0  # OpenAI reports no cache writes
        fake.script.append(
            Text(
                "hi",
                input_tokens=50,
                output_tokens=7,
                cache_read_tokens=900,
                cache_write_tokens=write,
            )
        )
        call = ModelCall("sys", [{"role": "user", "content": "hello"}], [], "turn")
        answer = adapter.complete(
            call, model="m", timeout=10, deadline=Deadline(time.monotonic() + 10)
        )
        adapter.close()
    finally:
        fake.close()
    assert (answer.input_tokens, answer.output_tokens) == (50, 7)
    assert (answer.cache_read_tokens, answer.cache_write_tokens) == (900, write)
    assert answer.to_wire()["usage"]["input_tokens"] == 50 + 900 + write  # the whole prompt


def test_config_refuses_bad_prices_caps_and_purpose_models(home: Path) -> None:
    h = Home(home)
    (home / "orchestrator.yaml").write_text(
        "providers:\n  fake:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "    model_info:\n      m-1:\n        prices: {input: -1, output: 2}\n"
    )
    with pytest.raises(InvalidConfig, match=r"prices.input: got -1; expected a price"):
        load_config(h)
    (home / "orchestrator.yaml").write_text(
        "providers:\n  fake:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "    models: [m-1, m-2]\n    model_info:\n      m-1:\n        prices: {output: 2}\n"
    )
    with pytest.raises(InvalidConfig, match=r"prices.input: missing"):
        load_config(h)
    (home / "orchestrator.yaml").write_text(
        "currency: EUR\nproviders:\n  fake:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        f"    models: [m-1, m-2]\n    model_info:\n      m-1:\n        prices: {PRICES}\n"
    )
    providers = load_config(h).providers
    yaml = Path("group.yaml")

    def parse(text: str) -> Any:
        return parse_group_config("name: x\nprovider: fake\nmodel: m-1\n" + text, yaml, providers)

    assert parse("limits: {cost_per_day: 5}\n").limits.cost_per_day == 5.0
    # a cap needs every model the group uses priced: m-2 (its tasks' model) is not
    with pytest.raises(InvalidConfig, match=r"limits.cost_per_day: .*fake/m-2 has none"):
        parse("limits: {cost_per_day: 5}\nmodels: {tasks: {provider: fake, model: m-2}}\n")
    with pytest.raises(InvalidConfig, match=r"cost_per_month: got 'lots'"):
        parse("limits: {cost_per_month: lots}\n")
    with pytest.raises(InvalidConfig, match=r"models.flush.model: model 'm-9' is not allowed"):
        parse("models: {flush: {provider: fake, model: m-9}}\n")
    with pytest.raises(
        InvalidConfig, match=r"models.chat: unknown key; valid keys here: background, flush, tasks"
    ):
        parse("models: {chat: {provider: fake, model: m-1}}\n")
    with pytest.raises(InvalidConfig, match=r"timezone: got 'Mars/Base'"):
        parse("timezone: Mars/Base\n")
    # an offline group's calls never reach the host: neither caps nor purposes apply
    with pytest.raises(InvalidConfig, match=r"offline provider runs inside the container"):
        parse_group_config("name: x\nlimits: {cost_per_day: 1}\n", yaml, providers)
    # the group's zone is its tasks' unless they name their own
    assert parse(f"timezone: {ZONE}\n").tasks.timezone == ZONE
    assert parse(f"timezone: {ZONE}\ntasks: {{timezone: UTC}}\n").tasks.timezone == "UTC"


@pytest.fixture
def money(home: Path, monkeypatch) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """A daemon whose provider ``fake`` prices m-1 and m-2 (in EUR); ``fam`` (in
    Auckland) may spend 0.01 a day and runs its tasks and flushes on m-2; ``work`` has
    no caps."""
    fake = FakeProvider("openai", KEY)
    monkeypatch.setenv("FAKE_KEY", KEY)
    (home / "orchestrator.yaml").write_text(
        "currency: EUR\nproviders:\n  fake:\n    kind: openai\n"
        f"    base_url: {fake.base_url}\n    key_env: FAKE_KEY\n    models: [m-1, m-2]\n"
        f"    model_info:\n      m-1:\n        prices: {PRICES}\n"
        "        context_tokens: 200000\n"  # a window no turn here comes near
        "      m-2:\n        prices: {input: 0, output: 0}\n"
    )
    h = Home(home)
    config = load_config(h)
    store = GroupStore(h)
    models = (
        "models:\n  tasks: {provider: fake, model: m-2}\n  flush: {provider: fake, model: m-2}\n"
    )
    for name, extra in (
        ("fam", f"timezone: {ZONE}\nlimits:\n  cost_per_day: 0.01\n{models}"),
        ("work", ""),
    ):
        text = (
            f"name: {name}\nprovider: fake\nmodel: m-1\ncreators: [alice]\nmembers: [bob]\n" + extra
        )
        store.add(parse_group_config(text, Path("group.yaml"), config.providers))
    runtime = GroupRuntime(h, config, FakeBackend(), lambda: "img:1", ready=lambda _: True)
    queue = open_queue(h)
    daemon = Daemon(h, config, runtime, queue, concurrency=2)
    setup = {"home": h, "daemon": daemon, "config": config, "runtime": runtime, "fake": fake}
    yield setup
    daemon.relay.close()
    daemon.relay.usage.close()
    queue.close()
    fake.close()


def model_request(purpose: str = "turn") -> dict[str, Any]:
    return {
        "req": 1,
        "op": "model.complete",
        "system": "sys",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [],
        "purpose": purpose,
    }


def test_tasks_and_flushes_run_on_their_models_and_usage_shows_each_purpose(money) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = money["daemon"]
    fake: FakeProvider = money["fake"]
    group = daemon.runtime.store.load("fam")

    def relay(task_run: bool) -> TurnRelay:
        message = daemon.submit("fam", "hello", chat="c", sender="bob", channel="cli")
        return TurnRelay(daemon.relay, message, group, time.monotonic() + 60, task_run=task_run)

    fake.script.extend(Text(t, input_tokens=1_000, output_tokens=100) for t in "abcd")
    chat, task = relay(False), relay(True)
    for turn, purpose in ((chat, "turn"), (chat, "flush"), (task, "turn"), (task, "summary")):
        assert turn.handle(model_request(purpose), 200)["ok"]
    # the chat's turn on m-1; its flush, the task's turn and the task's summary on m-2
    assert [r.body["model"] for r in fake.seen] == ["m-1", "m-2", "m-2", "m-2"]
    by_purpose = {
        d.key: d for d in daemon.relay.usage.by_day("fam", zones={"fam": ZONE}, by="purpose")
    }
    assert sorted(by_purpose) == ["flush", "summary", "tasks", "turn"]
    assert by_purpose["turn"].cost == pytest.approx((1_000 * 1 + 100 * 2) / 1e6)
    assert by_purpose["tasks"].cost == 0.0 and by_purpose["flush"].cost == 0.0
    by_model = {d.key: d for d in daemon.relay.usage.by_day("fam", by="model")}
    assert (by_model["fake/m-1"].requests, by_model["fake/m-2"].requests) == (1, 3)


def test_a_scheduled_task_turn_is_recorded_as_tasks_on_its_model(money) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = money["daemon"]
    fake: FakeProvider = money["fake"]
    with runners(money):
        task = daemon.tasks.add(
            group="fam",
            chat="kitchen",
            thread=None,
            channel="cli",
            text="water the plants",
            kind="at",
            spec="1m",
            tz=None,
            author="alice",
            author_trust="creator",
            settings=daemon.runtime.store.load("fam").config.tasks,
        )
        fake.script.append(Text("watered", input_tokens=10, output_tokens=2))
        assert daemon.run_due_tasks(float(task.next_run or 0)) == 1
        [(_, message_id)] = daemon.tasks.runs_in_chat("fam", "kitchen", 0)
        done = daemon.wait(message_id, 60)
    assert done is not None and done.state == DONE and done.replies == ("watered",)
    assert [r.body["model"] for r in fake.seen] == ["m-2"]
    [day] = daemon.relay.usage.by_day("fam", by="purpose")
    assert (day.key, day.requests) == ("tasks", 1)


def _notices(daemon: Daemon, message_id: str) -> list[str]:
    return [t for seq, t in daemon.queue.replies_of(message_id) if seq >= HOST_NOTICE_SEQ]


def test_a_money_cap_pauses_the_group_until_the_operator_lifts_it(money, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.service.doctor import WARN, check_budgets

    monkeypatch.setattr("orchestrator.cli.runtime.open_runtime", lambda obj: money["runtime"])
    daemon: Daemon = money["daemon"]
    fake: FakeProvider = money["fake"]
    home: Home = money["home"]
    with runners(money):
        # the first answer costs 0.007 EUR (5,000 in, 1,000 out): under the 0.01 cap
        fake.script.append(Text("first", input_tokens=5_000, output_tokens=1_000))
        first = daemon.submit("fam", "hello", chat="c", sender="alice", channel="cli")
        assert (done := daemon.wait(first.id, 60)) is not None and done.state == DONE
        # the next call may cost up to 1,024 tokens of answer and its prompt: past the cap
        second = daemon.submit("fam", "and now?", chat="c", sender="alice", channel="cli")
        deadline = time.time() + 30
        while not daemon.queue.pauses("fam") and time.time() < deadline:
            time.sleep(0.05)
        [lease] = daemon.queue.pauses("fam")
        assert lease.holder == BUDGET_HOLDER and "cap of 0.01 EUR a day" in lease.reason
        third = daemon.submit("fam", "hello?", chat="c", sender="bob", channel="cli")
        time.sleep(1.5)  # a dispatch round or more: nothing of fam's is delivered
        waiting = [daemon.queue.get(m.id) for m in (second, third)]
        assert [m.state for m in waiting if m is not None] == [QUEUED, QUEUED]
        assert waiting[0] is not None and waiting[0].attempts == 0  # not counted
        [notice] = _notices(daemon, second.id)
        assert "spending cap for today" in notice and "--budget" in notice
        assert _notices(daemon, third.id) == []  # told once
        assert len(fake.seen) == 1  # no call past the cap
        # the operator sees it
        status = CliRunner().invoke(main, ["--home", str(home.root), "status"])
        assert "paused fam (budget): budget: the next model call" in status.output
        [check] = check_budgets(home)
        assert (check.name, check.status) == ("budget fam", WARN)
        assert "paused until" in check.detail and "of 0.01 EUR today" in check.detail
        # a plain resume drops only the operator's pause, and says what still holds
        plain = CliRunner().invoke(main, ["--home", str(home.root), "group", "resume", "fam"])
        assert "still paused by budget" in plain.output
        assert daemon.queue.pauses("fam")
        fake.script.extend([Text("second answer"), Text("third answer")])
        lifted = CliRunner().invoke(
            main, ["--home", str(home.root), "group", "resume", "fam", "--budget"]
        )
        assert lifted.exit_code == 0 and "money caps are lifted until" in lifted.output
        for message in (second, third):
            done = daemon.wait(message.id, 60)
            assert done is not None and done.state == DONE, done
    assert daemon.queue.get(second.id).replies[:1] == ("second answer",)  # type: ignore[union-attr]
    assert len(fake.seen) == 3
    assert _notices(daemon, third.id) == []


def test_a_capped_groups_messages_go_out_again_at_its_next_day(money) -> None:  # type: ignore[no-untyped-def]
    daemon: Daemon = money["daemon"]
    fake: FakeProvider = money["fake"]
    # the relay's clock: 12 s before midnight in Auckland, running on with the host's
    now = time.time()
    offset = next_day(now, ZONE) - 12 - now
    daemon.relay.clock = lambda: time.time() + offset
    with runners(money):
        fake.script.append(Text("first", input_tokens=5_000, output_tokens=1_000))
        first = daemon.submit("fam", "hello", chat="c", sender="alice", channel="cli")
        assert (done := daemon.wait(first.id, 60)) is not None and done.state == DONE
        fake.script.append(Text("good morning"))
        second = daemon.submit("fam", "and now?", chat="c", sender="alice", channel="cli")
        done = daemon.wait(second.id, 90)  # waits paused until the group's midnight
        assert done is not None and done.state == DONE, done
    assert done.replies[0] == "good morning"
    [notice] = _notices(daemon, second.id)
    assert "spending cap for today" in notice
    assert len(fake.seen) == 2
    days = daemon.relay.usage.by_day("fam", zones={"fam": ZONE})
    assert [d.requests for d in days] == [1, 1]  # one call on each side of the midnight
    assert days[0].refused == 1


def test_usage_and_status_show_costs(money, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("orchestrator.cli.runtime.open_runtime", lambda obj: money["runtime"])
    daemon: Daemon = money["daemon"]
    home: Home = money["home"]
    now = time.time()
    daemon.relay.usage.record(
        Call(
            "m1",
            "fam",
            "fake",
            "m-1",
            "turn",
            now,
            5.0,
            1_000,
            100,
            "ok",
            None,
            2_000,
            0,
            0.0014,
            "EUR",
        )
    )
    daemon.relay.usage.record(
        Call("m2", "work", "fake", "m-1", "turn", now, 5.0, 10, 10, "ok", None, 0, 0, None, None)
    )
    out = CliRunner().invoke(main, ["--home", str(home.root), "usage", "--by", "model"])
    assert out.exit_code == 0, out.output
    fam = next(line for line in out.output.splitlines() if line.startswith("fam"))
    assert "fake/m-1" in fam and "0.0014 EUR" in fam and "2,000" in fam
    work = next(line for line in out.output.splitlines() if line.startswith("work"))
    assert work.split()[-3] == "-"  # no prices, no cost
    status = CliRunner().invoke(main, ["--home", str(home.root), "status", "--json"])
    import json

    groups = {g["folder"]: g for g in json.loads(status.output)["groups"]}
    assert groups["fam"]["cost_today"] == pytest.approx(0.0014)
    assert groups["fam"]["currency"] == "EUR" and groups["work"]["cost_today"] is None


def test_an_idle_flush_runs_on_the_flush_model_and_is_recorded_as_a_flush(money) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.memory.history import FLUSH

    daemon: Daemon = money["daemon"]
    fake: FakeProvider = money["fake"]
    home: Home = money["home"]
    with runners(money):
        fake.script.append(Text("noted", input_tokens=10, output_tokens=2))
        say_ = daemon.submit(
            "fam", "The dentist is on Tuesday at 9.", chat="c", sender="alice", channel="cli"
        )
        assert (done := daemon.wait(say_.id, 60)) is not None and done.state == DONE
        fake.script.extend(
            [
                ToolUse("append_daily", {"content": "- The dentist is on Tuesday at 9."}),
                Text("NO_REPLY"),
            ]
        )
        assert daemon.flush_idle("fam") == [done.session]
        # nothing new since: a second idle flush makes no call
        calls = len(fake.seen)
        assert daemon.flush_idle("fam") == [] and len(fake.seen) == calls
        # a member speaks in another chat: that session's flush is recorded as a member's
        fake.script.append(Text("hi", input_tokens=10, output_tokens=2))
        guest = daemon.submit("fam", "I like tea.", chat="d", sender="bob", channel="cli")
        assert (done_guest := daemon.wait(guest.id, 60)) is not None
        fake.script.extend([ToolUse("append_daily", {"content": "- Bob likes tea."}), Text("")])
        assert daemon.flush_idle("fam") == [done_guest.session]
    # the flush calls ran on m-2, the flush model, under the purpose flush
    assert [r.body["model"] for r in fake.seen] == ["m-1", "m-2", "m-2", "m-1", "m-2", "m-2"]
    by_purpose = {d.key: d.requests for d in daemon.relay.usage.by_day("fam", by="purpose")}
    assert by_purpose == {"turn": 2, "flush": 4}
    note = next((home.groups_dir / "fam" / "memory" / "daily").glob("*.md")).read_text()
    assert "The dentist is on Tuesday at 9." in note and "alice (creator); chat c" in note
    changes = [c for c in daemon.history("fam").log() if c.provenance.kind == FLUSH]
    assert [(c.provenance.session, c.provenance.trust) for c in changes] == [
        (done_guest.session, "member"),
        (done.session, "creator"),
    ]
    assert all(c.provenance.model == "m-2" for c in changes)
    assert all(p.startswith("memory/daily/") for c in changes for p in c.paths)


def test_a_flush_outside_a_turn_may_ask_for_flush_calls_only(money) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.relay.errors import RelayViolation
    from orchestrator.store.messages import new_message

    daemon: Daemon = money["daemon"]
    group = daemon.runtime.store.load("fam")
    record = new_message(
        group="fam", session="", chat="-", thread=None, sender="host", trust="creator",
        text="flush", channel="host",
    )  # fmt: skip
    relay = TurnRelay(daemon.relay, record, group, time.monotonic() + 60, housekeeping=True)
    with pytest.raises(RelayViolation, match="asks for flush calls"):
        relay.handle(model_request("turn"), 200)
    with pytest.raises(RelayViolation, match="reply is not asked for"):
        relay.handle({"req": 2, "op": "reply", "text": "hi"}, 50)
    with pytest.raises(RelayViolation, match=r"learned\.write is not asked for"):
        relay.handle({"req": 3, "op": "learned.write", "content": "x"}, 50)
    assert money["fake"].seen == []


def test_reconcile_flushes_an_idle_groups_sessions_before_it_stops_the_container(money) -> None:  # type: ignore[no-untyped-def]
    import os
    from dataclasses import replace

    daemon: Daemon = money["daemon"]
    fake: FakeProvider = money["fake"]
    runtime: GroupRuntime = money["runtime"]
    with runners(money):
        fake.script.append(Text("noted", input_tokens=10, output_tokens=2))
        said = daemon.submit("fam", "Our cat is Miso.", chat="c", sender="alice", channel="cli")
        assert (done := daemon.wait(said.id, 60)) is not None and done.state == DONE
        backend = runtime.backend
        assert isinstance(backend, FakeBackend)
        group = runtime.store.load("fam")
        runtime.ensure_running(group)  # the runner here is the test's: a container to stop
        name = runtime.container_name(group)
        long_ago = 1_000_000.0
        os.utime(runtime.activity.root / "fam", (long_ago, long_ago))
        backend.containers[name] = replace(backend.containers[name], started_at=long_ago)
        fake.script.extend([ToolUse("append_daily", {"content": "- Our cat is Miso."}), Text("")])
        deadline = time.monotonic() + 30
        while daemon.active and time.monotonic() < deadline:  # its record ends the delivery
            time.sleep(0.01)
        daemon._reconcile()
        assert backend.containers[name].state == "exited"
    assert [r.body["model"] for r in fake.seen] == ["m-1", "m-2", "m-2"]
    daily = money["home"].groups_dir / "fam" / "memory" / "daily"
    assert "Our cat is Miso." in next(daily.glob("*.md")).read_text()


def test_an_idle_flushs_answer_is_read_as_untrusted_and_its_trust_is_the_lowest() -> None:
    from orchestrator.daemon.core import flushed_sessions, lowest_trust

    answer = {
        "ok": True,
        "flushed": [
            {"session": "cli.chat-c", "appended_chars": 40},
            {"session": "../escape", "appended_chars": 1},
            {"session": "cli.chat-d", "appended_chars": True},
            "junk",
            {"session": 7},
        ],
    }
    assert flushed_sessions(answer) == {"cli.chat-c": 40, "cli.chat-d": 0}
    assert flushed_sessions({"ok": False, "flushed": answer["flushed"]}) == {}
    assert flushed_sessions({"ok": True, "flushed": "cli.chat-c"}) == {}
    assert lowest_trust({"creator"}) == "creator"
    assert lowest_trust({"creator", "member"}) == "member"
    assert lowest_trust({"creator", "guest"}) == "guest"
    assert lowest_trust({"member", "someone"}) == "guest"


def test_a_known_window_too_small_for_a_fresh_context_is_refused_when_group_yaml_loads(
    home: Path,
) -> None:
    (home / "orchestrator.yaml").write_text(
        "providers:\n  local:\n    kind: openai\n    base_url: http://127.0.0.1:9/v1\n"
        "    models: [tiny, small]\n    model_info:\n      tiny: {context_tokens: 2048}\n"
        "      small: {context_tokens: 8192}\n"
    )
    providers = load_config(Home(home)).providers

    def parse(text: str) -> Any:
        return parse_group_config("name: x\nprovider: local\n" + text, Path("g.yaml"), providers)

    # 80% of 2,048 tokens less a 1,024-token answer: 614 tokens, about 1,842 characters
    with pytest.raises(InvalidConfig) as refused:
        parse("model: tiny\n")
    assert "context_budget: 80% of local/tiny's 2,048-token window" in str(refused.value)
    assert "leaves about 1,842 characters: a fresh context needs at least 3,000" in str(
        refused.value
    )
    assert parse("model: tiny\nlimits: {max_tokens: 256}\n").model == "tiny"  # room now
    assert parse("model: small\n").model == "small"
    # a flush model counts too
    with pytest.raises(InvalidConfig, match=r"local/tiny's 2,048-token window"):
        parse("model: small\nmodels: {flush: {provider: local, model: tiny}}\n")
