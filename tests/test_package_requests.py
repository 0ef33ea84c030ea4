"""Package requests from the chat: held with what an approval applies, approved only by a
creator in that chat, then built (the build itself is the docker suite's)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups.config import load_group_config, set_option
from orchestrator.store.held import HeldRequests
from tests.fakeproviders import FakeProvider, Text, ToolUse
from tests.relayrig import offered, provider, say, served, setup, tool_results  # noqa: F401


def test_a_request_needs_from_chat_and_is_held_for_a_creator_in_that_chat(
    served: dict[str, Any], provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    monkeypatch.setattr(
        "orchestrator.relay.package_requests._build",
        lambda groups_dir, folder: built.append(folder) or "the image is ready (test)",
    )
    config_file: Path = served["runtime"].store.load("fam").config_file
    provider.default = Text("ok")
    say(served, "hello", "alice")
    assert "request_packages" not in offered(provider)  # off unless the operator allows it
    set_option(config_file, "packages.from_chat", "true")
    # a guest-free group: bob is a member and may ask, not approve
    provider.script.extend(
        [
            ToolUse("request_packages", {"debian": ["tree"], "reason": "to draw folders"}),
            Text("asked"),
        ]
    )
    asked = say(served, "could you get tree?", "bob")
    assert "request_packages" in offered(provider)
    [result] = tool_results(provider)
    queue = served["daemon"].queue
    [request] = HeldRequests(queue).waiting("fam")
    assert result.startswith(f"PENDING: request {request.id}")
    shown = json.loads(request.content)
    assert shown["debian"] == ["tree"] and shown["asked by"] == "bob"
    notice = [r for r in asked.replies if r.startswith("[orchestrator]")]
    assert notice and '"tree"' in notice[0] and f"/approve {request.id}" in notice[0]
    before = config_file.read_text()
    # a member's approval is refused; a creator elsewhere cannot approve it
    assert say(served, f"/approve {request.id}", "bob").replies == (
        "Only this group's creators can approve what waits for approval.",
    )
    assert say(served, f"/approve {request.id}", "alice", chat="other").replies == (
        f"No request {request.id} waits in this chat.",
    )
    assert config_file.read_text() == before
    # the creator approves it in the chat: group.yaml gets it, the image is built
    approved = say(served, f"/approve {request.id}", "alice")
    assert approved.replies[0].startswith(f"Approved request {request.id}")
    assert load_group_config(config_file).packages.debian == ("tree",)
    assert "# Scheduled tasks" in config_file.read_text()  # comments kept
    for _ in range(100):
        if built:
            break
        time.sleep(0.05)
    assert built == ["fam"]
    for _ in range(100):  # the chat is told on the message that asked
        replies = queue.get(request.message_id).replies
        if any("the image is ready (test)" in r for r in replies):
            break
        time.sleep(0.05)
    assert any("the image is ready (test)" in r for r in replies), replies
    assert HeldRequests(queue).waiting("fam") == []


def test_bad_requests_are_refused_with_the_reason(
    served: dict[str, Any], provider: FakeProvider
) -> None:
    config_file: Path = served["runtime"].store.load("fam").config_file
    set_option(config_file, "packages.from_chat", "true")
    provider.script.extend(
        [
            ToolUse("request_packages", {"debian": ["-oDpkg::Options=x"], "reason": "x"}),
            ToolUse("request_packages", {"python": ["pkg@http://x/y.whl"], "reason": "x"}),
            ToolUse("request_packages", {"debian": ["tree"], "reason": ""}),
            ToolUse("request_packages", {"reason": "nothing named"}),
            Text("tried"),
        ]
    )
    say(served, "get things", "alice")
    results = tool_results(provider)
    assert all(r.startswith("NOT_REQUESTED") for r in results), results
    assert "packages.debian[0]" in results[0] and "packages.python[0]" in results[1]
    assert HeldRequests(served["daemon"].queue).waiting("fam") == []


def test_an_approval_replaces_a_project_however_its_name_is_spelled(tmp_path: Path) -> None:
    # typing-extensions in group.yaml and its lock; the request spells it typing_extensions
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig, config_lock, set_packages
    from orchestrator.groups.packages import LockedWheel, PythonLock, read_lock, write_lock
    from orchestrator.home import Home
    from orchestrator.relay.package_requests import apply_held
    from orchestrator.store.held import HeldRequest

    group = GroupStore(Home(tmp_path)).add(GroupConfig(name="fam"))
    with config_lock(group.config_file):
        set_packages(group.config_file, (), ("typing-extensions==4.0.0", "six==1.16.0"))
    old = LockedWheel("typing-extensions", "4.0.0", "typing_extensions-4.0.0.whl", "a" * 64)
    six = LockedWheel("six", "1.16.0", "six-1.16.0-py2.py3-none-any.whl", "b" * 64)
    write_lock(group.path, PythonLock(("typing-extensions==4.0.0", "six==1.16.0"), (old, six)))
    asked = {
        "debian": [],
        "python": ["typing_extensions==4.12.2"],
        "wheels": [{"file": "typing_extensions-4.12.2-py3-none-any.whl", "sha256": "c" * 64}],
    }
    content = json.dumps(asked)
    request = HeldRequest(
        1, "fam", "packages", content, "0" * 64, "cli", "c", None, "alice", "m1", True, 0, 1e12
    )
    done, _ = apply_held(tmp_path / "groups", group.path.name, request, "alice")
    assert done
    packages = load_group_config(group.config_file).packages
    assert packages.python == ("six==1.16.0", "typing_extensions==4.12.2")
    lock = read_lock(group.path)
    assert lock is not None
    assert sorted((w.name, w.version) for w in lock.wheels) == [
        ("six", "1.16.0"),
        ("typing_extensions", "4.12.2"),
    ]


def _held(content: dict[str, Any], group: str = "fam") -> Any:
    from orchestrator.store.held import HeldRequest

    return HeldRequest(
        7, group, "packages", json.dumps(content), "0" * 64, "cli", "c", None, "bob", "m1", True,
        0, 1e12,
    )  # fmt: skip


def test_an_approval_locks_the_files_and_hashes_shown_and_logs_who_approved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.groups.packages import LockedWheel, read_lock
    from orchestrator.home import Home
    from orchestrator.relay.package_requests import apply_held

    group = GroupStore(Home(tmp_path)).add(GroupConfig(name="fam"))
    asked = {
        "debian": ["tree"],
        "python": ["rich==13.7.1"],
        "wheels": [{"file": "rich-13.7.1-py3-none-any.whl", "sha256": "d" * 64}],
    }
    with caplog.at_level("INFO", logger="orchestrator.packages"):
        result = apply_held(tmp_path / "groups", group.path.name, _held(asked), "alice")
    assert result == (True, "its packages are in group.yaml; the group's image is being built")
    lock = read_lock(group.path)
    assert lock is not None
    assert lock.wheels == (LockedWheel("rich", "13.7.1", "rich-13.7.1-py3-none-any.whl", "d" * 64),)
    assert load_group_config(group.config_file).packages.debian == ("tree",)
    assert [r.getMessage() for r in caplog.records if r.name == "orchestrator.packages"] == [
        f"group {group.path.name}: package request 7 (tree, rich==13.7.1) approved by 'alice'"
    ]


def test_the_build_after_an_approval_runs_in_the_background_and_tells_the_chat(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orchestrator.relay.package_requests import build_after_approval

    told: list[tuple[str, list[str]]] = []

    class Queue:
        def add_host_notices(self, message_id: str, notices: list[str]) -> None:
            told.append((message_id, notices))

    monkeypatch.setattr(
        "orchestrator.relay.package_requests._build",
        lambda groups_dir, folder: f"built {folder} in {groups_dir}",
    )
    thread = build_after_approval(Queue(), Path("groups"), _held({}))  # type: ignore[arg-type]
    assert thread is not None and thread.name == "packages-fam" and thread.daemon
    thread.join(10)
    assert told == [("m1", ["[orchestrator] Request 7: built fam in groups"])]
    assert build_after_approval(Queue(), Path("g"), _held({}), background=False) is None  # type: ignore[arg-type]
    assert len(told) == 2


class _Client:
    closed = False

    def close(self) -> None:
        self.closed = True


def _fake_build(monkeypatch: pytest.MonkeyPatch, outcome: Any) -> tuple[_Client, list[Any]]:
    from types import SimpleNamespace

    client = _Client()
    calls: list[Any] = []
    config = SimpleNamespace(image="agent:img", project="proj", debian_mirror="http://mirror")

    def load_config(home: Any) -> Any:
        calls.append(("config", home.root))
        return config

    class Store:
        def __init__(self, home: Any) -> None:
            calls.append(("store", home.root))

        def load(self, folder: str) -> str:
            return f"group {folder}"

    def build(client_: Any, project: str, group: str, agent: str, *, mirror: str) -> Any:
        calls.append(("build", client_ is client, project, group, agent, mirror))
        if isinstance(outcome, Exception):
            raise outcome
        return SimpleNamespace(tag=outcome)

    monkeypatch.setattr("orchestrator.config.load_config", load_config)
    monkeypatch.setattr("orchestrator.groups.GroupStore", Store)
    monkeypatch.setattr("orchestrator.runtime.engine.connect", lambda: client)
    monkeypatch.setattr(
        "orchestrator.image.agent.agent_image_ref",
        lambda c, image: f"ref of {image}" if c is client else "another client",
    )
    monkeypatch.setattr("orchestrator.image.group.build_group_image", build)
    return client, calls


def test_the_build_says_where_the_packages_are_or_why_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from orchestrator.errors import OrchestratorError
    from orchestrator.relay.package_requests import _build

    client, calls = _fake_build(monkeypatch, "orchestrator-fam:abc")
    groups = tmp_path / "groups"
    with caplog.at_level("INFO", logger="orchestrator.packages"):
        said = _build(groups, "fam")
    assert said == (
        "the packages are installed in the group's image (orchestrator-fam:abc); the group "
        "moves to it between turns, within a minute"
    )
    assert calls == [
        ("config", tmp_path),
        ("store", tmp_path),
        ("build", True, "proj", "group fam", "ref of agent:img", "http://mirror"),
    ]
    assert client.closed
    assert "group fam: image orchestrator-fam:abc ready for its packages" in caplog.messages
    # the daemon's own error says why in the log; any other leaves its traceback there
    for failure, logged, traced in (
        (OrchestratorError("no space left"), ": no space left", False),
        (RuntimeError("engine gone"), "", True),
    ):
        caplog.clear()
        client, _ = _fake_build(monkeypatch, failure)
        with caplog.at_level("INFO", logger="orchestrator.packages"):
            said = _build(groups, "fam")
        assert said == f"the group's image could not be built: {failure}; it keeps its image"
        assert client.closed
        assert caplog.messages == ["group fam: the image for its packages failed" + logged]
        assert (caplog.records[0].exc_info is not None) is traced
