"""The console script. Two hot paths are dispatched before click and the rest of the CLI
are imported: the memory hook (it runs at every fresh context) and the runner's start
(it is on the path of every container cold start)."""

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
    from orchestrator.cli import main as cli_main

    cli_main()
