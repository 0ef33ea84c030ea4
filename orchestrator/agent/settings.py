"""Settings of the runner inside a container, from its environment.

The host sets these from group.yaml when it creates the container, so a change in
group.yaml recreates the container (the config hash covers the environment).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.limits import DEFAULT_CONTEXT_SHARE

DEFAULT_AGENT_DIR = "/workspace/agent"
DEFAULT_RUNTIME_DIR = "/run/orchestrator"
SOCKET_NAME = "runner.sock"
DEFAULT_SHELL_DIR = "/tmp/orchestrator-shell"
DEFAULT_SKILLS_DIR = "/workspace/skills"


@dataclass(frozen=True)
class AgentSettings:
    agent_dir: Path
    runtime_dir: Path
    provider: str = "offline"
    model: str = "offline-rules"
    session_mode: str = "per-chat"
    context_share: float = DEFAULT_CONTEXT_SHARE  # of the model's window, before compacting
    context_budget_chars: int | None = None  # and at most this many characters
    hooks_file: Path | None = None
    disk_bytes: int | None = None  # the group's disk limit (container.disk)
    shell_dir: Path = Path(DEFAULT_SHELL_DIR)  # the shells' private folders
    home_dir: Path | None = None  # the shells' HOME
    sandbox: bool = False  # in the group's container: the shell sweeps orphans too
    skills_dir: Path = Path(DEFAULT_SKILLS_DIR)  # the group's skills, mounted read-only
    mcp: str | None = None  # the group's MCP servers, as JSON (ORCHESTRATOR_MCP)
    egress_socket: Path | None = None  # the host's egress gate, when the web is enabled
    dial: str | None = None  # HOST:PORT of the daemon's runner port: dial it, listen nowhere
    credential: Path | None = None  # the group's credential for dialling (a Swarm secret)

    @property
    def memory_dir(self) -> Path:
        return self.agent_dir / "memory"

    @property
    def sessions_dir(self) -> Path:
        return self.agent_dir / "sessions"

    @property
    def socket_path(self) -> Path:
        return self.runtime_dir / SOCKET_NAME

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> AgentSettings:
        env = dict(os.environ if env is None else env)
        hooks = env.get("ORCHESTRATOR_HOOKS_FILE")
        return cls(
            agent_dir=Path(env.get("ORCHESTRATOR_AGENT_DIR", DEFAULT_AGENT_DIR)),
            runtime_dir=Path(env.get("ORCHESTRATOR_RUNTIME_DIR", DEFAULT_RUNTIME_DIR)),
            provider=env.get("ORCHESTRATOR_PROVIDER", "offline"),
            model=env.get("ORCHESTRATOR_MODEL", "offline-rules"),
            session_mode=env.get("ORCHESTRATOR_SESSION_MODE", "per-chat"),
            context_share=float(env.get("ORCHESTRATOR_CONTEXT_SHARE", DEFAULT_CONTEXT_SHARE)),
            context_budget_chars=(
                int(env["ORCHESTRATOR_CONTEXT_BUDGET"])
                if env.get("ORCHESTRATOR_CONTEXT_BUDGET")
                else None
            ),
            hooks_file=Path(hooks) if hooks else None,
            disk_bytes=int(env["ORCHESTRATOR_DISK_BYTES"])
            if env.get("ORCHESTRATOR_DISK_BYTES", "").isdigit()
            else None,
            shell_dir=Path(env.get("ORCHESTRATOR_SHELL_DIR", DEFAULT_SHELL_DIR)),
            home_dir=Path(env["HOME"]) if env.get("HOME") else None,
            sandbox=env.get("ORCHESTRATOR_SANDBOX") == "1",
            skills_dir=Path(env.get("ORCHESTRATOR_SKILLS_DIR", DEFAULT_SKILLS_DIR)),
            mcp=env.get("ORCHESTRATOR_MCP") or None,
            egress_socket=Path(env["ORCHESTRATOR_EGRESS_SOCKET"])
            if env.get("ORCHESTRATOR_EGRESS_SOCKET")
            else None,
            dial=env.get("ORCHESTRATOR_DIAL") or None,
            credential=Path(env["ORCHESTRATOR_CREDENTIAL"])
            if env.get("ORCHESTRATOR_CREDENTIAL")
            else None,
        )
