"""The shell tool's own cost: a ``shell`` call of ``/bin/true`` through the tool (the runner's
Toolbox, the persistent bash, the output file, the status pipe) against
``subprocess.run(["true"])``, both in the same group container, interleaved."""

from __future__ import annotations

from bench.container import group_container
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
    rounds = 200 if quick else 2000
    with group_container("shell") as inside:
        samples = inside.run(SCRIPT, str(rounds))
    target = Series("shell tool call of /bin/true (persistent bash)", samples["target"])
    floor = Series('subprocess.run(["true"]) in the same container', samples["floor"])
    return Result(
        NAME,
        target,
        floor,
        note=f"{rounds} calls each, interleaved, inside one group's container",
    )
