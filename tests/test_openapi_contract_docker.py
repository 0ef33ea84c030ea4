"""The HTTP API against its OpenAPI description: schemathesis (its own ``schemathesis run``
process) drives the real daemon process, with group containers on the real engine,
through every operation the daemon's served description names, once with the operator's
token and once with a bridge's named token: no 5xx, every response as described, and
the bridge never reading or writing outside its senders (a check of ours in
tests/openapi_hooks.py during the run, and the queue and the run's log read after it).

Bounded for CI: a fixed number of examples per operation, a fixed seed, derandomized
generation, no example database."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from orchestrator.channels.http import OPENAPI_DESCRIPTION
from orchestrator.groups import GroupStore
from orchestrator.groups.config import GroupConfig
from orchestrator.home import Home
from orchestrator.media.outbox import ReplyFile
from orchestrator.store.messages import MessageQueue, new_message, open_queue
from tests.engineclean import remove_containers
from tests.serveproc import Serve

pytestmark = pytest.mark.docker
OPERATOR = "contract-operator-token-0123456789"
BRIDGE = "contract-bridge-token-0123456789"
PREFIX = "rocketchat:"
ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = {
    "healthz", "metrics", "openapi", "listGroups", "sendMessage", "chatMessages",
    "getMessage", "getFile",
}  # fmt: skip


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _seed(home: Path) -> dict[str, Any]:
    """Groups fam (anyone may talk, as a guest) and shop (its creator only), and done
    messages whose replies carry files: the operator's, the bridge's own, and three the
    bridge may not read (another sender in its channel, its sender in another channel,
    the dashboard's). Returns what the hooks need to know of them."""
    h = Home(home)
    store = GroupStore(h)
    store.add(GroupConfig(name="fam", creators=("operator",), unknown_senders="allow"))
    store.add(GroupConfig(name="shop", creators=("operator",)))
    queue = open_queue(h)
    seeded: dict[str, str] = {}
    outbox = h.state_dir / "outbox" / "fam"
    outbox.mkdir(parents=True)
    for key, sender, channel, chat in (
        ("operator", "operator", "http", "kitchen"),
        ("bridge", f"{PREFIX}alice", f"http:{PREFIX[:-1]}", "general"),
        ("gone", f"{PREFIX}alice", f"http:{PREFIX[:-1]}", "general"),
        ("intruder", "operator", f"http:{PREFIX[:-1]}", "general"),
        ("elsewhere", f"{PREFIX}alice", "http", "general"),
        ("dashboard", "operator", "dashboard", "general"),
    ):
        message = queue.put(
            new_message(
                group="fam", session=f"{channel}.{chat}", chat=chat, thread=None, sender=sender,
                trust="creator", text=f"the {key} message", channel=channel,
            )
        )  # fmt: skip
        copy = outbox / f"{message.id}.0.txt"
        copy.write_text(f"a file for the {key} message\n")
        queue.add_file_reply(message.id, "here it is", ReplyFile(
            0, f"{key}.txt", "text/plain", copy.stat().st_size, "document", str(copy)))  # fmt: skip
        queue.complete(message.id, ["done"], first_seq=1)
        if key == "gone":
            copy.unlink()  # past the outbox's week: 410
        seeded[key] = message.id
    queue.close()
    return {
        "seeded": seeded,
        "groups": ["fam", "shop"],
        "chats": ["kitchen", "general"],
        "files": {mid: [0] for mid in seeded.values()},
        "foreign": [seeded[k] for k in ("operator", "intruder", "elsewhere", "dashboard")],
        "prefix": PREFIX,
        "channels": ["cli", "dashboard", "http", f"http:{PREFIX[:-1]}"],
    }


def _schemathesis(base: str, token: str, setup: Path, report: Path) -> dict[str, Any]:
    """One ``schemathesis run`` of the description against the daemon; its JSON report.
    (Read from the package, not from /v1/openapi.yaml: schemathesis leaves the route it
    read a description from untested. The test compares the two.)"""
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file", str(ROOT / "tests" / "schemathesis.toml"),
        "--no-color",
        "run",
        str(OPENAPI_DESCRIPTION),
        "--url", base,
        "--header", f"Authorization: Bearer {token}",
        "--checks", "all",
        "--report", "json",
        "--report-json-path", str(report),
    ]  # fmt: skip
    env = {**os.environ, "CONTRACT_SETUP": str(setup), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        command, cwd=report.parent, env=env, capture_output=True, text=True, timeout=600
    )
    print(done.stdout[-20_000:], done.stderr[-5_000:])
    assert report.is_file(), done.stdout + done.stderr
    result: dict[str, Any] = json.loads(report.read_text())
    result["output"] = done.stdout
    return result


