"""Exact behaviour of CLI commands that need neither the daemon nor the engine: held
requests listed, approved and denied (cli/held.py), a group's web policy decided
(cli/web.py), doctor's table and queue repair (cli/doctor.py), deploy's options
(cli/deploy.py); the engine, the guard and the checks are faked at their boundary."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner

from orchestrator.cli import CliContext, cli
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from tests.clocks import local_zone


def invoke(home: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["--home", str(home), *args])


# held requests (cli/held.py)


def _hold(home: Path, *, group: str = "fam", kind: str = "packages", sender: str = "bob") -> Any:
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import new_message, open_queue

    queue = open_queue(Home(home))
    try:
        asked = queue.put(
            new_message(
                group=group, session="cli.chat-c", chat="c\x1bx", thread=None, sender=sender,
                trust="member", text="get tree", channel="cli",
            )
        )  # fmt: skip
        return HeldRequests(queue).hold(
            group=group, kind=kind, content=f"content of {sender}\nline 2", channel="cli",
            chat="c\x1bx", thread=None, sender=sender, message_id=asked.id,
            chat_approvable=True, ttl=3600,
        )  # fmt: skip
    finally:
        queue.close()


def _handle(home: Path, **kwargs: Any) -> None:
    from orchestrator.cli.held import handle_requests

    options: dict[str, Any] = {
        "approve_id": None,
        "deny_id": None,
        "as_json": False,
        "listing": "the listing",
    }
    options.update(kwargs)
    handle_requests(CliContext(Home(home), False), "fam", "packages", "package request", **options)


def _waiting(home: Path) -> list[int]:
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue

    queue = open_queue(Home(home))
    try:
        return [r.id for r in HeldRequests(queue).waiting("fam", kind="packages")]
    finally:
        queue.close()


def test_held_without_a_queue_says_no_request_was_made(home: Path) -> None:
    with pytest.raises(click.ClickException) as caught:
        _handle(home)
    assert caught.value.message == "no state database yet: no requests were ever made"
    assert not (home / "state").exists() or not list((home / "state").iterdir())


def test_held_lists_nothing_waiting_by_name(home: Path, capsys: Any) -> None:
    _hold(home, group="other")
    _hold(home, kind="mcp_server")
    _handle(home)
    out = capsys.readouterr()
    assert (out.out, out.err) == ("no package requests wait for fam\n", "")
    _handle(home, as_json=True)
    assert json.loads(capsys.readouterr().out) == []


def test_held_lists_each_waiting_request_with_its_content(home: Path, capsys: Any) -> None:
    first = _hold(home, sender="bob\nx")
    second = _hold(home, sender="carol")
    _handle(home)
    out = capsys.readouterr()
    assert out.out == (
        f"request {first.id} from bob\\nx in c\\ex:\n"
        "content of bob\nx\nline 2\n"
        f"request {second.id} from carol in c\\ex:\n"
        "content of carol\nline 2\n"
    )
    assert out.err == ""
    _handle(home, as_json=True)
    listed = json.loads(capsys.readouterr().out)
    assert listed == [
        {**json.loads(json.dumps(first.to_dict())), "content": first.content},
        {**json.loads(json.dumps(second.to_dict())), "content": second.content},
    ]


@pytest.mark.parametrize("option", ["approve_id", "deny_id"])
def test_held_an_unknown_id_names_the_listing_and_the_option(home: Path, option: str) -> None:
    request = _hold(home)
    _hold(home, kind="mcp_server")  # waits, but of another kind
    with pytest.raises(click.BadParameter) as caught:
        _handle(home, **{option: request.id + 1})
    assert caught.value.message == (
        f"no package request {request.id + 1} waits for fam (see the listing)"
    )
    assert caught.value.param_hint == ("--approve" if option == "approve_id" else "--deny")
    assert _waiting(home) == [request.id]


def test_held_deny_drops_the_request_and_tells_the_chat(home: Path, capsys: Any) -> None:
    from orchestrator.store.messages import open_queue

    request = _hold(home)
    kept = _hold(home)
    _handle(home, deny_id=request.id)
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"denied request {request.id}\n")
    assert _waiting(home) == [kept.id]
    queue = open_queue(Home(home))
    try:
        asked = queue.get(request.message_id)
        assert asked is not None
        assert asked.replies == (
            f"[orchestrator] Request {request.id} was denied by the operator.",
        )
    finally:
        queue.close()


def test_held_approve_and_deny_together_are_refused_and_nothing_changes(home: Path) -> None:
    from orchestrator.errors import BadInput
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue

    GroupStore(Home(home)).add(GroupConfig(name="fam"))
    made = [_hold(home, kind=kind) for kind in ("packages", "packages", "mcp-server", "mcp-server")]
    with pytest.raises(BadInput) as caught:
        _handle(home, approve_id=made[0].id, deny_id=made[1].id)
    assert caught.value.message == (
        f"give --approve or --deny, not both (got --approve {made[0].id} --deny {made[1].id})"
    )
    for args, first, second in (
        (["group", "packages", "fam"], made[0], made[1]),
        (["mcp", "requests", "--group", "fam"], made[2], made[3]),
    ):
        done = invoke(home, *args, "--approve", str(first.id), "--deny", str(second.id))
        assert done.exit_code == 2
        assert done.stderr.startswith(
            f"error: give --approve or --deny, not both (got --approve {first.id} "
        )
    queue = open_queue(Home(home))
    try:
        assert [r.id for r in HeldRequests(queue).waiting("fam")] == [r.id for r in made]
        for request in made:
            asked = queue.get(request.message_id)
            assert asked is not None and asked.replies == ()
    finally:
        queue.close()


def test_packages_pending_with_approve_or_deny_is_refused_and_nothing_changes(home: Path) -> None:
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import open_queue

    GroupStore(Home(home)).add(GroupConfig(name="fam"))
    request = _hold(home, kind="packages")
    for option in ("--approve", "--deny"):
        done = invoke(home, "group", "packages", "fam", "--pending", option, str(request.id))
        assert done.exit_code == 2
        assert done.stderr == (
            f"error: give --pending or {option}, not both: --pending only lists requests\n"
        )
    queue = open_queue(Home(home))
    try:
        assert [r.id for r in HeldRequests(queue).waiting("fam")] == [request.id]
    finally:
        queue.close()


def test_held_approve_applies_as_the_operator_in_the_foreground(
    home: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.relay import approvals

    request = _hold(home)
    calls: list[tuple[Any, ...]] = []

    def approve(queue: Any, groups_dir: Path, held: Any, by: str, **kwargs: Any) -> Any:
        calls.append((type(queue).__name__, groups_dir, held.id, by, kwargs))
        return approvals.Applied(True, "added tree")

    monkeypatch.setattr(approvals, "approve", approve)
    _handle(home, approve_id=request.id, deny_id=None)
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"approved request {request.id}: added tree\n")
    assert calls == [
        ("MessageQueue", Home(home).groups_dir, request.id, "operator", {"background": False})
    ]
    assert _waiting(home) == [request.id]  # approve (faked here) drops it, not the CLI


def test_held_approve_that_was_not_applied_fails_with_why(
    home: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.relay import approvals

    request = _hold(home)
    monkeypatch.setattr(
        approvals, "approve", lambda *a, **k: approvals.Applied(False, "the hash changed")
    )
    with pytest.raises(click.ClickException) as caught:
        _handle(home, approve_id=request.id)
    assert caught.value.message == f"request {request.id} was not applied: the hash changed"
    assert capsys.readouterr().err == ""


# web test (cli/web.py)


def _web_group(home: Path, web: str) -> None:
    group = GroupStore(Home(home)).add(GroupConfig(name="fam"))
    group.config_file.write_text(group.config_file.read_text() + web)


def _fake_check(monkeypatch: pytest.MonkeyPatch, refuse: str | None = None) -> list[Any]:
    from orchestrator.web import guard

    seen: list[Any] = []

    def check(url: str, rules: Any) -> Any:
        seen.append((url, rules))
        if refuse is not None:
            raise guard.Refused(refuse)
        return SimpleNamespace(host="example.org", port=8443, address="203.0.113.7")

    monkeypatch.setattr(guard, "check", check)
    return seen


WEB_ON = "web:\n  enabled: true\n  trust: [creator, member]\n  allow: [example.org]\n"


def test_web_allowed_says_where_and_to_whom(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _web_group(home, WEB_ON)
    seen = _fake_check(monkeypatch)
    done = invoke(home, "web", "test", "fam", "https://example.org:8443/x")
    assert done.exit_code == 0, done.output
    assert done.stdout == (
        "allowed: example.org port 8443 at 203.0.113.7\nopen to: creator, member\n"
    )
    policy = GroupStore(Home(home)).find("fam").config.web
    assert seen == [("https://example.org:8443/x", policy.rules(gate=False))]
    done = invoke(home, "web", "test", "fam", "https://example.org:8443/x", "--json")
    assert done.exit_code == 0
    assert json.loads(done.stdout) == {
        "group": "fam",
        "url": "https://example.org:8443/x",
        "enabled": True,
        "allowed": True,
        "address": "203.0.113.7",
        "port": 8443,
        "why": "allowed: example.org port 8443 at 203.0.113.7",
        "trust": ["creator", "member"],
    }


def test_web_the_shell_gate_takes_host_port_and_its_own_rules(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _web_group(home, WEB_ON)
    seen = _fake_check(monkeypatch)
    policy = GroupStore(Home(home)).find("fam").config.web
    assert invoke(home, "web", "test", "fam", "example.org:8443", "--shell").exit_code == 0
    assert invoke(home, "web", "test", "fam", "http://example.org/", "--shell").exit_code == 0
    assert invoke(home, "web", "test", "fam", "example.org:8443").exit_code == 0
    assert seen == [
        ("https://example.org:8443/", policy.rules(gate=True)),
        ("http://example.org/", policy.rules(gate=True)),
        ("example.org:8443", policy.rules(gate=False)),
    ]


def test_web_disabled_allows_the_address_but_not_the_fetch(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _web_group(home, "web:\n  enabled: false\n")
    _fake_check(monkeypatch)
    done = invoke(home, "web", "test", "fam", "https://example.org/")
    assert done.exit_code == 1
    assert done.stdout == ("the address is allowed (203.0.113.7), but web.enabled is false\n")
    done = invoke(home, "web", "test", "fam", "https://example.org/", "--json")
    assert done.exit_code == 1
    decided = json.loads(done.stdout)
    assert (decided["enabled"], decided["allowed"], decided["port"]) == (False, False, 8443)


def test_web_refused_says_why(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _web_group(home, WEB_ON)
    _fake_check(monkeypatch, refuse="a private address")
    done = invoke(home, "web", "test", "fam", "https://example.org/", "--json")
    assert done.exit_code == 1
    assert json.loads(done.stdout) == {
        "group": "fam",
        "url": "https://example.org/",
        "enabled": True,
        "allowed": False,
        "why": "refused: a private address",
        "trust": ["creator", "member"],
    }
    done = invoke(home, "web", "test", "fam", "https://example.org/")
    assert (done.exit_code, done.stdout) == (
        1,
        "refused: a private address\nopen to: creator, member\n",
    )


# doctor (cli/doctor.py)


def _fake_checks(monkeypatch: pytest.MonkeyPatch, *checks: Any) -> list[Any]:
    from orchestrator.service import doctor

    homes: list[Any] = []

    def run_checks(home: Home) -> list[Any]:
        homes.append(home.root)
        return list(checks)

    monkeypatch.setattr(doctor, "run_checks", run_checks)
    return homes


def test_doctor_all_passing_prints_the_table_and_exits_0(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.service.doctor import OK, WARN, Check

    homes = _fake_checks(
        monkeypatch, Check("home", OK, "writable"), Check("disk", WARN, "low", hint="free some")
    )
    done = invoke(home, "doctor")
    assert (done.exit_code, done.stderr) == (0, "")
    assert done.stdout == ("CHECK  STATUS  DETAIL\nhome   ok      writable\ndisk   warn    low\n")
    assert homes == [home]
    done = invoke(home, "doctor", "--json")
    assert done.exit_code == 0
    assert json.loads(done.stdout) == {
        "ok": True,
        "checks": [
            {"name": "home", "status": "ok", "detail": "writable", "hint": ""},
            {"name": "disk", "status": "warn", "detail": "low", "hint": "free some"},
        ],
    }


def test_doctor_a_failing_check_is_an_error_line_with_its_hint_and_exit_1(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.service.doctor import FAIL, OK, Check

    _fake_checks(
        monkeypatch,
        Check("engine", FAIL, "unreachable", hint="start docker"),
        Check("home", OK, "writable"),
        Check("image", FAIL, "missing"),
    )
    done = invoke(home, "doctor")
    assert done.exit_code == 1
    assert done.stderr == (
        "error: engine: unreachable (hint: start docker)\nerror: image: missing\n"
    )
    done = invoke(home, "doctor", "--json")
    assert (done.exit_code, done.stderr) == (1, "")
    assert json.loads(done.stdout)["ok"] is False


def _fake_queue(
    monkeypatch: pytest.MonkeyPatch, problem: str | None, holder: int | None, moved: Any
) -> list[str]:
    from orchestrator import home as home_module
    from orchestrator.store import messages

    calls: list[str] = []

    def check_queue(home: Home) -> str | None:
        calls.append(f"check {home.root.name}")
        return problem

    def lock_holder(home: Home) -> int | None:
        calls.append(f"holder {home.root.name}")
        return holder

    def set_aside(home: Home) -> Any:
        calls.append(f"aside {home.root.name}")
        return moved

    monkeypatch.setattr(messages, "check_queue", check_queue)
    monkeypatch.setattr(home_module, "lock_holder", lock_holder)
    monkeypatch.setattr(messages, "set_aside", set_aside)
    return calls


def test_doctor_repair_of_a_healthy_queue_does_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.service.doctor import OK, Check

    _fake_checks(monkeypatch, Check("queue", OK, "fine"))
    calls = _fake_queue(monkeypatch, None, None, None)
    done = invoke(home, "doctor", "--repair-queue")
    assert done.exit_code == 0
    assert done.stdout.startswith("the queue is healthy; nothing to repair\nCHECK")
    assert calls == ["check home"]
    calls.clear()
    assert invoke(home, "doctor").exit_code == 0
    assert calls == []


def test_doctor_repair_refuses_while_a_daemon_runs(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_checks(monkeypatch)
    calls = _fake_queue(monkeypatch, "malformed", 4242, None)
    done = invoke(home, "doctor", "--repair-queue")
    assert done.exit_code == 1
    assert done.stderr == "error: daemon 4242 is running\nhint: stop it first: orchestrator down\n"
    assert calls == ["check home", "holder home"]


@pytest.mark.parametrize("unreadable", [0, 3])
def test_doctor_repair_sets_the_queue_aside(
    home: Path, monkeypatch: pytest.MonkeyPatch, unreadable: int
) -> None:
    _fake_checks(monkeypatch)
    calls = _fake_queue(monkeypatch, "malformed", None, ("/h/queue.db.bad", 7, unreadable))
    done = invoke(home, "doctor", "--repair-queue")
    assert done.exit_code == 0
    expected = (
        "moved the corrupt queue to /h/queue.db.bad\n"
        "started a new queue with 7 pending messages copied over\n"
    )
    if unreadable:
        expected += "note: the rest could not be read (3); the old file is kept\n"
    assert done.stdout == expected + "CHECK  STATUS  DETAIL\n"
    assert calls == ["check home", "holder home", "aside home"]


# deploy (cli/deploy.py)


def _fake_kubernetes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from orchestrator.service import kubernetes

    seen: list[Any] = []

    def shapes_of(home: Home, config: Any, **kwargs: Any) -> list[str]:
        seen.append(("shapes", home.root, config.project, kwargs))
        return ["shape"]

    def manifests(project: str, shapes: list[str], options: Any) -> list[str]:
        seen.append(("manifests", project, shapes, options))
        return ["doc"]

    monkeypatch.setattr(kubernetes, "shapes_of", shapes_of)
    monkeypatch.setattr(kubernetes, "manifests", manifests)
    monkeypatch.setattr(kubernetes, "to_yaml", lambda docs: f"yaml of {docs}\n")
    return seen


def test_deploy_without_print_applies_nothing(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_kubernetes(monkeypatch)
    done = invoke(home, "deploy", "kubernetes")
    assert done.exit_code == 2
    assert done.stderr == (
        "error: only --print is supported: nothing is applied to a cluster\n"
        "hint: orchestrator deploy kubernetes --print | kubectl apply -f -\n"
    )
    assert seen == []


def test_deploy_passes_its_defaults(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.config import load_config
    from orchestrator.service.kubernetes import KubernetesOptions

    seen = _fake_kubernetes(monkeypatch)
    done = invoke(home, "deploy", "kubernetes", "--print")
    assert (done.exit_code, done.stdout) == (0, "yaml of ['doc']\n")
    config = load_config(Home(home))
    port = config.runtime.swarm.port
    assert seen == [
        ("shapes", home, config.project, {"registry": "", "tag": "latest", "runner_port": port}),
        (
            "manifests",
            config.project,
            ["shape"],
            KubernetesOptions(
                namespace="orchestrator",
                daemon_image="orchestrator-daemon:latest",
                home_size="10Gi",
                storage_class=None,
                runtime_class=None,
                sandbox=False,
                runner_port=port,
            ),
        ),
    ]


def test_deploy_passes_every_option(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.config import load_config
    from orchestrator.service.kubernetes import KubernetesOptions

    seen = _fake_kubernetes(monkeypatch)
    done = invoke(
        home, "deploy", "kubernetes", "--print", "--namespace", "ns", "--registry", "r.example/",
        "--tag", "v2", "--storage-class", "nfs", "--home-size", "5Gi", "--runtime-class",
        "gvisor", "--sandbox",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    port = load_config(Home(home)).runtime.swarm.port
    assert seen[0][3] == {"registry": "r.example/", "tag": "v2", "runner_port": port}
    assert seen[1][3] == KubernetesOptions(
        namespace="ns",
        daemon_image="r.example/orchestrator-daemon:v2",
        home_size="5Gi",
        storage_class="nfs",
        runtime_class="gvisor",
        sandbox=True,
        runner_port=port,
    )


# hook and agent (cli/agent.py)


def test_hook_session_start_passes_every_argument_and_exits_with_its_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestrator.agent import memory_hook

    seen: list[list[str]] = []

    def main(args: list[str]) -> int:
        seen.append(args)
        return 3

    monkeypatch.setattr(memory_hook, "main", main)
    done = CliRunner().invoke(cli, ["hook", "session-start", "--agent-dir", "/x", "--help"])
    assert done.exit_code == 3
    assert seen == [["--agent-dir", "/x", "--help"]]


def _fake_serve(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    import logging

    from orchestrator.agent import serve

    seen: list[Any] = []
    monkeypatch.setattr(serve, "serve", lambda settings: seen.append(settings))
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: seen.append(kwargs))
    return seen


def test_agent_serve_logs_to_stderr_and_serves_the_settings_of_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import logging

    from orchestrator.agent.settings import AgentSettings

    seen = _fake_serve(monkeypatch)
    env = {"ORCHESTRATOR_AGENT_DIR": str(tmp_path / "a"), "ORCHESTRATOR_MODEL": "m1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    done = CliRunner().invoke(cli, ["agent", "serve"])
    assert done.exit_code == 0, done.output
    stream = seen[0].pop("stream")
    assert stream.name == "<stderr>"  # click's runner stands in for sys.stderr
    assert seen[0] == {
        "level": logging.INFO,
        "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
    }
    assert seen[1] == AgentSettings.from_env()
    assert (seen[1].agent_dir, seen[1].model) == (tmp_path / "a", "m1")


def test_agent_serve_takes_the_folders_given(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from dataclasses import replace

    from orchestrator.agent.settings import AgentSettings

    seen = _fake_serve(monkeypatch)
    monkeypatch.setenv("ORCHESTRATOR_MODEL", "m2")
    done = CliRunner().invoke(
        cli,
        [
            "agent",
            "serve",
            "--agent-dir",
            str(tmp_path / "a"),
            "--runtime-dir",
            str(tmp_path / "r"),
        ],
    )
    assert done.exit_code == 0, done.output
    assert seen[1] == replace(
        AgentSettings.from_env(), agent_dir=tmp_path / "a", runtime_dir=tmp_path / "r"
    )
    seen.clear()
    assert CliRunner().invoke(cli, ["agent", "serve", "--runtime-dir", "/r"]).exit_code == 0
    assert seen[1] == replace(AgentSettings.from_env(), runtime_dir=Path("/r"))


def test_agent_turn_refuses_a_folder_without_memory(tmp_path: Path) -> None:
    done = CliRunner().invoke(cli, ["agent", "turn", "hi", "--agent-dir", str(tmp_path)])
    assert done.exit_code == 2
    assert done.stderr == (
        f"error: {tmp_path} is not an agent folder (no memory/ in it)\n"
        "hint: pass --agent-dir DIR, e.g. groups/<folder> of a home\n"
    )


def test_agent_turn_runs_one_turn_and_prints_its_result(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from orchestrator.agent import runner

    (tmp_path / "memory").mkdir()
    seen: list[Any] = []

    class Runner:
        def __init__(self, settings: Any) -> None:
            seen.append(settings.agent_dir)

        def handle(self, request: Any) -> Any:
            seen.append(request)
            return SimpleNamespace(status="ok", text="olá")

    monkeypatch.setattr(runner, "Runner", Runner)
    monkeypatch.setenv("ORCHESTRATOR_AGENT_DIR", str(tmp_path))
    done = CliRunner().invoke(cli, ["agent", "turn", "hello"])
    assert done.exit_code == 0, done.output
    assert done.stdout == '{\n  "status": "ok",\n  "text": "olá"\n}\n'
    request = seen[1]
    assert seen[0] == tmp_path
    assert (request.chat, request.thread, request.sender, request.text) == (
        "local",
        None,
        "local",
        "hello",
    )
    assert len(request.turn_id) == 32 and int(request.turn_id, 16) >= 0
    seen.clear()
    done = CliRunner().invoke(
        cli,
        ["agent", "turn", "hi", "--chat", "c", "--thread", "t", "--sender", "s",
         "--agent-dir", str(tmp_path)],
    )  # fmt: skip
    assert done.exit_code == 0
    assert (seen[1].chat, seen[1].thread, seen[1].sender) == ("c", "t", "s")


# image (cli/image.py)


def test_image_remembers_the_home_and_its_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.image import _remember_home
    from orchestrator.image import noop

    seen: list[Any] = []
    monkeypatch.setattr(noop, "remember_home", lambda *args: seen.append(args))
    _remember_home(Home(Path("/h/home")), "orchestrator-agent")
    assert seen == [("/h/home", "orchestrator-agent")]


def test_image_recorded_noop_inspects_directly_and_is_none_on_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestrator.cli.image import _recorded_noop
    from orchestrator.errors import EngineUnreachable
    from orchestrator.image import agent
    from orchestrator.runtime.engine import inspect_image_directly

    seen: list[Any] = []

    def recorded(repository: str, inspect: Any) -> str:
        seen.append((repository, inspect))
        return "result"

    monkeypatch.setattr(agent, "recorded_noop", recorded)
    assert _recorded_noop("repo") == "result"
    assert seen == [("repo", inspect_image_directly)]

    def unreachable(repository: str, inspect: Any) -> str:
        raise EngineUnreachable("no engine")

    monkeypatch.setattr(agent, "recorded_noop", unreachable)
    assert _recorded_noop("repo") is None


# memory history (cli/history.py)


def _history_home(home: Path) -> None:
    (home / "orchestrator.yaml").write_text("project: proj\nhistory:\n  max_file_bytes: 2k\n")
    GroupStore(Home(home)).add(GroupConfig(name="fam"))


class _FakeHistory:
    made: list[Any] = []
    changes = True

    def __init__(self, root: Path, folder: str, max_bytes: int) -> None:
        self.made.append((root, folder, max_bytes))

    def changed(self) -> bool:
        return self.changes

    def record_outside(self, container: Any) -> None:
        self.made.append(("recorded", container))


@pytest.mark.parametrize("changed", [True, False])
def test_history_records_outside_changes_with_the_container_first(
    home: Path, monkeypatch: pytest.MonkeyPatch, changed: bool
) -> None:
    from orchestrator import runtime
    from orchestrator.cli.history import _history
    from orchestrator.memory import history

    _history_home(home)
    monkeypatch.setattr(history, "History", _FakeHistory)
    monkeypatch.setattr(_FakeHistory, "made", [])
    monkeypatch.setattr(_FakeHistory, "changes", changed)
    backends: list[Any] = []

    class Backend:
        def inspect(self, name: str) -> str:
            return f"container {name}"

    def open_backend(config: Any, **kwargs: Any) -> Any:
        backends.append((config.project, kwargs))
        return Backend()

    monkeypatch.setattr(runtime, "open_backend", open_backend)
    group, made = _history(CliContext(Home(home), False), "fam")
    assert group.folder == "fam" and isinstance(made, _FakeHistory)
    expected: list[Any] = [(home / "groups", "fam", 2048)]
    if changed:
        expected.append(("recorded", "container proj.fam"))
        assert backends == [("proj", {"timeout": 5, "home": Home(home)})]
    else:
        assert backends == []
    assert _FakeHistory.made == expected


@pytest.mark.parametrize("error", ["orchestrator", "os"])
def test_history_container_is_unknown_without_an_engine(
    home: Path, monkeypatch: pytest.MonkeyPatch, error: str
) -> None:
    from orchestrator import runtime
    from orchestrator.cli.history import _container
    from orchestrator.errors import EngineUnreachable

    _history_home(home)

    def open_backend(config: Any, **kwargs: Any) -> Any:
        raise EngineUnreachable("no engine") if error == "orchestrator" else OSError("gone")

    monkeypatch.setattr(runtime, "open_backend", open_backend)
    group = GroupStore(Home(home)).find("fam")
    assert _container(CliContext(Home(home), False), group) == "unknown"


def test_history_since_is_that_long_before_now(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli import history
    from orchestrator.errors import BadInput

    monkeypatch.setattr(history, "time", SimpleNamespace(time=lambda: 100_000.0))
    assert history._since(None) is None
    assert history._since("2h") == 100_000.0 - 7200
    with pytest.raises(BadInput) as caught:
        history._since("soon")
    assert caught.value.message == "--since 'soon' is not a duration"
    assert caught.value.hint == "use 90m, 2h, 7d or seconds"


def test_history_when_and_who() -> None:
    from orchestrator.cli.history import _when, _who
    from orchestrator.memory.history import Provenance

    assert _when(86_400 * 365 + 3661.5) == "1971-01-01 01:01:01"
    with local_zone("Asia/Kolkata"):  # UTC whatever the local zone
        assert _when(86_400 * 365 + 3661.5) == "1971-01-01 01:01:01"

    def change(**kwargs: Any) -> Any:
        return SimpleNamespace(provenance=Provenance(**kwargs))

    assert _who(change(kind="turn", sender="bob", trust="member")) == "bob (member)"
    assert _who(change(kind="turn", sender="bob")) == "bob"
    assert _who(change(kind="host", trust="member")) == "host"


# learned behaviors (cli/learned.py)


def test_learned_when_is_utc_or_a_dash() -> None:
    from orchestrator.cli.learned import _when

    assert _when(None) == "-"
    assert _when(0.0) == "1970-01-01 00:00:00 UTC"
    assert _when(86_400 * 365 + 3661.5) == "1971-01-01 01:01:01 UTC"
    with local_zone("America/Sao_Paulo"):  # UTC whatever the local zone
        assert _when(0.0) == "1970-01-01 00:00:00 UTC"


def test_learned_held_are_the_learned_requests_of_the_group(home: Path) -> None:
    from orchestrator.cli.learned import held_learned
    from orchestrator.protocol import LEARNED_LABEL

    assert held_learned(Home(home), "fam") == []
    assert not (home / "state" / "queue.db").exists()
    first = _hold(home, kind=LEARNED_LABEL)
    _hold(home, kind="packages")
    _hold(home, group="other", kind=LEARNED_LABEL)
    second = _hold(home, kind=LEARNED_LABEL)
    assert [r.id for r in held_learned(Home(home), "fam")] == [first.id, second.id]


def test_learned_held_request_is_found_or_the_waiting_ids_are_named(home: Path) -> None:
    from orchestrator.cli.learned import _held_request
    from orchestrator.errors import BadInput
    from orchestrator.protocol import LEARNED_LABEL

    GroupStore(Home(home)).add(GroupConfig(name="fam"))
    obj = CliContext(Home(home), False)
    hint = "see them with: orchestrator learned show fam --pending"
    with pytest.raises(BadInput) as caught:
        _held_request(obj, "fam", 5)
    assert caught.value.message == "no change to the learned behaviors of 'fam' waits as request 5"
    assert caught.value.hint == hint
    first = _hold(home, kind=LEARNED_LABEL)
    elsewhere = _hold(home, group="other", kind=LEARNED_LABEL)
    second = _hold(home, kind=LEARNED_LABEL)
    group, found = _held_request(obj, "fam", second.id)
    assert (group.folder, found.id, found.content) == ("fam", second.id, second.content)
    with pytest.raises(BadInput) as caught:
        _held_request(obj, "fam", elsewhere.id)  # another group's
    assert caught.value.message == (
        f"no change to the learned behaviors of 'fam' waits as request {elsewhere.id} "
        f"(waiting: {first.id}, {second.id})"
    )
    assert caught.value.hint == hint


# scheduled tasks (cli/task.py)


def test_task_row_shortens_long_text_and_dashes_no_outcome() -> None:
    from orchestrator.cli.task import _row

    task = SimpleNamespace(
        id=3, group="fam", chat="c", schedule="every 1h", next_local="09:00", state="active",
        last_outcome=None, text="x" * 40,
    )  # fmt: skip
    assert _row(task) == [3, "fam", "c", "every 1h", "09:00", "active", "-", "x" * 40]  # type: ignore[arg-type]
    task.text, task.last_outcome = "y" * 41, "ok"
    assert _row(task)[6:] == ["ok", "y" * 39 + "…"]  # type: ignore[arg-type]


class _FakeTasks:
    def __init__(self, state: str) -> None:
        self.state = state
        self.calls: list[Any] = []

    def require(self, task_id: int) -> Any:
        self.calls.append(("require", task_id))
        return SimpleNamespace(state=self.state)

    def set_state(self, task_id: int, state: str) -> Any:
        self.calls.append(("set_state", task_id, state))
        return SimpleNamespace(id=task_id, next_local="tomorrow 09:00")

    def remove(self, task_id: int) -> None:
        self.calls.append(("remove", task_id))


def test_task_pause_and_resume_set_the_state(home: Path) -> None:
    from orchestrator.cli.task import _pause, _resume

    obj = CliContext(Home(home), False)
    store = _FakeTasks("active")
    assert _pause(obj, store, 4) == "task 4 paused"  # type: ignore[arg-type]
    assert _resume(obj, store, 4) == "task 4 active; next run tomorrow 09:00"  # type: ignore[arg-type]
    assert store.calls == [
        ("require", 4), ("set_state", 4, "paused"), ("require", 4), ("set_state", 4, "active")
    ]  # fmt: skip


def test_task_a_done_task_is_neither_paused_nor_resumed(home: Path) -> None:
    from orchestrator.cli.task import _pause, _resume
    from orchestrator.schedules import TaskRefused

    obj = CliContext(Home(home), False)
    store = _FakeTasks("done")
    with pytest.raises(TaskRefused) as caught:
        _pause(obj, store, 4)  # type: ignore[arg-type]
    assert caught.value.message == "task 4 is done; there is nothing to pause"
    with pytest.raises(TaskRefused) as caught:
        _resume(obj, store, 4)  # type: ignore[arg-type]
    assert caught.value.message == "task 4 is done; add a new one"
    assert store.calls == [("require", 4), ("require", 4)]


def test_task_remove_and_run_now(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.task import _remove, _run
    from orchestrator.daemon import scheduler

    GroupStore(Home(home)).add(GroupConfig(name="fam"))
    obj = CliContext(Home(home), False)
    store = _FakeTasks("active")
    assert _remove(obj, store, 6) == "task 6 removed"  # type: ignore[arg-type]
    assert store.calls == [("remove", 6)]
    seen: list[Any] = []

    class Scheduler:
        def __init__(self, tasks: Any, lookup: Any) -> None:
            seen.append((tasks, lookup))

        def run_now(self, task_id: int) -> Any:
            seen.append(task_id)
            return SimpleNamespace(message_id="m1")

    monkeypatch.setattr(scheduler, "Scheduler", Scheduler)
    monkeypatch.setattr(scheduler, "store_lookup", lambda groups: ("lookup", groups.home))
    assert _run(obj, store, 6) == (  # type: ignore[arg-type]
        "task 6 queued as message m1; the daemon delivers it (orchestrator message m1)"
    )
    assert seen == [(store, ("lookup", Home(home))), 6]


# memory (cli/memory.py)


def test_memory_index_is_opened_with_the_search_settings(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.cli.memory import _index
    from orchestrator.errors import InvalidConfig
    from orchestrator.memory import search
    from orchestrator.memory.embeddings import EmbedderUnavailable

    (home / "orchestrator.yaml").write_text(
        "memory_search:\n  embedder: wordllama\n  vector_weight: 0.25\n"
    )
    GroupStore(Home(home)).add(GroupConfig(name="fam"))
    seen: list[Any] = []

    def index_for(*args: Any) -> str:
        seen.append(args)
        return "the index"

    monkeypatch.setattr(search, "index_for", index_for)
    group, index = _index(CliContext(Home(home), False), "fam")
    assert (group.folder, index) == ("fam", "the index")
    assert seen == [(Home(home).state_dir, home / "groups", "fam", "wordllama", 0.25)]

    def unavailable(*args: Any) -> str:
        raise EmbedderUnavailable("the vectors extra is not installed")

    monkeypatch.setattr(search, "index_for", unavailable)
    with pytest.raises(InvalidConfig) as caught:
        _index(CliContext(Home(home), False), "fam")
    assert caught.value.message == (
        f"{home / 'orchestrator.yaml'}: the vectors extra is not installed"
    )
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def _fake_daemon(monkeypatch: pytest.MonkeyPatch, answer: Any) -> list[Any]:
    from orchestrator.errors import DaemonNotRunning
    from orchestrator.service import client

    seen: list[Any] = []

    def control_request(home: Home, message: dict[str, Any], **kwargs: Any) -> Any:
        seen.append((home.root, message, kwargs))
        if answer is None:
            raise DaemonNotRunning("none")
        return answer

    monkeypatch.setattr(client, "control_request", control_request)
    return seen


def test_memory_search_by_the_daemon_asks_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.memory import _search_by_daemon

    obj = CliContext(Home(home), False)
    seen = _fake_daemon(monkeypatch, None)
    assert _search_by_daemon(obj, "Fam", "tax", 4) is None
    assert seen == [
        (
            home,
            {"op": "search", "group": "Fam", "query": "tax", "max_results": 4},
            {"timeout": 60},
        )
    ]
    _fake_daemon(monkeypatch, {"ok": True, "group": "fam", "results": [{"path": "a"}]})
    assert _search_by_daemon(obj, "Fam", "tax", 4) == ("fam", [{"path": "a"}])
    _fake_daemon(monkeypatch, {"ok": True, "results": []})
    assert _search_by_daemon(obj, "Fam", "tax", 4) == ("Fam", [])


def test_memory_search_by_the_daemon_keeps_its_failure_kind(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.cli.memory import _search_by_daemon
    from orchestrator.errors import EXIT_BAD_INPUT, EXIT_FAILED, BadInput, OrchestratorError

    obj = CliContext(Home(home), False)
    _fake_daemon(
        monkeypatch, {"ok": False, "exit": EXIT_BAD_INPUT, "error": "no group", "hint": "h"}
    )
    with pytest.raises(BadInput) as caught:
        _search_by_daemon(obj, "x", "q", 6)
    assert (caught.value.message, caught.value.hint) == ("no group", "h")
    _fake_daemon(monkeypatch, {"ok": False, "exit": EXIT_FAILED, "error": "broken"})
    with pytest.raises(OrchestratorError) as failed:
        _search_by_daemon(obj, "x", "q", 6)
    assert not isinstance(failed.value, BadInput)
    assert (failed.value.message, failed.value.hint) == ("broken", None)
    _fake_daemon(monkeypatch, {"ok": True, "results": "many"})
    with pytest.raises(OrchestratorError) as failed:
        _search_by_daemon(obj, "x", "q", 6)
    assert failed.value.message == "the daemon answered a search without results"


def _report(**kwargs: Any) -> Any:
    fields: dict[str, Any] = {
        "folder": "fam", "mode": "fallback", "model": "", "usage": None, "eligible": [],
        "days": ["2026-01-01", "2026-01-03"], "lines": [1, 2, 3], "promoted": [],
        "skipped": [], "refused": [], "rejected": [], "notes": [], "dry_run": False,
        "writes": [], "change": None,
    }  # fmt: skip
    fields.update(kwargs)
    return SimpleNamespace(**fields)


def _shown(report: Any, capsys: Any) -> str:
    from orchestrator.cli.memory import _show_consolidation

    _show_consolidation(report)
    return str(capsys.readouterr().out)


def test_memory_consolidation_with_nothing_to_promote(capsys: Any) -> None:
    assert _shown(_report(days=["2026-01-02"], lines=[1]), capsys) == (
        "fam: 1 daily note (2026-01-02 to 2026-01-02), 1 line, 0 eligible; "
        "no model (offline): facts said on two days or more\n"
        "nothing to promote: memory is unchanged\n"
    )


def test_memory_consolidation_by_a_model_with_every_section(capsys: Any) -> None:
    eligible = [SimpleNamespace(cited=True), SimpleNamespace(cited=False)]
    said = SimpleNamespace
    report = _report(
        mode="model", model="p/m", usage={"calls": 2, "input_tokens": 12345, "output_tokens": 1000},
        eligible=eligible, promoted=[said(target="facts/a.md", line="x\nforged")],
        skipped=[said(what="s1", reason="known"), said(what="s2", reason="known")],
        refused=[said(what="r", reason="bad")], rejected=[said(what="n", reason="never")],
        notes=["a note"], change="0123456789abcdef",
    )  # fmt: skip
    assert _shown(report, capsys) == (
        "fam: 2 daily notes (2026-01-01 to 2026-01-03), 3 lines, 2 eligible "
        "(1 consolidated before); proposals by p/m (2 call(s), 12,345 tokens in, 1,000 out)\n"
        "promoted (1):\n  facts/a.md: x\\nforged\n"
        "skipped (2):\n  s1: known\n  s2: known\n"
        "refused (1):\n  r: bad\n"
        "never promoted (1):\n  n: never\n"
        "notes (1):\n  a note\n"
        "recorded as change 0123456789 (undo: orchestrator memory revert fam 0123456789)\n"
    )


def test_memory_consolidation_dry_run_says_what_it_would_write(capsys: Any) -> None:
    report = _report(dry_run=True, change="abc", writes=["memory/a.md", "memory/b.md"])
    assert _shown(report, capsys).endswith(
        "\ndry run: nothing was changed; it would write memory/a.md, memory/b.md\n"
    )
    assert _shown(_report(dry_run=True), capsys).endswith("\ndry run: nothing was changed\n")


def test_memory_has_the_history_commands() -> None:
    from orchestrator.cli import history
    from orchestrator.cli.memory import memory

    for command in (history.log, history.show, history.diff, history.blame, history.revert):
        assert memory.commands[str(command.name)] is command
    assert memory.commands["prune"] is history.prune


def _fresh(module: str) -> Any:
    """``module`` imported again into a new module object, its import-time code run once
    more (sys.modules keeps the one it had)."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.loader is not None
    made = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(made)
    return made


