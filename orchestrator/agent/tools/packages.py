"""The ``request_packages`` tool: ask the group's creators for packages (Debian or
Python) for this group's own image. The host holds the request (its exact list, with the
versions resolved) in this chat until a creator approves it with ``/approve ID``; the
tool is granted only when the operator allows requests from the chat
(``packages.from_chat``)."""

from __future__ import annotations

from typing import Any

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.tools.base import ToolError, ToolSpec
from orchestrator.agent.tools.box import FunctionTool, StaticSource, Toolbox
from orchestrator.protocol import PACKAGES_REQUEST

PACKAGES = "packages"
REQUEST_PACKAGES = ToolSpec(
    "request_packages",
    "Ask this group's creators for packages for your sandbox: Debian packages by name "
    "(debian) and Python packages (python, such as rich or rich==13.7.1; wheels only). "
    "Say why in reason. A creator approves the request in this chat; the packages are "
    "there from a later turn, once the group's image is rebuilt.",
    {
        "type": "object",
        "required": ["reason"],
        "additionalProperties": False,
        "properties": {
            "debian": {"type": "array", "items": {"type": "string"}},
            "python": {"type": "array", "items": {"type": "string"}},
            "reason": {"type": "string"},
        },
    },
)


def request_packages(
    box: Toolbox, reason: str, debian: list[Any] | None = None, python: list[Any] | None = None
) -> str:
    if box.host is None:
        raise ToolError("packages are granted by the orchestrator; no host here")
    try:
        answer = box.host.request(
            PACKAGES_REQUEST, debian=debian or [], python=python or [], reason=reason
        )
    except HostRequestFailed as exc:
        raise ToolError(str(exc)) from None
    return str(answer.get("result", ""))


PACKAGE_TOOLS = StaticSource(PACKAGES, (FunctionTool(REQUEST_PACKAGES, request_packages),))
