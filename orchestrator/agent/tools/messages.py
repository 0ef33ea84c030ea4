"""send_message: a reply to the chat now, handed to the host as it is made; send_file: a
file of files/ sent to the chat (the host copies it at once and sends the copy)."""

from __future__ import annotations

from orchestrator.agent.hostlink import HostRequestFailed
from orchestrator.agent.tools.base import ToolError, ToolSpec, schema
from orchestrator.agent.tools.box import FunctionTool, StaticSource, Toolbox
from orchestrator.limits import MESSAGE_MAX_CHARS
from orchestrator.protocol import FILE_SEND, REPLY

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


SEND_FILE = ToolSpec(
    "send_file",
    "Send a file from files/ (such as files/report.pdf) to the chat, with an optional "
    "caption. The file is copied when sent: later changes to it are not sent.",
    schema(["path"], path="string", caption="string"),
)


def send_file(box: Toolbox, path: str, caption: str = "") -> str:
    if not isinstance(caption, str):
        raise ToolError("caption must be a string")
    target = box.resolve(path)  # inside the agent folder, no link leaving it
    shown = box.shown(target)
    if not shown.startswith("files/"):
        raise ToolError(f"{path}: only files under files/ can be sent")
    if not target.is_file():
        raise ToolError(f"{path}: not a file")
    if box.host is None:
        raise ToolError("files are sent through the host; this turn runs without one")
    try:
        answer = box.host.request(FILE_SEND, seq=len(box.outbox), path=shown, caption=caption)
    except HostRequestFailed as exc:
        raise ToolError(f"the file was not sent: {exc}") from None
    box.outbox.append(str(answer.get("text") or caption or shown))
    size = answer.get("size")
    # A request the host had already stored (a repeat of its sequence number) is answered
    # without the file's size.
    if isinstance(size, int) and not isinstance(size, bool):
        return f"SENT: {shown} ({size} bytes)"
    return f"SENT: {shown}"


MESSAGES = StaticSource(
    "messages", (FunctionTool(SEND, send_message), FunctionTool(SEND_FILE, send_file))
)
