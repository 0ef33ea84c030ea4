"""A group's own image for its packages, against the real engine: built offline (a base
with a Debian package absent from the agent image, a locked wheel), the group's
container moved to it, the shell using both; an sdist-only package refused."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from tests.dockerrig import cli, docker_home, provider_config, tool_results  # noqa: F401
from tests.fakeproviders import FakeProvider, Text, ToolUse
from tests.test_daemon_docker import DaemonProcess, _free_port

pytestmark = pytest.mark.docker
KEY = "sk-docker-packages-0123456789abcdef"


def test_a_groups_packages_are_built_offline_and_its_shell_uses_them(
    home: Path, test_project: str, docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = FakeProvider("openai", KEY)
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    try:
        (home / "orchestrator.yaml").write_text(provider_config(provider, _free_port()))
        GroupStore(Home(home)).add(
            GroupConfig(name="fam", provider="fake", model="fake-model", creators=("operator",))
        )
        config_file = home / "groups" / "fam" / "group.yaml"
        # tree is not in the agent image; tabulate ships a wheel
        probe = docker_client.containers.run(
            "orchestrator-agent:latest",
            ["sh", "-c", "command -v tree || echo none"],
            remove=True,
            network_mode="none",
        )
        assert probe.decode().strip() == "none"
        built = cli(
            home,
            test_project,
            "group",
            "packages",
            "fam",
            "--add-debian",
            "tree",
            "--add-python",
            "tabulate==0.9.0",
            "--build",
        )
        assert built.returncode == 0, built.stderr[-3000:]
        lock = json.loads((home / "groups" / "fam" / "packages.lock").read_text())
        assert [w["filename"] for w in lock["wheels"]] == ["tabulate-0.9.0-py3-none-any.whl"]
        assert len(lock["wheels"][0]["sha256"]) == 64
        state = json.loads(cli(home, test_project, "group", "packages", "fam", "--json").stdout)
        assert state["built"] and state["built"].startswith("orchestrator-group-fam-")
        again = cli(home, test_project, "group", "packages", "fam", "--build")
        assert again.returncode == 0 and "current: " + state["built"] in again.stderr

        # an sdist-only package is refused with the reason, and nothing changes
        before = config_file.read_text()
        refused = cli(
            home, test_project, "group", "packages", "fam", "--add-python", "docopt==0.6.2"
        )
        assert refused.returncode == 2 and "no wheel" in refused.stderr, refused.stderr
        assert "setup.py" in refused.stderr and config_file.read_text() == before

        # the group's container runs its image, and the shell has both packages
        provider.script.extend(
            [
                ToolUse(
                    "shell",
                    {
                        "command": "tree --version | cut -c1-6; python3 -c "
                        "'import tabulate; print(tabulate.tabulate([[1, 2]]))'"
                    },
                ),
                Text("checked"),
            ]
        )
        proc = DaemonProcess(home, test_project)
        proc.start()
        try:
            answer = proc.send("fam", "check the tools", wait=True)
            assert answer["state"] == "done", answer
        finally:
            proc.stop()
        container = docker_client.containers.get(f"{test_project}.fam")
        assert container.attrs["Config"]["Image"] == state["built"]
        group = GroupStore(Home(home)).load("fam")
        [result] = tool_results(group.path)
        assert result.startswith("exit code 0\ntree v\n"), result
        assert "-  -\n1  2\n-  -" in result, result
    finally:
        provider.close()


def test_a_package_request_approved_in_the_chat_is_built_and_used(
    home: Path, test_project: str, docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = FakeProvider("openai", KEY)
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    try:
        # a window no turn here comes near: no early memory flush takes a scripted answer
        (home / "orchestrator.yaml").write_text(
            provider_config(provider, _free_port(), context_tokens=200_000)
        )
        from orchestrator.groups.config import set_option

        group = GroupStore(Home(home)).add(
            GroupConfig(
                name="fam",
                provider="fake",
                model="fake-model",
                creators=("operator",),
                members=("bob",),
            )
        )
        set_option(group.config_file, "packages.from_chat", "true")
        proc = DaemonProcess(home, test_project)
        proc.start()
        try:
            provider.script.extend(
                [
                    ToolUse("request_packages", {"debian": ["tree"], "reason": "folders"}),
                    Text("asked"),
                ]
            )
            asked = proc.send("fam", "please get tree", chat="c", sender="bob", wait=True)
            notice = [r for r in asked["replies"] if r.startswith("[orchestrator] Request")]
            assert notice and '"tree"' in notice[0], asked
            request_id = int(notice[0].split()[2].rstrip(":"))
            # a member's approval changes nothing
            refused = proc.send("fam", f"/approve {request_id}", chat="c", sender="bob", wait=True)
            assert refused["replies"][0].startswith("Only this group's creators"), refused
            approved = proc.send("fam", f"/approve {request_id}", chat="c", wait=True)
            assert approved["replies"][0].startswith(f"Approved request {request_id}"), approved
            # the build runs in the background; the chat is told on the asking message
            ready = ""
            for _ in range(1200):
                replies = proc.get(asked["id"])["replies"]
                ready = next((r for r in replies if "installed in the group's image" in r), "")
                if ready or any("could not be built" in r for r in replies):
                    break
                time.sleep(0.5)
            assert ready, proc.get(asked["id"])["replies"]
            tag = ready.split("(")[1].split(")")[0]
            # the daemon's reconcile moves the container to it; the next turn has tree
            from docker.errors import NotFound

            running = None
            for _ in range(300):
                try:  # gone for a moment while it is made again
                    running = docker_client.containers.get(f"{test_project}.fam")
                except NotFound:
                    running = None
                if running is not None and running.attrs["Config"]["Image"] == tag:
                    break
                time.sleep(0.5)
            assert running is not None and running.attrs["Config"]["Image"] == tag
            provider.script.extend([ToolUse("shell", {"command": "command -v tree"}), Text("ok")])
            proc.send("fam", "is tree there?", chat="c", wait=True)
            results = tool_results(group.path)
            assert results[-1] == "exit code 0\n/usr/bin/tree\n", results
        finally:
            proc.stop()
    finally:
        provider.close()
