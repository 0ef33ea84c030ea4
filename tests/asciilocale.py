"""Run a few lines of the project's code in a child Python whose locale reads and writes
ASCII only (no UTF-8 mode, no C-locale coercion), to show that a file's codec is named,
not taken from the locale."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orchestrator

# the checkout this test runs: the child imports the same code
CODE = str(Path(orchestrator.__file__).parents[1])


def run_in_ascii_locale(lines: str, *args: str) -> None:
    """Run ``lines`` (Python, its argv after ``-c`` being ``args``) in an ASCII-locale
    child; fail the test unless the locale is ASCII there and the lines end cleanly."""
    script = (
        "import codecs, locale; "
        "print(codecs.lookup(locale.getpreferredencoding(False)).name); " + lines
    )
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": CODE}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "ascii\n"  # the child's locale reads and writes ASCII only
