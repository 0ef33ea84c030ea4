"""The SessionStart memory hook as the runner runs it: a whole process, against the floor
`python3 -c pass` of the same interpreter, interleaved (goal: ratio <= 5)."""

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
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        scaffold_memory(Path(tmp))
        event = json.dumps({"source": "startup", "session_id": "b", "agent_dir": tmp})

        def target() -> None:
            out = subprocess.run(
                [str(script), "hook", "session-start"],
                input=event,
                capture_output=True,
                text=True,
                check=True,
            )
            assert "### memory/index.md" in out.stdout

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
