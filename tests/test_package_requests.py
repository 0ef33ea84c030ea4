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
