"""Groups on Docker Swarm, on this machine's engine put in swarm mode for the run (and
left as it was found).

swarm-cold-start: a group's service scaled from zero to one until its runner answers
through the daemon's runner port (the overlay connection, TLS both ways), against
`docker service create` of a bare image (the agent image running `sleep`) until its task
runs, in the same run, interleaved; each followed, untimed, by scaling back to zero (or
removing the bare service).

swarm-warm-turn: one turn of the offline provider over the overlay connection (a
connection the runner opened, taken from the runner port), against the same turn over
the Unix socket of the same group's container under the Docker backend.

The daemon's side of both runs where the daemon would: in a container of the daemon
image on the runner network (a host process cannot join an overlay network), with the
engine's socket and the home mounted at the same path; it prints its samples.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import Result, Series

COLD = "swarm-cold-start"
WARM = "swarm-warm-turn"
ROOT = Path(__file__).parent.parent
_done: dict[bool, dict[str, Result]] = {}


def cold_start(quick: bool) -> Result:
    return _results(quick)[COLD]


def warm_turn(quick: bool) -> Result:
    return _results(quick)[WARM]


def _results(quick: bool) -> dict[str, Result]:
    """Both benchmarks come from one deployment (made once per run)."""
    if quick not in _done:
        _done[quick] = _measure(quick)
    return _done[quick]


def _measure(quick: bool) -> dict[str, Result]:
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY
    from orchestrator.groups import GroupStore
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.image.agent import build_agent_image, build_daemon_image
    from orchestrator.runtime.engine import connect
    from tests.swarmrig import swarm_mode

    client = connect()
    project = f"bench-{uuid.uuid4().hex[:6]}"
    # under tags of the run's own, each as soon as it is built: a build elsewhere on the
    # engine prunes the other tags of its repositories
    tags = (f"{project}-agent:latest", f"{project}-daemon:latest")
    base = _built(
        client, tags[0], lambda: build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True)
    )
    _built(client, tags[1], lambda: build_daemon_image(client, base=base))
    network = f"{project}-runners"
    try:
        with swarm_mode(client), tempfile.TemporaryDirectory(prefix="bench-swarm-") as tmp:
            client.api.create_network(network, driver="overlay", internal=True, attachable=True)
            home = Path(tmp) / "home"
            home.mkdir()
            home.joinpath("orchestrator.yaml").write_text(
                f"project: {project}\nimage: {project}-agent\n"
                f"runtime:\n  backend: swarm\n  swarm:\n    network: {network}\n"
            )
            store = GroupStore(Home(home))
            for name in ("Cold", "Warm", "Warm unix"):
                store.add(GroupConfig(name=name, creators=("bench",)))
            samples = _drive(client, project, tags[1], network, home, 5 if quick else 20)
            _clean(client, project, network)
    finally:
        for tag in tags:
            with contextlib.suppress(Exception):
                client.images.remove(tag)
        client.close()
    return {
        COLD: Result(
            COLD,
            Series("scale 0 -> 1 until the runner answers over the overlay", samples["cold"]),
            Series("docker service create of a bare image until its task runs", samples["bare"]),
            note="both on this node; the target includes the runner's start and its TLS dial",
        ),
        WARM: Result(
            WARM,
            Series("a turn over the overlay connection (TLS)", samples["overlay"]),
            Series("the same turn over the runner's Unix socket", samples["unix"]),
            note="the offline provider; the daemon's side in a container on the runner network",
        ),
    }


def _built(client: Any, tag: str, build: Any) -> str:
    """Build (or find current) an image and tag it ``tag`` at once; its base."""
    from docker.errors import ImageNotFound

    for _ in range(3):
        result = build()
        try:
            client.images.get(result.image_id).tag(*tag.split(":"))
            return str(result.base)
        except ImageNotFound:
            continue  # removed by another build before the tag: build it again
    raise SystemExit(f"{tag}: the image built was removed before it could be tagged, 3 times")


def _drive(
    client: Any, project: str, image: str, network: str, home: Path, rounds: int
) -> dict[str, list[float]]:
    """Run ``inside`` in a container of the daemon image on the runner network, named
    as runners dial it; its samples."""
    endpoint = client.api.create_endpoint_config(aliases=["orchestrator"])
    created = client.api.create_container(
        image,
        entrypoint=["python3", "-c"],
        command=[
            "import sys; sys.path.insert(0, '/bench-src'); "
            f"from bench.swarm import inside; inside({str(home)!r}, {rounds})"
        ],
        host_config=client.api.create_host_config(
            binds={
                str(home): {"bind": str(home), "mode": "rw"},
                "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
                str(ROOT / "bench"): {"bind": "/bench-src/bench", "mode": "ro"},
            },
        ),
        networking_config=client.api.create_networking_config({network: endpoint}),
        labels={"org.orchestrator.project": project},
    )
    container = client.containers.get(created["Id"])
    try:
        container.start()
        status = container.wait(timeout=1800)
        output = container.logs(stdout=True, stderr=False).decode()
        if status.get("StatusCode") != 0:
            errors = container.logs(stdout=False, stderr=True).decode()
            raise SystemExit(f"the swarm benchmark's driver failed: {errors[-3000:]}")
    finally:
        container.remove(force=True)
    lines = [line for line in output.splitlines() if line.startswith("{")]
    return dict(json.loads(lines[-1]))


def _clean(client: Any, project: str, network: str) -> None:
    from docker.errors import APIError, NotFound

    label = f"org.orchestrator.project={project}"
    for service in client.api.services(filters={"label": label}):
        with contextlib.suppress(NotFound):
            client.api.remove_service(service["ID"])
    for each in (label, f"{label}-unix"):
        for row in client.api.containers(all=True, filters={"label": each}):
            with contextlib.suppress(NotFound):  # a task's container the swarm removed
                client.api.remove_container(row["Id"], force=True)
    deadline = time.monotonic() + 60
    while client.api.containers(all=True, filters={"label": label}):
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for secret in client.api.secrets(filters={"label": label}):
        with contextlib.suppress(APIError):
            client.api.remove_secret(secret["ID"])
    for _ in range(40):
        try:
            client.api.remove_network(network)
            return
        except NotFound:
            return
        except APIError:
            time.sleep(0.5)


def inside(home_path: str, rounds: int) -> None:
    """The daemon's side, in its container: both benchmarks, interleaved; prints the
    samples as one JSON line."""
    from orchestrator.config import load_config
    from orchestrator.home import Home
    from orchestrator.protocol import TurnRequest
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.docker import DockerBackend
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime
    from orchestrator.runtime.swarm.service import service_name

    home = Home(Path(home_path))
    config = load_config(home)
    client = connect()
    image = f"{config.image}:latest"
    backend = open_backend(config, client=client, home=home)
    backend.serve(lambda: image)
    swarm = GroupRuntime(home, config, backend, lambda: image, skills_root=None)
    cold, warm = swarm.store.load("cold"), swarm.store.load("warm")
    out: dict[str, list[float]] = {"cold": [], "bare": [], "overlay": [], "unix": []}

    def bare() -> float:
        started = time.perf_counter()
        made = client.api.create_service(
            {"ContainerSpec": {"Image": image, "Args": ["sleep", "3600"]}},
            name=f"{service_name(config.project + '.bare')}",
            labels={"org.orchestrator.project": config.project},
        )
        while not any(
            t["Status"]["State"] == "running"
            for t in client.api.tasks(filters={"service": made["ID"]})
        ):
            time.sleep(0.02)
        took = time.perf_counter() - started
        client.api.remove_service(made["ID"])
        while client.api.containers(filters={"label": f"com.docker.swarm.service.id={made['ID']}"}):
            time.sleep(0.05)
        return took

    def scale_up() -> float:
        started = time.perf_counter()
        swarm.ensure_running(cold)  # scale 0 -> 1, then the runner answers a ping
        took = time.perf_counter() - started
        swarm.stop(cold)  # back to zero, its task gone
        return took

    swarm.ensure_running(cold)  # the service made once; a first start of each, unmeasured
    swarm.stop(cold)
    bare()
    for _ in range(rounds):
        out["bare"].append(bare())
        out["cold"].append(scale_up())

    turn = TurnRequest("t", "bench", "what do you know about the weather?").to_wire()
    swarm.ensure_running(warm)
    over_overlay = swarm.runner(warm)
    # the floor: the same kind of group under the Docker backend, its runner's socket in
    # the home (mounted here at the same path)
    unix = GroupRuntime(
        home, _project(config, "-unix"), DockerBackend(client), lambda: image, skills_root=None
    )
    warm_unix = unix.store.load("warm-unix")
    unix.ensure_running(warm_unix)
    over_unix = unix.runner(warm_unix)
    for _ in range(3):  # warm both
        over_overlay.turn(turn, timeout=30)
        over_unix.turn(turn, timeout=30)
    for _ in range(rounds * 10):
        started = time.perf_counter()
        over_unix.turn(turn, timeout=30)
        out["unix"].append(time.perf_counter() - started)
        started = time.perf_counter()
        over_overlay.turn(turn, timeout=30)
        out["overlay"].append(time.perf_counter() - started)
    unix.remove(warm_unix.folder)
    backend.close()
    print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)  # the runner port's threads


def _project(config: Any, suffix: str) -> Any:
    from dataclasses import replace

    return replace(config, project=config.project + suffix)
