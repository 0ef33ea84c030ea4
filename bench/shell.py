"""The shell tool's own cost: a ``shell`` call of ``/bin/true`` through the tool (the runner's
Toolbox, the persistent bash, the output file, the status pipe) against
``subprocess.run(["true"])``, both in the same group container, interleaved."""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

from bench.harness import Result, Series

NAME = "shell-call"

SCRIPT = """
import json, subprocess, sys, time
from pathlib import Path
from orchestrator.agent.tools import Toolbox
from orchestrator.agent.tools.shell import ShellSource
rounds = int(sys.argv[1])
agent = Path("/workspace/agent")
source = ShellSource(agent, Path("/tmp/bench-shell"), home=Path("/home/agent"))
box = Toolbox(agent, sources=(source,), session_key="bench")
target, floor = [], []
for n in range(rounds + 5):
    start = time.perf_counter()
    subprocess.run(["true"], check=True)
    f = time.perf_counter() - start
    start = time.perf_counter()
    answer = box.call("shell", {"command": "/bin/true"})  # an exec, as the floor
    t = time.perf_counter() - start
    assert answer == "exit code 0", answer
    if n >= 5:  # the shell's start and warm caches first
        target.append(t)
        floor.append(f)
source.close()
print(json.dumps({"target": target, "floor": floor}))
"""


def run(quick: bool) -> Result:
    from orchestrator.config import DEFAULT_IMAGE_REPOSITORY, load_config
    from orchestrator.groups.config import GroupConfig
    from orchestrator.home import Home
    from orchestrator.image.agent import build_agent_image
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.base import LABEL_PROJECT
    from orchestrator.runtime.engine import connect
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root

    client = connect()
    image = build_agent_image(client, DEFAULT_IMAGE_REPOSITORY, offline=True).tag
    project = f"bench-{uuid.uuid4().hex[:6]}"
    rounds = 200 if quick else 2000
    try:
        with tempfile.TemporaryDirectory(prefix="bench-shell-") as tmp:
            home = Home(Path(tmp) / "home")
            home.ensure_writable()
            home.config_file.write_text(f"project: {project}\nmount_allowlist: {tmp}/none.yaml\n")
            config = load_config(home)
            backend = open_backend(config, client=client)
            runtime = GroupRuntime(
                home, config, backend, lambda: image, skills_root=default_skills_root()
            )
            group = runtime.store.add(GroupConfig(name="shell", creators=("b",)))
            try:
                runtime.ensure_running(group)
                container = client.containers.get(runtime.container_name(group))
                answer = container.exec_run(["python3", "-c", SCRIPT, str(rounds)])
                assert answer.exit_code == 0, answer.output.decode(errors="replace")[-2000:]
                samples = json.loads(answer.output.decode().strip().splitlines()[-1])
            finally:
                for found in backend.list({LABEL_PROJECT: project}):
                    backend.remove(found.name)
    finally:
        client.close()
    target = Series("shell tool call of /bin/true (persistent bash)", samples["target"])
    floor = Series('subprocess.run(["true"]) in the same container', samples["floor"])
    return Result(
        NAME,
        target,
        floor,
        note=f"{rounds} calls each, interleaved, inside one group's container",
    )
