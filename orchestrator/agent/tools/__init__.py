"""The model's tools, as plug-ins: each ``ToolSource`` (files, messages, memory, tasks)
yields ``Tool``s, and a ``Toolbox`` offers one turn the tools of its mode that the host
granted it. A source whose tools are discovered at run time is one more source."""

from orchestrator.agent.tools.base import FLUSH, TURN, FileLocks, ToolError, ToolSpec, schema
from orchestrator.agent.tools.box import (
    WRITABLE_ROOTS,
    FunctionTool,
    StaticSource,
    Tool,
    Toolbox,
    ToolSource,
)
from orchestrator.agent.tools.files import FILES
from orchestrator.agent.tools.mcp import MCP_REQUEST_TOOLS
from orchestrator.agent.tools.memory import MEMORY
from orchestrator.agent.tools.messages import MESSAGES
from orchestrator.agent.tools.packages import PACKAGE_TOOLS
from orchestrator.agent.tools.sessions import SESSIONS
from orchestrator.agent.tools.skills import SKILL_TOOLS
from orchestrator.agent.tools.tasks import TASKS
from orchestrator.agent.tools.web import WEB_TOOLS

# the built-in sources, in the order their tools are offered
BUILT_IN: tuple[ToolSource, ...] = (
    FILES, MESSAGES, MEMORY, TASKS, PACKAGE_TOOLS, SKILL_TOOLS, MCP_REQUEST_TOOLS, WEB_TOOLS,
    SESSIONS,
)  # fmt: skip

__all__ = [
    "BUILT_IN",
    "FLUSH",
    "TURN",
    "WRITABLE_ROOTS",
    "FileLocks",
    "FunctionTool",
    "StaticSource",
    "Tool",
    "ToolError",
    "ToolSource",
    "ToolSpec",
    "Toolbox",
    "schema",
]
