"""The house plan, held: SQL only in the store, the container's code free of anything
host-only, and the package's rooms (its top-level modules and folders) importing each
other in one direction only."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "orchestrator"
# Files that keep databases of their own: the memory search index (a derived cache), and
# the in-memory table a transcript search makes for one call (in the container).
OWN_DATABASES = {PACKAGE / "memory" / "search.py", PACKAGE / "agent" / "tools" / "sessions.py"}
SQL = re.compile(
    r"\b(SELECT\s.+\sFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
    r"CREATE\s+(TABLE|INDEX|VIRTUAL)|DROP\s+TABLE|PRAGMA\s+\w+)\b",
    re.DOTALL,
)


def _python_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _strings(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_sql_outside_the_store() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text.strip()[:60]!r}"
        for path in _python_files()
        if PACKAGE / "store" not in path.parents and path not in OWN_DATABASES
        for line, text in _strings(path)
        if SQL.search(text)
    ]
    assert found == [], "SQL belongs in orchestrator/store/:\n" + "\n".join(found)


def test_the_check_sees_sql() -> None:
    assert SQL.search("SELECT id FROM messages WHERE x=?")
    assert SQL.search("INSERT OR IGNORE INTO replies (a) VALUES (?)")
    assert not SQL.search("Select the files from the tree")  # prose is not SQL


def _room(module: str) -> str | None:
    """The room of ``orchestrator.x.y``: its top-level module or folder."""
    parts = module.split(".")
    if parts[0] != "orchestrator" or len(parts) < 2:
        return None
    return parts[1]


def _room_imports() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in _python_files():
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        here = _room(".".join(relative.parts))
        if here is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                there = _room(name)
                if (
                    there is not None
                    and there != here
                    and (PACKAGE / there).exists() | (PACKAGE / f"{there}.py").exists()
                ):
                    edges.setdefault(here, set()).add(there)
    return edges


def test_the_rooms_import_each_other_in_one_direction_only() -> None:
    """No cycle between top-level modules and folders (type-only imports count too):
    each room can be read knowing only the rooms below it."""
    edges = _room_imports()
    seen: dict[str, str] = {}  # room -> "open" | "done"
    cycles: list[list[str]] = []

    def visit(room: str, path: list[str]) -> None:
        seen[room] = "open"
        for nxt in sorted(edges.get(room, ())):
            if seen.get(nxt) == "open":
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in seen:
                visit(nxt, [*path, nxt])
        seen[room] = "done"

    for room in sorted(edges):
        if room not in seen:
            visit(room, [room])
    assert cycles == [], "rooms that import each other: " + "; ".join(
        " -> ".join(c) for c in cycles
    )
    # the foundation imports no room above it
    foundation = {
        "limits", "errors", "units", "fsatomic", "confined", "wire", "validate", "versions",
    }  # fmt: skip
    for room in foundation:
        assert edges.get(room, set()) <= foundation | {"yamldoc", "redact"}, room


# Everything the container's code must do without: the host's libraries and rooms.
HOST_ONLY = [
    "docker", "aiohttp", "dulwich", "anthropic", "openai", "telegram", "nio", "ruamel",
    "croniter", "markdown_it", "orchestrator.store", "orchestrator.daemon",
    "orchestrator.service", "orchestrator.relay", "orchestrator.channels",
    "orchestrator.runtime", "orchestrator.groups", "orchestrator.config",
    "orchestrator.dashboard", "orchestrator.cli", "orchestrator.image",
    "orchestrator.memory.search", "orchestrator.memory.history", "orchestrator.memory.learned",
    "orchestrator.memory.migrate", "orchestrator.memory.lint", "orchestrator.home",
    "orchestrator.secrets", "prometheus_client", "orchestrator.metrics",
    "orchestrator.memory.consolidate", "orchestrator.money", "imapclient", "aiosmtplib",
    "dkim", "inscriptis",
]  # fmt: skip


def test_the_containers_code_runs_a_turn_with_every_host_only_module_blocked(
    tmp_path: Path,
) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        for name in {HOST_ONLY!r}:
            sys.modules[name] = None  # any import of it fails
        from pathlib import Path
        from orchestrator.agent.runner import Runner
        from orchestrator.agent.settings import AgentSettings
        from orchestrator.memory.scaffold import scaffold_memory
        from orchestrator.protocol import TurnRequest
        agent = Path(sys.argv[1])
        scaffold_memory(agent)
        settings = AgentSettings(agent_dir=agent, runtime_dir=agent / "run",
                                 provider="offline", model="offline-rules", hooks_file=None)
        runner = Runner(settings)
        first = runner.handle(TurnRequest("t1", "c", "remember that the cat is called Tom"))
        second = runner.handle(TurnRequest("t2", "c", "what do you know about the cat?"))
        print(first.replies[0])
        print(second.replies[0])
        blocked = [n for n in {HOST_ONLY!r} if sys.modules.get(n) is not None]
        print("loaded:", blocked)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "agent")],
        capture_output=True,
        text=True,
        cwd=PACKAGE.parent,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Noted: the cat is called Tom."), result.stdout
    assert "- The cat is called Tom. (memory/facts/the-cat.md)" in result.stdout
    assert result.stdout.splitlines()[-1] == "loaded: []"


def test_the_runner_starts_without_what_only_some_groups_use() -> None:
    """A container's cold start imports the runner: MCP's asyncio and SDK, YAML, OpenSSL's
    hashes, tempfile and the search terms load only when a group uses them."""
    import subprocess
    import sys

    probe = (
        "import sys\nimport orchestrator.agent.serve\n"
        "lazy = ('asyncio', 'yaml', 'ssl', 'hashlib', 'tempfile', 'mcp',"
        " 'orchestrator.mcp.link', 'orchestrator.memory.terms', 'orchestrator.yamldoc')\n"
        "print(sorted(m for m in lazy if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
