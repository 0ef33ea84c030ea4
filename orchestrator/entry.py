"""The console script. Three hot paths are dispatched before click and the rest of the CLI
are imported: the memory hook (it runs at every fresh context), the runner's start (it
is on the path of every container cold start), and an offline image build with nothing
to do (run before every start by scripts and CI; what it cannot answer for certain goes
to the CLI)."""

from __future__ import annotations

import sys


def main() -> None:
    args = sys.argv[1:]
    if args[:2] == ["hook", "session-start"]:
        from orchestrator.agent.memory_hook import main as hook_main

        sys.exit(hook_main(args[2:]))
    if args == ["agent", "serve"]:
        from orchestrator.agent.serve import main as serve_main

        sys.exit(serve_main())
    if args[:2] == ["image", "build"]:
        from orchestrator.image.noop import answer_from_console

        if answer_from_console(args):
            sys.exit(0)
    from orchestrator.cli import main as cli_main

    cli_main()
