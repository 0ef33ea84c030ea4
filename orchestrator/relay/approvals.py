"""Held requests: anything a creator must approve, bound to exactly what was shown, in
the chat it was shown in.

A request (today a learned-behaviors write made in a conversation others spoke in;
later package and MCP-server requests) is held with an id, its kind, the sha256 of its
exact content, the (group, channel, chat) it was made in and an expiry
(HELD_REQUEST_TTL_SECONDS). The host's notice in that chat shows the whole content, in
a code block (nothing in it is rendered or hidden), in several messages when long, each
under a sequence number of its own; content too long for a chat
(HELD_NOTICE_MAX_CHARS) is not shown there and only the operator may approve it.

A creator approves with ``/approve ID`` in that same chat, decided by the host's record
of the chat the command came from, never by anything a container sends; ``/confirm``
is the short form when exactly one request waits in the chat. Approval checks the hash
again and applies that request's content, nothing else. Newer requests never replace
older ones: each has its own id and notice.
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.commands import APPROVE, CONFIRM, Command
from orchestrator.limits import (
    HELD_NOTICE_MAX_CHARS,
    HELD_NOTICE_PIECE_CHARS,
    HELD_REQUEST_TTL_SECONDS,
)
from orchestrator.store.held import HeldRequest, HeldRequests, content_sha256

if TYPE_CHECKING:
    from orchestrator.store.messages import Message, MessageQueue

log = logging.getLogger("orchestrator.approvals")
CREATOR = "creator"
LEARNED = "learned"
PACKAGES = "packages"
MCP_SERVER = "mcp-server"


@dataclass(frozen=True)
class Applied:
    """What approving a request did: ``done`` (applied, the request is gone) and a
    sentence for people."""

    done: bool
    detail: str


Applier = Callable[[Path, str, HeldRequest, str], tuple[bool, str]]


@dataclass(frozen=True)
class Kind:
    """What the notices say of a kind of request, and how it is applied."""

    description: str  # "a change to this group's learned behaviors"
    applier: str  # "module:function" (groups_dir, folder, request, approved_by) -> (done, why)
    show: str  # the operator's command that shows such requests ({folder})
    approve: str  # the operator's command that approves one ({folder}, {id})
    # what follows an approval, "module:function" (queue, groups_dir, request), if anything
    after: str | None = None
    shown_as: str = "The new text"  # how a notice names the request's content
    why: str = (  # why it waits
        "This conversation has had messages from people who are not creators since it "
        "last started fresh, so the request may carry their words."
    )


KINDS: dict[str, Kind] = {
    LEARNED: Kind(
        "a change to this group's learned behaviors",
        "orchestrator.memory.learned:apply_held",
        "orchestrator learned show {folder} --pending",
        "orchestrator learned approve {folder} {id}",
    ),
    PACKAGES: Kind(
        "packages for this group's image",
        "orchestrator.relay.package_requests:apply_held",
        "orchestrator group packages {folder} --pending",
        "orchestrator group packages {folder} --approve {id}",
        after="orchestrator.relay.package_requests:build_after_approval",
        shown_as="The request, with the exact versions and hashes an approval installs",
        why="The agent asks for software in this group's sandbox.",
    ),
    MCP_SERVER: Kind(
        "an MCP server for this group (a program run in its container)",
        "orchestrator.relay.mcp_requests:apply_held",
        "orchestrator mcp requests --group {folder}",
        "orchestrator mcp requests --group {folder} --approve {id}",
        after="orchestrator.relay.mcp_requests:pin_after_approval",
        shown_as="The server's exact definition, as an approval adds it",
        why="The agent asks to run a program as a tool server in this group's sandbox.",
    ),
}


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in ``text``."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _block(text: str) -> str:
    fence = _fence(text)
    return f"{fence}\n{text}\n{fence}"


def notice_pieces(request: HeldRequest, folder: str) -> list[str]:
    """The host's messages for the chat about ``request``: the whole content when it
    fits HELD_NOTICE_MAX_CHARS (in pieces), else a notice that only the operator may
    approve it."""
    kind = KINDS[request.kind]
    what = kind.description
    size = f"{len(request.content):,} characters"
    hours = max(1, round((request.expires - request.created) / 3600))
    why = kind.why
    if not request.chat_approvable:
        return [
            f"[orchestrator] Request {request.id}: {what} ({size}) waits for approval. {why} "
            "It is too long to show here, so it cannot be approved from this chat: the "
            f"operator reads it with `{kind.show.format(folder=folder)}` and approves it "
            f"with `{kind.approve.format(folder=folder, id=request.id)}`."
        ]
    content = request.content
    chunks = [
        content[i : i + HELD_NOTICE_PIECE_CHARS]
        for i in range(0, len(content), HELD_NOTICE_PIECE_CHARS)
    ] or [""]
    last = (
        f"A creator approves exactly this text with /approve {request.id} in this chat "
        "(or /confirm, when it is the only request waiting here). It expires in "
        f"{hours} hours; ignore it to leave everything as it is."
    )
    if len(chunks) == 1:
        return [
            f"[orchestrator] Request {request.id}: {what} waits for a creator's approval. "
            f"{why} {kind.shown_as} ({size}), whole:\n\n{_block(chunks[0])}\n\n{last}"
        ]
    pieces = [
        f"[orchestrator] Request {request.id}: {what} waits for a creator's approval. {why} "
        f"{kind.shown_as} ({size}) follows whole, in {len(chunks)} parts.\n\n"
        f"Part 1 of {len(chunks)}:\n{_block(chunks[0])}"
    ]
    for number, chunk in enumerate(chunks[1:], start=2):
        pieces.append(
            f"[orchestrator] Request {request.id}, part {number} of {len(chunks)}:\n{_block(chunk)}"
        )
    pieces[-1] += f"\n\n{last}"
    return pieces


def hold(
    queue: MessageQueue,
    *,
    kind: str,
    folder: str,
    message: Message,
    content: str,
    ttl: float = HELD_REQUEST_TTL_SECONDS,
) -> HeldRequest:
    """Hold ``content`` for approval in the chat of ``message`` (the host's record of
    the turn asking) and tell that chat, as replies of ``message``."""
    request = HeldRequests(queue).hold(
        group=folder,
        kind=kind,
        content=content,
        channel=message.channel,
        chat=message.chat,
        thread=message.thread,
        sender=message.sender,
        message_id=message.id,
        chat_approvable=len(content) <= HELD_NOTICE_MAX_CHARS,
        ttl=ttl,
    )
    queue.add_host_notices(message.id, notice_pieces(request, folder))
    log.info(
        "group %s: request %d (%s, %d characters) held for approval in %s:%s",
        folder,
        request.id,
        kind,
        len(content),
        message.channel,
        message.chat,
    )
    return request


def tell_after(
    queue: MessageQueue,
    request: HeldRequest,
    work: Callable[[], str],
    *,
    background: bool,
    name: str,
) -> threading.Thread | None:
    """Run what follows an approval (``work``, which says how it went) and tell the
    request's chat, as a host notice on the message that asked: in a thread of its own
    when ``background`` (other groups are not held), the thread returned."""

    def run() -> None:
        queue.add_host_notices(
            request.message_id, [f"[orchestrator] Request {request.id}: {work()}"]
        )

    if not background:
        run()
        return None
    thread = threading.Thread(target=run, name=f"{name}-{request.group}", daemon=True)
    thread.start()
    return thread


def apply(groups_dir: Path, folder: str, request: HeldRequest, approved_by: str) -> Applied:
    """Apply ``request`` as held (its hash checked again); the caller drops it when done."""
    if content_sha256(request.content) != request.sha256:
        return Applied(False, f"request {request.id} does not match what was shown; not applied")
    module, _, name = KINDS[request.kind].applier.partition(":")
    applier: Applier = getattr(importlib.import_module(module), name)
    done, detail = applier(groups_dir, folder, request, approved_by)
    return Applied(done, detail)


def approve(
    queue: MessageQueue,
    groups_dir: Path,
    request: HeldRequest,
    approved_by: str,
    *,
    background: bool = True,
) -> Applied:
    """Apply ``request`` and forget it once applied (a failure leaves it held, so it can
    be approved again)."""
    applied = apply(groups_dir, request.group, request, approved_by)
    if applied.done:
        HeldRequests(queue).drop(request.id)
        after = KINDS[request.kind].after
        if after is not None:
            module, _, name = after.partition(":")
            getattr(importlib.import_module(module), name)(
                queue, groups_dir, request, background=background
            )
        log.info(
            "group %s: request %d (%s) approved by %r",
            request.group,
            request.id,
            request.kind,
            approved_by,
        )
    return applied


def _listing(requests: list[HeldRequest]) -> str:
    return ", ".join(
        f"{r.id} ({KINDS[r.kind].description}, {len(r.content):,} characters, from {r.sender})"
        for r in requests
    )


def chat_reply(
    queue: MessageQueue,
    groups_dir: Path,
    folder: str,
    command: Command,
    *,
    channel: str,
    chat: str,
    trust: str,
    sender: str,
    creators: tuple[str, ...],
    now: float | None = None,
) -> str:
    """The host's answer to ``/confirm`` or ``/approve ID`` from ``sender`` in
    (``channel``, ``chat``): only requests made in that chat can be approved there."""
    if trust != CREATOR or sender not in creators:
        return "Only this group's creators can approve what waits for approval."
    now = time.time() if now is None else now
    waiting = HeldRequests(queue).waiting(folder, channel=channel, chat=chat, now=now)
    if command.name == CONFIRM:
        if not waiting:
            return "Nothing is waiting for approval in this chat."
        if len(waiting) > 1:
            return (
                f"{len(waiting)} requests wait in this chat: {_listing(waiting)}. Approve "
                "one with /approve ID."
            )
        request = waiting[0]
    elif command.name == APPROVE:
        if len(command.args) != 1 or not command.args[0].isdigit():
            listed = f" (waiting here: {_listing(waiting)})" if waiting else ""
            return f"Give the number of the request: /approve ID{listed}."
        wanted = int(command.args[0])
        found = next((r for r in waiting if r.id == wanted), None)
        if found is None:
            known = HeldRequests(queue).get(wanted)
            if known is not None and (known.group, known.channel, known.chat) == (
                folder,
                channel,
                chat,
            ):
                return f"Request {wanted} expired; ask again if it is still wanted."
            return f"No request {wanted} waits in this chat."
        request = found
    else:
        raise ValueError(f"not an approval command: /{command.name}")
    if not request.chat_approvable:
        command_line = KINDS[request.kind].approve.format(folder=folder, id=request.id)
        return (
            f"Request {request.id} is too long to approve from a chat; the operator "
            f"approves it with `{command_line}`."
        )
    applied = approve(queue, groups_dir, request, sender)
    if applied.done:
        return f"Approved request {request.id}: {applied.detail}."
    return f"Request {request.id} was not applied: {applied.detail}"
