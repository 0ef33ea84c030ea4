"""An MCP tool call's own cost: a call of a trivial tool (``add``) of a stdio server in a
group's container, through the runner's tool source (the Toolbox, the official SDK's
client, JSON-RPC over the server's pipes) against calling the same function in-process,
both in the same container, interleaved. The first call (the server's start and tool
listing, on a turn's first use) is measured apart."""

from __future__ import annotations

from bench.container import group_container
from bench.harness import Result, Series

NAME = "mcp-call"

SERVER = """
from mcp.server.mcpserver import MCPServer
server = MCPServer("bench")
@server.tool()
def add(a: int, b: int) -> str:
    return str(a + b)
server.run("stdio")
"""

SCRIPT = """
import json, sys, time
from pathlib import Path
from orchestrator.agent.tools import Toolbox
from orchestrator.agent.tools.mcp import McpSource
from orchestrator.mcp.tools import ListedTool
rounds, server = int(sys.argv[1]), sys.argv[2]
Path("/tmp/bench_server.py").write_text(server)

def add(a: int, b: int) -> str:
    return str(a + b)

source = McpSource("bench", sys.executable, ("/tmp/bench_server.py",))
start = time.perf_counter()
digest = {t.name: t.digest for t in source._link().tools()}
first_list = time.perf_counter() - start
source.pins = digest
agent = Path("/workspace/agent")
start = time.perf_counter()
box = Toolbox(agent, sources=(source,))
answer = box.call("mcp__bench__add", {"a": 1, "b": 2})
first_call = time.perf_counter() - start
assert answer.endswith("\\n3"), answer
target, floor = [], []
for n in range(rounds + 5):
    start = time.perf_counter()
    assert add(1, 2) == "3"
    f = time.perf_counter() - start
    start = time.perf_counter()
    answer = box.call("mcp__bench__add", {"a": 1, "b": 2})
    t = time.perf_counter() - start
    assert answer.endswith("\\n3"), answer
    if n >= 5:
        target.append(t)
        floor.append(f)
source.close()
print(json.dumps({"target": target, "floor": floor, "start": first_list,
                  "first_call": first_call}))
"""


def run(quick: bool) -> Result:
    rounds = 200 if quick else 2000
    with group_container("mcp") as inside:
        samples = inside.run(SCRIPT, str(rounds), SERVER)
    target = Series("MCP tool call of add(1, 2), stdio server in the container", samples["target"])
    floor = Series("add(1, 2) called in-process in the same container", samples["floor"])
    return Result(
        NAME,
        target,
        floor,
        note=(
            f"{rounds} calls each, interleaved; the server's start and listing "
            f"{samples['start'] * 1000:.0f} ms, the first call "
            f"{samples['first_call'] * 1000:.1f} ms"
        ),
        extra={"start_s": samples["start"], "first_call_s": samples["first_call"]},
    )
