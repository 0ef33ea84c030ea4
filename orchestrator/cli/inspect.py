"""Looking at what happened: ``message show``, ``transcript``, ``logs --daemon``."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, safe_line, safe_text
from orchestrator.limits import TRANSCRIPT_ROTATE_BYTES

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def message() -> None:
    """Messages in the queue."""


@message.command("show")
@click.argument("message_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def show(obj: CliContext, message_id: str, as_json: bool) -> None:
    """Show message MESSAGE_ID: group, chat, sender, trust, state, attempts, replies and
    error (read from the queue; works whether or not the daemon runs)."""
    from orchestrator.errors import BadInput
    from orchestrator.store.messages import QUEUE_FILE, MessageQueue

    path = obj.home.state_dir / QUEUE_FILE
    if not path.exists():
        raise BadInput(f"no message {message_id!r}: there is no queue yet at {path}")
    queue = MessageQueue(path)
    try:
        found = queue.get(message_id)
    finally:
        queue.close()
    if found is None:
        raise BadInput(f"no message {message_id!r}", hint="see ids in: orchestrator status")
    data = found.to_dict()
    if as_json:
        print_json(data)
        return
    when = datetime.fromtimestamp(found.created, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    click.echo(f"message {found.id}  ({when})")
    click.echo(f"  group:    {found.group}   chat: {safe_line(found.chat)}")
    click.echo(f"  sender:   {safe_line(found.sender)} ({found.trust}) via {found.channel}")
    click.echo(f"  state:    {found.state}, {found.attempts} delivery attempts")
    if found.last_error:
        click.echo(f"  error:    {safe_line(found.last_error)}")
    click.echo(f"  text:     {safe_line(found.text)}")
    if found.said is not None:
        click.echo(f"  said:     {safe_line(found.said)}")
    for seq, reply in enumerate(found.replies):
        click.echo(f"  reply {seq}:  " + safe_text(reply).replace("\\n", "\\n            "))


@click.command()
@click.argument("name")
@click.option("--chat", default=None, help="The chat (default: every session of the group).")
@click.option("--thread", default=None, help="The thread, for per-thread groups.")
@click.option(
    "--channel",
    default=None,
    help="The chat's channel (cli, http, dashboard, telegram:ACCOUNT, ...; default: every "
    "channel the chat was seen on).",
)
@click.option("--last", type=click.IntRange(min=1), default=20, show_default=True, help="Events.")
@click.option("--json", "as_json", is_flag=True, help="Print the events as JSON.")
@pass_cli
def transcript(
    obj: CliContext,
    name: str,
    chat: str | None,
    thread: str | None,
    channel: str | None,
    last: int,
    as_json: bool,
) -> None:
    """Show the last events of a group's session transcripts, readable: fresh contexts,
    what was said and by whom, tool calls and their results. Read through the confined
    file layer (the container writes these files). A conversation is a chat of one
    channel: the same chat id on two channels is two conversations."""
    from orchestrator.agent.session import HEADER, TRANSCRIPT, check_header
    from orchestrator.confined import ConfinedDir, UnsafePath
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore
    from orchestrator.protocol import session_key
    from orchestrator.versions import FileTooNew

    group = GroupStore(obj.home).find(name)
    with ConfinedDir.open(group.path.parent, f"{group.folder}/sessions") as sessions:
        if chat is not None:
            channels = [channel] if channel else _channels_of(obj, group.folder, chat)
            keys = [session_key(group.config.session_mode, c, chat, thread) for c in channels]
        else:
            keys = [e.name for e in sessions.entries() if e.is_dir(follow_symlinks=False)]
        if not keys:
            click.echo(f"{group.folder} has no sessions yet")
            return
        shown: list[tuple[str, dict[str, Any]]] = []
        found = 0
        for key in keys:
            try:
                raw = sessions.read_bytes(f"{key}/{TRANSCRIPT}", 4 * TRANSCRIPT_ROTATE_BYTES)
            except FileNotFoundError:
                continue
            except UnsafePath as exc:
                click.echo(safe_line(f"{key}: {exc.reason}"), err=True)
                continue
            events = []
            for line in raw.splitlines():
                try:
                    event = json.loads(line)
                except (ValueError, RecursionError):  # RecursionError: nested too deeply
                    continue
                if isinstance(event, dict):
                    events.append(event)
            try:
                check_header(events[0] if events else None, f"{sessions.shown}/{key}/{TRANSCRIPT}")
            except FileTooNew as exc:
                if chat is not None:
                    raise
                click.echo(safe_line(f"{key}: {exc.message}"), err=True)
                continue
            found += 1
            shown.extend((key, event) for event in events if event.get("t") != HEADER)
        if chat is not None and not found:
            raise BadInput(f"{group.folder} has no session for chat {chat!r}")
    shown.sort(key=lambda item: _when(item[1]))
    shown = shown[-last:]
    if as_json:
        print_json([{"session": key, **event} for key, event in shown])
        return
    for key, event in shown:
        click.echo(_describe(key, event, several=chat is None and len(keys) > 1))


SHOWN_COMMAND_CHARS = 2_000  # of a shell command, in a transcript
SHOWN_OUTPUT_LINES = 40  # of a shell call's output (the transcript file holds it all)


def _channels_of(obj: CliContext, folder: str, chat: str) -> list[str]:
    """The channels the queue has seen ``chat`` of group ``folder`` on (``cli`` when it
    has seen none)."""
    from orchestrator.store.messages import open_queue_if_any

    queue = open_queue_if_any(obj.home)
    if queue is None:
        return ["cli"]
    try:
        return queue.channels_of_chat(folder, chat) or ["cli"]
    finally:
        queue.close()


LATEST_SHOWN_TS = 2**35  # seconds since the epoch: the year 3058


def _when(event: dict[str, Any]) -> float:
    """An event's ``ts``; 0 when it is not a number of seconds a clock can show (the
    container writes the line)."""
    ts = event.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not 0 <= ts < LATEST_SHOWN_TS:
        return 0.0
    return float(ts)


def _describe(key: str, event: dict[str, Any], several: bool) -> str:
    stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime(_when(event)))
    where = f"{stamp} [{safe_line(key)}] " if several else f"{stamp} "
    kind = event.get("t")
    if kind == "context":
        source, model = safe_line(event.get("source")), safe_line(event.get("model"))
        return f"{where}--- fresh context ({source}, {model}) ---"
    if kind == "flush":
        chars = safe_line(event.get("appended_chars"))
        return f"{where}(memory flush: {chars} characters to the daily note)"
    if kind == "done":
        return f"{where}(turn {safe_line(str(event.get('turn_id'))[:8])} done)"
    role = event.get("role")
    if role == "user":
        sender = safe_line(event.get("sender") or "?")
        # what the person said (the bot's mention included), not the text the turn got
        said = safe_line(
            event.get("said") if isinstance(event.get("said"), str) else event.get("content")
        )
        return f"{where}{sender} ({safe_line(event.get('trust', '?'))}): {said}"
    if role == "assistant":
        listed = event.get("tool_calls")
        calls: list[dict[str, Any]] = (
            [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
        )
        text = safe_line(event.get("content") or "")
        shells = [c for c in calls if c.get("name") == "shell"]
        tools = ", ".join(
            f"{safe_line(c.get('name'))}({safe_line(json.dumps(c.get('arguments')))[:60]})"
            for c in calls
            if c not in shells
        )
        line = f"{where}assistant: {text}" + (f"  -> {tools}" if tools else "")
        for call in shells:  # a shell command in full, as typed
            arguments = call.get("arguments")
            command = str(arguments.get("command", "")) if isinstance(arguments, dict) else ""
            line += f"\n{where}  $ {safe_line(command)[:SHOWN_COMMAND_CHARS]}"
        return line
    if role == "tool" and event.get("name") == "shell":
        lines = str(event.get("content")).splitlines()
        shown = [f"{where}    {safe_line(x)}" for x in lines[:SHOWN_OUTPUT_LINES]]
        if len(lines) > SHOWN_OUTPUT_LINES:
            shown.append(f"{where}    [... {len(lines) - SHOWN_OUTPUT_LINES} more lines]")
        return "\n".join(shown)
    if role == "tool":
        name = safe_line(event.get("name"))
        return f"{where}  {name}: {safe_line(str(event.get('content'))[:120])}"
    return f"{where}{safe_line(json.dumps(event)[:120])}"
