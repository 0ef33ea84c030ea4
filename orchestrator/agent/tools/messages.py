"""send_message: a reply to the chat now, handed to the host as it is made."""

from __future__ import annotations

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.tools.base import ToolError, ToolSpec, schema
from orchestrator.agent.tools.box import FunctionTool, StaticSource, Toolbox
from orchestrator.limits import MESSAGE_MAX_CHARS
from orchestrator.protocol import REPLY

SEND = ToolSpec(
    "send_message",
    "Send a message to the chat now (may be used more than once).",
    schema(["text"], text="string"),
)


def send_message(box: Toolbox, text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise ToolError("text must be a non-empty string")
    text = text[:MESSAGE_MAX_CHARS]
    if box.host is not None:
        try:
            box.host.request(REPLY, seq=len(box.outbox), text=text)
        except HostRequestFailed as exc:
            raise ToolError(f"the message was not sent: {exc}") from None
    box.outbox.append(text)
    return "SENT"


# stores kept by the host


MESSAGES = StaticSource("messages", (FunctionTool(SEND, send_message),))
