"""The SessionStart memory hook as the runner runs it (``run_session_start`` with the
image's hooks.json): a whole ``orchestrator hook session-start`` process in a real group
container (the installed package, its bytecode
compiled when the image was built), against the floor ``python3 -c pass`` of the same
interpreter in the same container, interleaved (goal: ratio <= 2). Both injected files
are filled to just under the 16,000-character budget (and a little over, so the
truncation path runs too), as a group with a busy memory has them.

Measured in the container rather than from the checkout: a checkout run with
PYTHONDONTWRITEBYTECODE compiles every module it imports at each start, which is not
what a group's container does."""

from __future__ import annotations

from bench.container import group_container
from bench.harness import Result, Series

NAME = "memory-hook"

SCRIPT = """
import json, subprocess, sys, time
from pathlib import Path
from orchestrator.agent.hooks import load_hooks, run_session_start
rounds = int(sys.argv[1])
hooks = load_hooks()  # the image's own hooks.json, run as the runner runs them
agent = Path("/workspace/agent")
target, floor = [], []
for n in range(rounds + 3):
    start = time.perf_counter()
    subprocess.run(["python3", "-c", "pass"], check=True)
    f = time.perf_counter() - start
    start = time.perf_counter()
    [out] = run_session_start(hooks, source="startup", session_id="b", agent_dir=agent)
    t = time.perf_counter() - start
    assert "### memory/index.md" in out and "[truncated" in out, out
    if n >= 3:  # caches warm first
        target.append(t)
        floor.append(f)
print(json.dumps({"target": target, "floor": floor}))
"""


def _fill_memory(home: object, group: object) -> None:
    from orchestrator.limits import MEMORY_FILE_BUDGET_CHARS
    from orchestrator.memory.scaffold import scaffold_memory

    path = group.path  # type: ignore[attr-defined]
    scaffold_memory(path)
    memory = path / "memory"
    line = "- [A topic with a long name](topics/a-topic.md): what it holds, in a line\n"
    near = (MEMORY_FILE_BUDGET_CHARS - 200) // len(line)
    (memory / "index.md").write_text("# Memory\n\n" + line * near)
    over = MEMORY_FILE_BUDGET_CHARS // len(line) + 20
    (memory / "system/definition.md").write_text("---\ntype: system\n---\n" + line * over)


def run(quick: bool) -> Result:
    rounds = 30 if quick else 200
    with group_container("hook", before_start=_fill_memory) as inside:
        samples = inside.run(SCRIPT, str(rounds))
    return Result(
        NAME,
        Series("orchestrator hook session-start (in the container)", samples["target"]),
        Series("python3 -c pass (in the same container)", samples["floor"]),
        note=f"{rounds} each, interleaved, inside one group's container; goal: ratio <= 2",
    )