def _call(
    base: str, path: str, token: str | None, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    """A GET (or, with ``body``, a POST of JSON); the status and the body (parsed when
    it is JSON)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(base + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def _wait_for_api(base: str, daemon: Serve) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if _call(base, "/healthz", None)[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, daemon.log.read_text()[-4000:]
        time.sleep(0.1)


def _log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _bridge_is_kept_to_its_senders(base: str, seeded: dict[str, str]) -> None:
    """Asked outright: the bridge reads its own message and file and none of the others',
    which the operator reads; its view of a chat is its own senders in its own channel;
    it cannot speak for another sender or in another channel."""
    for key in ("operator", "intruder", "elsewhere", "dashboard"):
        mid = seeded[key]
        for path in (f"/v1/messages/{mid}", f"/v1/messages/{mid}/files/0"):
            assert _call(base, path, BRIDGE) == (404, {"error": f"no message {mid!r}"}), key
            assert _call(base, path, OPERATOR)[0] == 200, key
    assert _call(base, f"/v1/messages/{seeded['bridge']}", BRIDGE)[0] == 200
    assert _call(base, f"/v1/messages/{seeded['bridge']}/files/0", BRIDGE) == (
        200,
        b"a file for the bridge message\n",
    )
    gone = _call(base, f"/v1/messages/{seeded['gone']}/files/0", BRIDGE)
    assert gone == (410, {"error": "gone.txt is no longer kept (files are kept a week)"})
    status, listing = _call(base, "/v1/groups/fam/chats/general/messages", BRIDGE)
    assert status == 200 and listing["messages"], listing
    assert all(m["sender"].startswith(PREFIX) for m in listing["messages"])
    assert {seeded["bridge"], seeded["gone"]} <= {m["id"] for m in listing["messages"]}
    others = {seeded[k] for k in ("intruder", "elsewhere", "dashboard")}
    assert not others & {m["id"] for m in listing["messages"]}
    status, listing = _call(base, "/v1/groups/fam/chats/general/messages", OPERATOR)
    assert status == 200 and others <= {m["id"] for m in listing["messages"]}
    for body in (
        {"text": "hi", "sender": "operator"},
        {"text": "hi", "sender": "rocketchat-bridge:alice"},
        {"text": "hi", "sender": f"{PREFIX}alice", "channel": "http"},
    ):
        assert _call(base, "/v1/groups/fam/messages", BRIDGE, body)[0] == 403, body


def test_the_api_keeps_its_description_for_the_operator_and_a_bridge(
    tmp_path: Path, agent_image: str, test_project: str, docker_client: Any
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    port = _port()
    (home / "orchestrator.yaml").write_text(
        f"http:\n  listen: 127.0.0.1:{port}\n  tokens:\n    {PREFIX[:-1]}:\n"
        f"      token_env: BRIDGE_TOKEN\n      senders: '{PREFIX}'\n"
    )
    setup = _seed(home)
    seeded = setup["seeded"]
    base = f"http://127.0.0.1:{port}"
    tokens = {"ORCHESTRATOR_HTTP_TOKEN": OPERATOR, "BRIDGE_TOKEN": BRIDGE}
    daemon = Serve(home, test_project, tokens)
    runs: dict[str, dict[str, Any]] = {}
    try:
        daemon.start()
        _wait_for_api(base, daemon)
        # The description schemathesis reads is the one the daemon serves, to any token.
        for token in (OPERATOR, BRIDGE):
            assert _call(base, "/v1/openapi.yaml", token) == (
                200,
                OPENAPI_DESCRIPTION.read_bytes(),
            )
        assert _call(base, "/v1/openapi.yaml", None)[0] == 401
        for who, token in (("operator", OPERATOR), ("bridge", BRIDGE)):
            path = tmp_path / f"{who}.json"
            log = tmp_path / f"{who}.log"
            path.write_text(json.dumps({**setup, "bridge_run": who == "bridge", "log": str(log)}))
            runs[who] = _schemathesis(base, token, path, tmp_path / f"{who}-report.json")
        _bridge_is_kept_to_its_senders(base, seeded)
        queue = MessageQueue(Home(home).state_dir / "queue.db")
        try:
            stored = queue.read("SELECT id, sender, channel FROM messages")
        finally:
            queue.close()
    finally:
        daemon.stop()
        remove_containers(docker_client, f"org.orchestrator.project={test_project}")

    for who, run in runs.items():
        cases = run["test_cases"]
        print(
            f"{who}: {run['operations']['tested']} operations, {cases['generated']} cases, "
            f"{cases['with_failures']} with failures, {run['running_time']:.1f}s"
        )
        assert run["exit_code"] == 0, run["output"]
        assert run["failures"] == [] and run["errors"] == [], run["output"]
        log = _log(tmp_path / f"{who}.log")
        assert {r["operation"] for r in log} == OPERATIONS  # every route, by each token
        assert not [r for r in log if r["status"] >= 500]

    operator_log = _log(tmp_path / "operator.log")
    bridge_log = _log(tmp_path / "bridge.log")
    # Whatever schemathesis had the bridge ask of the others' messages was refused.
    for record in bridge_log:
        asked = (record["path_parameters"] or {}).get("id") in setup["foreign"]
        if asked and record["operation"] in ("getMessage", "getFile"):
            assert record["status"] in (400, 404), record
    # Every message stored through the bridge's token has a sender under its prefix, in
    # its own channel; and it wrote nothing else there.
    posted = {  # 202, or 200 when sent with ?wait
        who: {
            r["body"]["id"]
            for r in log
            if r["operation"] == "sendMessage" and r["status"] in (200, 202)
        }
        for who, log in (("operator", operator_log), ("bridge", bridge_log))
    }
    assert posted["bridge"], "the bridge's token stored no message"
    by_id = {str(mid): (str(sender), str(channel)) for mid, sender, channel in stored}
    for mid in posted["bridge"]:
        sender, channel = by_id[mid]
        assert sender.startswith(PREFIX) and channel == f"http:{PREFIX[:-1]}", (mid, sender)
    refused = [
        r for r in bridge_log
        if r["operation"] == "sendMessage" and isinstance(r["request"], dict)
        and isinstance(r["request"].get("sender"), str)
        and not r["request"]["sender"].startswith(PREFIX)
    ]  # fmt: skip
    assert refused and all(r["status"] >= 400 for r in refused)
    in_channel = {mid for mid, (_, channel) in by_id.items() if channel == f"http:{PREFIX[:-1]}"}
    seeded_there = {seeded["bridge"], seeded["gone"], seeded["intruder"]}
    assert in_channel - seeded_there - posted["operator"] == posted["bridge"]
