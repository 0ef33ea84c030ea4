"""The web through the host. ``web-fetch``: the host's answer to a ``web.fetch`` request
(policy, guard, fetch to the checked address, extraction, usage record) for a small
local page, against a direct httpx GET of the same page from the host. ``web-gate``: a
proxied curl in a group's container (the forwarder, the read-only socket, the host's
gate) against a direct curl of the same page on the host."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.container import group_container
from bench.harness import Result, Series, interleaved

FETCH = "web-fetch"
GATE = "web-gate"


def _relay(home: Any, port: int) -> tuple[Any, Any]:
    from orchestrator.config import load_config
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.relay.turn import RelayContext, TurnRelay
    from orchestrator.store.messages import open_queue
    from orchestrator.store.usage import UsageStore

    group = GroupStore(home).add(GroupConfig(name="web", creators=("b",)))
    group.config_file.write_text(
        group.config_file.read_text() + f"web:\n  enabled: true\n  max_fetches_per_hour: 100000\n"
        f"  allow_addresses: ['127.0.0.1:{port}']\n"
    )
    group = GroupStore(home).load("web")
    queue = open_queue(home)
    context = RelayContext(load_config(home), queue, UsageStore(queue.path))
    message = queue.record_done(
        group="web", session="cli.c", chat="c", thread=None, sender="b", trust="creator",
        text="hi", channel="cli", reply="ok",
    )  # fmt: skip
    return context, TurnRelay(context, message, group, time.monotonic() + 10**6)


def fetch(quick: bool) -> Result:
    import httpx

    from orchestrator.home import Home
    from tests.websites import website

    rounds = 100 if quick else 1000
    with tempfile.TemporaryDirectory(prefix="bench-web-") as tmp, website() as port:
        home = Home(Path(tmp) / "home")
        home.ensure_writable()
        context, turn = _relay(home, port)
        url = f"http://127.0.0.1:{port}/article"
        frame = {"op": "web.fetch", "req": 1, "url": url}
        with httpx.Client(trust_env=False) as client:

            def direct() -> None:
                # a connection per request, as web.fetch makes (keep-alive meets the
                # test server's split writes with a delayed ACK)
                assert client.get(url, headers={"Connection": "close"}).status_code == 200

            def relayed() -> None:
                turn.ops = 0  # one turn's count of requests; these are many turns' worth
                answer = turn.handle(frame, 100)
                assert answer["ok"], answer

            target, floor = interleaved(
                relayed, direct, rounds,
                target_label="web.fetch of a small page, answered by the host",
                floor_label="httpx GET of the same page from the host",
            )  # fmt: skip
        context.usage.close()
        context.queue.close()
    return Result(FETCH, target, floor, note=f"{rounds} each, interleaved; a 1.2 KB article")


SCRIPT = """
import json, subprocess, sys, time
rounds, url = int(sys.argv[1]), sys.argv[2]
samples = []
for n in range(rounds + 3):
    start = time.perf_counter()
    out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url],
                         capture_output=True, text=True,
                         env={"http_proxy": "http://127.0.0.1:3128"})  # curl reads lowercase
    if out.stdout != "200":
        raise SystemExit(f"curl said {out.stdout!r} {out.stderr!r}")
    if n >= 3:
        samples.append(time.perf_counter() - start)
print(json.dumps(samples))
"""


def gate(quick: bool) -> Result:
    from orchestrator.web.gate import Gate
    from tests.websites import website

    rounds = 50 if quick else 300
    egress: list[Any] = []

    def open_gate(home: Any, group: Any) -> None:
        gate = Gate(home.state_dir / "egress")
        gate.serve(group.folder, group.config.web.rules(gate=True))
        egress.extend((gate, gate.turn_started(group.folder, True)))

    with website() as port:
        url = f"http://127.0.0.1:{port}/article"
        extra = f"web:\n  enabled: true\n  allow_addresses: ['127.0.0.1:{port}']\n"
        try:
            with group_container("gate", extra, before_start=open_gate) as inside:
                proxied = inside.run(SCRIPT, str(rounds), url)
                direct = []
                for _ in range(rounds):
                    start = time.perf_counter()
                    subprocess.run(["curl", "-s", "-o", "/dev/null", url], check=True)
                    direct.append(time.perf_counter() - start)
        finally:
            if egress:
                gate, end = egress
                end()
                gate.close()
    return Result(
        GATE,
        Series("curl in the container through the egress gate", proxied),
        Series("curl of the same page on the host, direct", direct),
        note=f"{rounds} each (not interleaved: one in the container, one on the host)",
    )