def test_memory_as_imported_has_the_history_commands() -> None:
    from orchestrator.cli import history

    fresh = _fresh("orchestrator.cli.memory")
    expected = [history.log, history.show, history.diff, history.blame, history.revert]
    for command in [*expected, history.prune]:
        assert fresh.memory.commands[str(command.name)] is command


def test_task_as_imported_has_its_change_commands_with_their_help() -> None:
    fresh = _fresh("orchestrator.cli.task")
    commands = fresh.task.commands
    assert commands["pause"].help == "Pause task ID: it does not run until resumed."
    assert commands["remove"].help == "Delete task ID and the record of its runs."
    assert commands["run"].help == "Run task ID now, once; its schedule is unchanged."
    assert str(commands["resume"].help).startswith("Resume task ID; a due time")
    assert all(commands[verb].callback is not None for verb in ("pause", "resume", "run"))
    assert [commands[v].name for v in ("pause", "resume", "remove", "run")] == [
        "pause", "resume", "remove", "run"
    ]  # fmt: skip


def test_task_change_commands_need_a_queue(home: Path) -> None:
    for verb in ("pause", "resume", "remove", "run"):
        done = invoke(home, "task", verb, "3")
        assert (done.exit_code, done.stderr) == (
            2,
            "error: no task 3\nhint: this home has no tasks yet\n",
        )
