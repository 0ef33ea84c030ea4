"""Group container benchmarks.

cold-start: ensure-running from no container until its runner answers, then removal,
against the floor of the same container spec (every mount, limit and hardening option)
running `true` instead of the runner: create, start, wait for it to exit, remove. Both
time the same engine steps; the difference is the runner's start. Interleaved.

idle-cost: host memory of an orchestrator process that reconciles and reports status on N
running idle groups, and the memory each idle container uses, at N = 1, 10 and 50, beside
a container running a bare `sleep` with the same limits; timed part: `status` of all N
groups against listing their containers by label.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.harness import Result, interleaved

COLD = "cold-start"
IDLE = "idle-cost"


@contextmanager
def _runtime(project: str) -> Iterator[tuple[object, object, str]]:
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY, OrchestratorConfig
    from orchestrator.home import Home
    from orchestrator.image.agent import build_agent_image
    from orchestrator.runtime.base import LABEL_PROJECT
    from orchestrator.runtime.docker import DockerBackend
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root

    client = connect()
    image = build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True).tag
    backend = DockerBackend(client)
    with tempfile.TemporaryDirectory(prefix="bench-runtime-") as tmp:
        home = Home(Path(tmp))
        home.ensure_writable()
        config = OrchestratorConfig(project=project, mount_allowlist=Path(tmp) / "none.yaml")
        runtime = GroupRuntime(
            home, config, backend, lambda: image, skills_root=default_skills_root()
        )
        try:
            yield runtime, client, image
        finally:
            for container in backend.list({LABEL_PROJECT: project}):
                backend.remove(container.name)
            client.close()


def cold_start(quick: bool) -> Result:
    from dataclasses import replace

    from orchestrator.groups.config import GroupConfig
    from orchestrator.runtime.lifecycle import GroupRuntime

    project = f"bench-{uuid.uuid4().hex[:6]}"
    with _runtime(project) as (runtime, client, _image):
        assert isinstance(runtime, GroupRuntime)
        group = runtime.store.add(GroupConfig(name="Cold"))
        name = runtime.container_name(group)
        spec = runtime.desired_spec(group)
        runtime.prepare_host(group, spec)  # the host folders exist for both
        floor_spec = replace(spec, name=f"{name}-floor", command=("true",))

        def floor() -> None:
            runtime.backend.create(floor_spec)
            runtime.backend.start(floor_spec.name)
            client.api.wait(floor_spec.name)  # type: ignore[attr-defined]
            runtime.backend.remove(floor_spec.name)

        def target() -> None:
            runtime.ensure_running(group)
            runtime.backend.remove(name)

        t, f = interleaved(
            target,
            floor,
            5 if quick else 20,
            target_label="ensure-running until the runner answers, then remove",
            floor_label="the same spec running `true`: create, start, wait, remove",
        )
    return Result(COLD, t, f, note="goal: ratio <= 1.3")


def _sleep_container_memory(runtime: object) -> int:
    """Memory of a container with a group's exact spec running `sleep` instead of the
    runner: what an idle container costs before any of our code runs."""
    from dataclasses import replace

    from orchestrator.runtime.lifecycle import GroupRuntime

    assert isinstance(runtime, GroupRuntime)
    group = runtime.store.groups()[0]
    spec = replace(
        runtime.desired_spec(group),
        name=f"{runtime.container_name(group)}-sleep",
        command=("sleep", "60"),
    )
    runtime.backend.create(spec)
    runtime.backend.start(spec.name)
    try:
        time.sleep(1)  # let it settle, as the runners have
        info = runtime.backend.inspect(spec.name)
        assert info is not None
        return runtime.backend.memory_usages([info], time.monotonic() + 10)[spec.name] or 0
    finally:
        runtime.backend.remove(spec.name)


def _process_memory(home: Path, project: str) -> int:
    """Peak RSS (bytes) of a process that reconciles and reports status on all groups."""
    code = (
        "import resource, sys\n"
        "from orchestrator.cli import cli\n"
        "for args in (['reconcile', '--json'], ['status', '--json']):\n"
        "    try:\n"
        "        cli.main(['--home', sys.argv[1], *args], standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr)\n"
    )
    env = {**os.environ, "ORCHESTRATOR_PROJECT": project}
    result = subprocess.run(
        [sys.executable, "-c", code, str(home)], capture_output=True, text=True, env=env, check=True
    )
    return int(result.stderr.strip().splitlines()[-1])


def idle_cost(quick: bool) -> Result:
    from orchestrator.groups.config import GroupConfig
    from orchestrator.runtime.lifecycle import GroupRuntime

    project = f"bench-{uuid.uuid4().hex[:6]}"
    extra: dict[str, object] = {}
    with _runtime(project) as (runtime, _, _):
        assert isinstance(runtime, GroupRuntime)
        running = 0
        t = f = None
        for count in (1, 10, 50):
            for i in range(running, count):
                runtime.ensure_running(runtime.store.add(GroupConfig(name=f"idle {i:02d}")))
            running = count
            rows = runtime.status()
            per_container = [r.memory_bytes for r in rows if r.memory_bytes is not None]
            if count == 1:
                extra["bare_sleep_container_mib"] = round(
                    _sleep_container_memory(runtime) / 2**20, 2
                )
            extra[f"groups_{count}"] = {
                "orchestrator_process_rss_mib": round(
                    _process_memory(runtime.home.root, project) / 2**20, 1
                ),
                "container_memory_mean_mib": round(
                    sum(per_container) / len(per_container) / 2**20, 2
                ),
                "container_memory_max_mib": round(max(per_container) / 2**20, 2),
            }
        labels = runtime.project_labels
        t, f = interleaved(
            runtime.status,
            lambda: runtime.backend.list(labels),
            2 if quick else 10,
            target_label="status of 50 idle groups",
            floor_label="list their containers by label",
        )
    print(json.dumps(extra, indent=2), file=sys.stderr)
    per = extra["groups_50"]["container_memory_mean_mib"]  # type: ignore[index]
    note = (
        f"an idle group's container: {per} MiB against {extra['bare_sleep_container_mib']} "
        "MiB for the same spec running a bare sleep"
    )
    return Result(IDLE, t, f, note=note, extra=extra)
