"""The shell's egress gate against the real engine: in a group whose web policy is on,
curl in the container reaches an address the policy opened, through the forwarder, the
read-only socket and the host's gate, and is refused for another; in a group with the
policy off there is no proxy and curl fails (the container has no network); web_fetch
from the same turn reaches the page through the host. A fake model provider decides the
calls; the container, the gate and the daemon are real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from tests.dockerrig import docker_home, provider_config, tool_results  # noqa: F401
from tests.fakeproviders import FakeProvider, Text, ToolUse
from tests.test_daemon_docker import DaemonProcess, _free_port
from tests.websites import website

pytestmark = pytest.mark.docker
KEY = "sk-docker-web-0123456789abcdef"


def test_the_shell_reaches_only_what_the_policy_opens_and_only_with_it_on(
    home: Path, test_project: str, docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = FakeProvider("openai", KEY)
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    with website() as port, website() as other:
        try:
            (home / "orchestrator.yaml").write_text(
                provider_config(provider, _free_port(), context_tokens=200_000)
            )
            store = GroupStore(Home(home))
            for name in ("fam", "work"):
                store.add(
                    GroupConfig(name=name, provider="fake", model="fake-model",
                                creators=("operator",))
                )  # fmt: skip
            fam = home / "groups" / "fam"
            (fam / "group.yaml").write_text(
                (fam / "group.yaml").read_text()
                + f"web:\n  enabled: true\n  allow_addresses: ['127.0.0.1:{port}']\n"
            )
            curl = (
                "curl -s -m 10 -o /dev/null -w 'opened %{{http_code}}\\n' "
                f"http://127.0.0.1:{port}/data.json; "
                "curl -s -m 10 -o /dev/null -w 'other %{{http_code}}\\n' "
                f"http://127.0.0.1:{other}/data.json; "
                "echo proxy=${{HTTP_PROXY:-none}}; ls -ld /run/orchestrator-egress; "
                "touch /run/orchestrator-egress/x 2>&1 | tail -1; ip -o link 2>/dev/null | "
                "cut -d: -f2 | tr -d ' ' | tr '\\n' ' '; cat /proc/net/dev | tail -n +3 | "
                "cut -d: -f1 | tr -d ' ' | tr '\\n' ' '"
            )
            provider.script.extend(
                [
                    ToolUse("shell", {"command": curl.format()}),
                    ToolUse(
                        "web_fetch", {"url": f"http://127.0.0.1:{port}/article"}, call_id="call_2"
                    ),
                    Text("checked"),
                    ToolUse("shell", {"command": curl.format()}),
                    Text("checked"),
                ]
            )
            proc = DaemonProcess(home, test_project)
            proc.start()
            try:
                assert proc.send("fam", "look it up", wait=True)["state"] == "done"
                assert proc.send("work", "look it up", wait=True)["state"] == "done"
            finally:
                proc.stop()
            shell, fetched = tool_results(fam)
            assert "opened 200" in shell, shell
            assert "other 403" in shell, shell  # the gate refused it
            assert "proxy=http://127.0.0.1:3128" in shell
            assert "Read-only file system" in shell  # the socket's folder is the host's
            assert shell.strip().endswith("lo"), shell  # no interface but lo
            assert "Tram 28 climbs from Martim Moniz" in fetched
            [off] = tool_results(home / "groups" / "work")
            assert "opened 000" in off and "other 000" in off and "proxy=none" in off, off
            log = proc.log.read_text()
            assert f"egress gate of fam: GET 127.0.0.1:{port}" in log
            assert "egress gate of fam: GET" in log and "refused" in log
        finally:
            provider.close()


def test_a_group_flooding_its_gate_leaves_its_neighbour_answering(
    home: Path, test_project: str, docker_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    provider = FakeProvider("openai", KEY)
    monkeypatch.setenv("FAKE_OPENAI_KEY", KEY)
    with website() as port:
        try:
            (home / "orchestrator.yaml").write_text(
                provider_config(provider, _free_port(), context_tokens=200_000)
            )
            store = GroupStore(Home(home))
            for name in ("evil", "good"):
                store.add(
                    GroupConfig(name=name, provider="fake", model="fake-model",
                                creators=("operator",))
                )  # fmt: skip
            evil = home / "groups" / "evil"
            (evil / "group.yaml").write_text(
                (evil / "group.yaml").read_text()
                + f"web:\n  enabled: true\n  allow_addresses: ['127.0.0.1:{port}']\n"
            )
            flood = (
                "for i in $(seq 60); do curl -s -m 20 -o /dev/null -w '%{http_code}\\n' "
                f"http://127.0.0.1:{port}/drip & done > codes.txt; wait; "
                "sort codes.txt | uniq -c"
            )
            proc = DaemonProcess(home, test_project)
            proc.start()
            try:
                for name in ("evil", "good"):  # both containers up (the default answer)
                    assert proc.send(name, "warm up", wait=True)["state"] == "done"
                provider.script.extend(
                    [
                        ToolUse("shell", {"command": flood, "timeout_seconds": 60}),
                        Text("good"),
                        Text("evil done"),
                    ]
                )
                attack = proc.send("evil", "flood it")
                deadline = time.monotonic() + 60
                while "egress gate of evil: GET" not in proc.log.read_text():
                    assert time.monotonic() < deadline, proc.log.read_text()[-3000:]
                    time.sleep(0.2)
                started = time.monotonic()
                good = proc.send("good", "what do you know?", wait=True)
                latency = time.monotonic() - started
                assert good["state"] == "done" and good["replies"] == ["good"], good
                print(
                    f"a neighbour's turn while one group floods its gate: {latency * 1000:.0f} ms"
                )
                deadline = time.monotonic() + 120
                while proc.get(attack["id"])["state"] != "done":
                    assert time.monotonic() < deadline, proc.get(attack["id"])
                    time.sleep(0.5)
            finally:
                proc.stop()
            [*_, flooded] = tool_results(evil)
            # the gate held the group to its bound: the rest were refused, not queued
            assert " 429" in flooded and " 200" in flooded, flooded
        finally:
            provider.close()
