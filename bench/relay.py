"""Relay overhead: a turn whose model runs on the host (through the relay, to a fake
OpenAI-compatible server on loopback that answers at once), against the same turn with
the offline provider in the container, in one run, interleaved. Each turn makes one
model call, so the difference of the medians is what the relay adds per call."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import Result, interleaved

NAME = "relay-overhead"
CHATS = 10


def run(quick: bool) -> Result:
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY, load_config
    from orchestrator.daemon.core import Daemon
    from orchestrator.groups.config import GroupConfig, ModelLimits
    from orchestrator.home import Home
    from orchestrator.image.agent import build_agent_image
    from orchestrator.runtime.base import LABEL_PROJECT
    from orchestrator.runtime.docker import DockerBackend
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root
    from orchestrator.store.messages import open_queue
    from tests.fakeproviders import FakeProviderProcess

    client = connect()
    image = build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True).tag
    project = f"bench-{uuid.uuid4().hex[:6]}"
    backend = DockerBackend(client)
    fake = FakeProviderProcess("openai", "bench-key-0123456789abcdef")
    os.environ["BENCH_FAKE_KEY"] = "bench-key-0123456789abcdef"
    try:
        with tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
            home = Home(Path(tmp) / "home")
            home.ensure_writable()
            home.config_file.write_text(
                f"project: {project}\nmount_allowlist: {tmp}/none.yaml\n"
                f"providers:\n  fake:\n    kind: openai\n    base_url: {fake.base_url}\n"
                "    key_env: BENCH_FAKE_KEY\n"
            )
            config = load_config(home)
            runtime = GroupRuntime(
                home, config, backend, lambda: image, skills_root=default_skills_root()
            )
            local = runtime.store.add(GroupConfig(name="local", creators=("b",)))
            unlimited = ModelLimits(requests_per_minute=100_000, tokens_per_day=10**12)
            relayed = runtime.store.add(
                GroupConfig(
                    name="relayed", creators=("b",), provider="fake", model="m", limits=unlimited
                )
            )
            for group in (local, relayed):
                runtime.ensure_running(group)
            queue = open_queue(home)
            daemon = Daemon(home, config, runtime, queue, concurrency=2)
            daemon.start()
            client_times: list[float] = []  # inside the provider client (SDK and HTTP)
            adapter = daemon.relay.adapter("fake")
            complete = adapter.complete
            calls_seen: list[object] = []

            def timed(*args: object, **kwargs: object) -> object:
                calls_seen[:] = [args[0]]
                start = time.perf_counter()
                try:
                    return complete(*args, **kwargs)  # type: ignore[arg-type]
                finally:
                    client_times.append(time.perf_counter() - start)

            adapter.complete = timed  # type: ignore[method-assign]

            counts = {local.folder: 0, relayed.folder: 0}

            def turn(folder: str) -> None:
                # ten chats in turn, for both groups: the contexts stay equal and modest
                chat = f"bench{counts[folder] % CHATS}"
                counts[folder] += 1
                message = daemon.submit(folder, "hello", chat=chat, sender="b", channel="b")
                done = daemon.wait(message.id, 60)
                assert done is not None and done.state == "done", done
                if folder == relayed.folder:
                    assert done.replies == ("ok",), done.replies  # the model's, not a refusal

            try:
                t, f = interleaved(
                    lambda: turn(relayed.folder),
                    lambda: turn(local.folder),
                    60 if quick else 300,
                    target_label="turn, model on the host through the relay",
                    floor_label="the same turn, offline provider in the container",
                    warmup=CHATS,  # each chat's fresh context (and its hooks) is set up first
                )
                calls = sum(counts.values()) // 2 + CHATS
                bare = _bare_round_trips(
                    fake.base_url, adapter, calls_seen[0], 200 if quick else 1000
                )
            finally:
                daemon.drain(5)
                daemon.relay.close()
                daemon.relay.usage.close()
                queue.close()
                for container in backend.list({LABEL_PROJECT: project}):
                    backend.remove(container.name)
    finally:
        fake.close()
        client.close()
    added_ms = (t.median - f.median) * 1000
    client_ms = statistics.median(client_times[CHATS:]) * 1000
    bare_ms = statistics.median(bare) * 1000
    return Result(
        NAME,
        t,
        f,
        note=(
            f"goal: under 2 ms added per model call at p50 ({calls} calls to a fake server in "
            f"a process of its own; {CHATS} chats in turn for both groups). The server's own "
            "part is the bare round trip: the same request by http.client, its answer read "
            "whole, the fake's time in it; what the orchestrator adds is the rest"
        ),
        extra={
            "added_per_call_ms_p50": round(added_ms, 2),
            "in_provider_client_ms_p50": round(client_ms, 2),
            "relay_own_ms_p50": round(added_ms - client_ms, 2),
            "bare_round_trip_ms_p50": round(bare_ms, 2),
            "sdk_over_bare_ms_p50": round(client_ms - bare_ms, 2),
            "orchestrator_added_ms_p50": round(added_ms - bare_ms, 2),
        },
    )


def _bare_round_trips(base_url: str, adapter: Any, call: Any, rounds: int) -> list[float]:
    """The same request as the adapter's last (its body built by the adapter's own
    function), sent ``rounds`` times by http.client on one kept-alive connection and read
    whole: the part of a call that is the server's."""
    import http.client
    import json
    import urllib.parse

    from orchestrator.relay.providers.openai import request_body

    stream = adapter.definition.stream
    made = request_body(call, model="m", max_tokens=adapter.max_tokens(call), stream=stream)
    body = json.dumps(made).encode()
    url = urllib.parse.urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    headers = {
        "Authorization": "Bearer bench-key-0123456789abcdef",
        "Content-Type": "application/json",
    }
    out: list[float] = []
    try:
        for _ in range(rounds):
            start = time.perf_counter()
            connection.request("POST", url.path.rstrip("/") + "/chat/completions", body, headers)
            answer = connection.getresponse()
            text = answer.read()
            out.append(time.perf_counter() - start)
            assert answer.status == 200 and (b"[DONE]" in text or not stream), (
                answer.status,
                text[:200],
            )
    finally:
        connection.close()
    return out
