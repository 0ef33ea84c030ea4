"""MCP servers against the real engine: mcp-server-time and mcp-server-git from PyPI
as group packages (built offline), run over stdio in the group's container; a remote
server (the SDK's own, streamable HTTP on loopback, behind a bearer token) called by
the host. A fake model provider decides which tools to call; the servers, the SDK, the
container and the daemon are real."""

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
from tests.test_mcp import TOKEN, tracker  # noqa: F401  (fixture)

pytestmark = pytest.mark.docker
KEY = "sk-docker-mcp-0123456789abcdef"


def test_stdio_servers_in_the_container_and_a_remote_one_through_the_host(
    home: Path,
    test_project: str,
    docker_client: Any,
    tracker: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider = FakeProvider("openai", KEY)
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    monkeypatch.setenv("TRACKER_TOKEN", TOKEN)
    try:
        (home / "orchestrator.yaml").write_text(
            provider_config(provider, _free_port(), context_tokens=200_000)
            + f"mcp_servers:\n  tracker:\n    url: {tracker}\n    groups: [fam]\n"
            "    headers:\n      Authorization: {env: TRACKER_TOKEN, prefix: 'Bearer '}\n"
        )
        GroupStore(Home(home)).add(
            GroupConfig(name="fam", provider="fake", model="fake-model", creators=("operator",))
        )
        group_dir = home / "groups" / "fam"
        built = cli(
            home,
            test_project,
            "group",
            "packages",
            "fam",
            "--add-python",
            "mcp-server-time==2026.10.19",
            "--add-python",
            "mcp-server-git==2026.10.19",
            "--build",
        )
        assert built.returncode == 0, built.stderr[-3000:]

        # a server that is not in the image is refused, and group.yaml stays as it was
        before = (group_dir / "group.yaml").read_text()
        missing = cli(
            home,
            test_project,
            "mcp",
            "add",
            "nope",
            "--group",
            "fam",
            "--command",
            "mcp-server-nowhere",
        )
        assert missing.returncode != 0 and "could not start" in missing.stderr, missing.stderr
        assert (group_dir / "group.yaml").read_text() == before

        added = cli(
            home,
            test_project,
            "mcp",
            "add",
            "time",
            "--group",
            "fam",
            "--command",
            "mcp-server-time",
            "--arg=--local-timezone",
            "--arg=UTC",
        )
        assert added.returncode == 0, added.stderr[-3000:]
        assert "get_current_time" in added.stderr and "2 tools approved" in added.stderr
        added = cli(
            home,
            test_project,
            "mcp",
            "add",
            "git",
            "--group",
            "fam",
            "--command",
            "mcp-server-git",
            "--tool",
            "git_log",
            "--tool",
            "git_status",
        )
        assert added.returncode == 0, added.stderr[-3000:]
        added = cli(
            home, test_project, "mcp", "add", "tracker", "--group", "fam", "--remote", "tracker"
        )
        assert added.returncode == 0, added.stderr[-3000:]
        listed = cli(home, test_project, "mcp", "list", "--group", "fam", "--check", "--json")
        assert listed.returncode == 0, (listed.stdout, listed.stderr)
        listing = json.loads(listed.stdout)
        by_name = {s["server"]: s for s in listing["servers"]}
        assert by_name["time"]["runs"] == "container" and by_name["tracker"]["runs"] == "host"
        assert by_name["git"]["tools"] == ["git_log", "git_status"]
        assert {w["tool"] for w in by_name["git"]["waiting"]} >= {"git_commit", "git_reset"}
        assert by_name["time"]["state"] == "ok" and by_name["time"]["waiting"] == []

        repo = "/workspace/agent/files/repo"
        provider.script.extend(
            [
                ToolUse("mcp__time__get_current_time", {"timezone": "Asia/Tokyo"}),
                ToolUse(
                    "shell",
                    {
                        "command": "git init -q repo && cd repo && echo hi > a.txt && git add a.txt"
                        " && git -c user.name=Ada -c user.email=ada@example.org commit -qm "
                        "'first commit of the repo'"
                    },
                    call_id="call_2",
                ),
                ToolUse("mcp__git__git_log", {"repo_path": repo}, call_id="call_3"),
                ToolUse(
                    "mcp__git__git_commit", {"repo_path": repo, "message": "x"}, call_id="call_4"
                ),
                ToolUse("mcp__tracker__find", {"q": "login"}, call_id="call_5"),
                Text("checked"),
            ]
        )
        proc = DaemonProcess(home, test_project)
        proc.start()
        try:
            answer = proc.send("fam", "what time is it in Tokyo, and the log?", wait=True)
            assert answer["state"] == "done", answer
            first_results = tool_results(group_dir)
            # a creator's agent asks for a stdio server from the chat; a creator approves
            # it there; its tools are listed in a throwaway container and offered next
            provider.script.extend(
                [
                    ToolUse(
                        "request_mcp_server",
                        {
                            "server": "clock",
                            "command": "mcp-server-time",
                            "args": ["--local-timezone", "UTC"],
                            "reason": "to tell the time",
                        },
                    ),
                    Text("asked"),
                ]
            )
            asked = proc.send("fam", "add a clock", wait=True)
            notice = [r for r in asked["replies"] if r.startswith("[orchestrator] Request")]
            assert notice and '"command": "mcp-server-time"' in notice[0], asked
            request_id = int(notice[0].split()[2].rstrip(":"))
            approved = proc.send("fam", f"/approve {request_id}", wait=True)
            assert approved["replies"][0].startswith(f"Approved request {request_id}"), approved
            pinned = ""
            for _ in range(600):
                replies = proc.get(asked["id"])["replies"]
                pinned = next((r for r in replies if "tools approved" in r), "")
                if pinned or any("could not be listed" in r for r in replies):
                    break
                time.sleep(0.2)
            assert "2 tools approved (convert_time, get_current_time)" in pinned, replies
            # the daemon's reconcile makes the container again with the server, between turns
            from docker.errors import NotFound

            for _ in range(300):
                try:
                    env = docker_client.containers.get(f"{test_project}.fam").attrs["Config"]
                except NotFound:
                    env = {}
                setting = [e for e in env.get("Env") or [] if e.startswith("ORCHESTRATOR_MCP=")]
                if setting and '"clock"' in setting[0]:
                    break
                time.sleep(0.5)
            else:
                raise AssertionError(
                    "the container was not made again with the new server: "
                    + proc.log.read_text()[-4000:]
                )
            provider.script.extend(
                [
                    ToolUse("mcp__clock__get_current_time", {"timezone": "Europe/Lisbon"}),
                    Text("it is late"),
                ]
            )
            lisbon = proc.send("fam", "what time is it in Lisbon?", wait=True)
            assert lisbon["state"] == "done", lisbon
            assert '"timezone": "Europe/Lisbon"' in tool_results(group_dir)[-1], lisbon
        finally:
            proc.stop()
        offered = [t["function"]["name"] for t in provider.seen[0].body["tools"]]
        assert {"mcp__time__get_current_time", "mcp__git__git_log", "mcp__tracker__find"} <= set(
            offered
        )
        assert "mcp__git__git_commit" not in offered  # listed by the server, not approved
        time_, shell, log, commit, found = first_results[:5]
        assert '"timezone": "Asia/Tokyo"' in time_ and "+09:00" in time_, time_
        assert shell.startswith("exit code 0"), shell
        assert "first commit of the repo" in log and "Ada" in log, log
        assert "unknown tool 'mcp__git__git_commit'" in commit, commit
        assert "issue 7: login is broken" in found, found

        # the bearer token is nowhere in the container: its environment, its files, the
        # processes' environments, the frames it was sent (the transcript holds them)
        container = docker_client.containers.get(f"{test_project}.fam")
        assert TOKEN not in json.dumps(container.attrs["Config"]["Env"])
        _, out = container.exec_run(
            [
                "sh",
                "-c",
                f"grep -rl {TOKEN} /workspace /tmp /run/orchestrator /home "
                "/proc/[0-9]*/environ 2>/dev/null; echo scanned",
            ]
        )
        assert out.decode().strip() == "scanned", out
        for path in group_dir.rglob("*"):
            if path.is_file():
                assert TOKEN.encode() not in path.read_bytes(), path
        assert TOKEN not in json.dumps([s.body for s in provider.seen])
    finally:
        provider.close()
