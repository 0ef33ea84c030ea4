"""Run in a group's container by ``orchestrator mcp add`` and ``mcp test``: start one
stdio server as the runner would, list its tools, print them as JSON, and stop it.

    python3 -m orchestrator.agent.mcp_probe '{"command": ..., "args": [...], "env": {...}}'
"""

from __future__ import annotations

import json
import sys

from orchestrator.limits import MCP_LIST_TIMEOUT_SECONDS


def main(argv: list[str]) -> int:
    from orchestrator.agent.settings import AgentSettings
    from orchestrator.agent.tools.mcp import McpSource
    from orchestrator.mcp.link import LinkFailed

    entry = json.loads(argv[0])
    settings = AgentSettings.from_env()
    source = McpSource(
        "probe",
        str(entry["command"]),
        tuple(str(a) for a in entry.get("args") or ()),
        {str(k): str(v) for k, v in (entry.get("env") or {}).items()},
        cwd=str(settings.agent_dir / "files"),
    )
    try:
        tools = source._link().tools(MCP_LIST_TIMEOUT_SECONDS)
        out = {
            "tools": [{**t.to_wire(), "digest": t.digest} for t in tools],
            "cut": source._link().cut_tools,
        }
    except LinkFailed as exc:
        out = {"error": str(exc)}
    finally:
        source.close()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
