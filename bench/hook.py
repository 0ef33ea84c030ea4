"""The SessionStart memory hook as the runner runs it: a whole process, against the floor
`python3 -c pass` of the same interpreter, interleaved (goal: ratio <= 5). Both injected
files are filled to just under the 16,000-character budget (and a little over, so the
truncation path runs too), as a group with a busy memory has them."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.harness import Result, interleaved

NAME = "memory-hook"


def run(quick: bool) -> Result:
    from orchestrator.memory.scaffold import scaffold_memory

    script = Path(sys.executable).with_name("orchestrator")
    from orchestrator.limits import MEMORY_FILE_BUDGET_CHARS

    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        scaffold_memory(Path(tmp))
        memory = Path(tmp) / "memory"
        line = "- [A topic with a long name](topics/a-topic.md): what it holds, in a line\n"
        near = (MEMORY_FILE_BUDGET_CHARS - 200) // len(line)
        (memory / "index.md").write_text("# Memory\n\n" + line * near)
        over = MEMORY_FILE_BUDGET_CHARS // len(line) + 20
        (memory / "system/definition.md").write_text("---\ntype: system\n---\n" + line * over)
        event = json.dumps({"source": "startup", "session_id": "b", "agent_dir": tmp})

        def target() -> None:
            out = subprocess.run(
                [str(script), "hook", "session-start"],
                input=event,
                capture_output=True,
                text=True,
                check=True,
            )
            assert "### memory/index.md" in out.stdout and "[truncated" in out.stdout

        def floor() -> None:
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        t, f = interleaved(
            target,
            floor,
            20 if quick else 100,
            target_label="orchestrator hook session-start",
            floor_label="python3 -c pass",
        )
    return Result(NAME, t, f, note="goal: ratio <= 5")
