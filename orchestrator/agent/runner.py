"""The runner: serves turns for one group, inside its container.

For each turn it resumes the session's context or creates a fresh one. Fresh contexts
(a new session: ``startup``; ``/clear``: ``clear``; after compaction: ``compact``; a
provider switch: ``startup``) run the SessionStart hooks, whose output (the group's
memory) joins the system prompt; a resumed context never runs them. When a context
passes its budget, a memory flush turn may append to today's daily note, older turns are
summarized, and a fresh ``compact`` context takes over.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.agent.hooks import CommandHook, load_hooks, run_session_start
from orchestrator.agent.hostlink import HostLink, HostRequestFailed
from orchestrator.agent.providers import Provider, get_provider
from orchestrator.agent.providers.base import (
    FLUSH,
    SUMMARY,
    TURN,
    BudgetExhausted,
    CompletionRequest,
)
from orchestrator.agent.session import Context, Session
from orchestrator.agent.settings import AgentSettings
from orchestrator.agent.tools import BUILT_IN, FileLocks, Toolbox, ToolError, ToolSource
from orchestrator.agent.tools import FLUSH as FLUSH_MODE
from orchestrator.limits import (
    COMPACTION_KEEP_MESSAGES,
    LEARNED_READ_MAX_BYTES,
    MAX_TOOL_STEPS_PER_TURN,
    MESSAGE_MAX_CHARS,
)
from orchestrator.protocol import (
    CLEAR_COMMAND,
    INSTRUCTIONS_FILE,
    LEARNED_FILE,
    STANDING_GET,
    TurnRequest,
    TurnResult,
    cap_standing,
    session_key,
)

log = logging.getLogger(__name__)
NO_REPLY = "NO_REPLY"
FLUSH_PROMPT = (
    "[memory flush] This conversation is about to be compacted: older turns will be "
    "replaced by a summary. Append anything worth keeping (decisions, facts, open tasks) "
    "to today's daily note with append_daily, sending only text that is not there yet. "
    "Reply NO_REPLY when there is nothing to keep."
)


class Runner:
    def __init__(
        self,
        settings: AgentSettings,
        provider: Provider | None = None,
        hooks: list[CommandHook] | None = None,
        tool_sources: Sequence[ToolSource] | None = None,
    ) -> None:
        self.settings = settings
        # where the model's tools come from (the built-in sources unless given)
        self.tool_sources = BUILT_IN if tool_sources is None else tuple(tool_sources)
        self.provider = provider or get_provider(settings.provider, settings.model)
        self.hooks = load_hooks(settings.hooks_file) if hooks is None else hooks
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self.file_locks = FileLocks()  # shared by every turn: shared files stay whole

    def lock_for(self, key: str) -> threading.Lock:
        """One turn at a time per session."""
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def handle(self, turn: TurnRequest, host: HostLink | None = None) -> TurnResult:
        """Run one turn. A turn id already completed returns its recorded replies: the
        host delivers at least once, and a retried turn must not run twice. ``host`` is
        the turn's link to the host (model calls of relayed providers, replies as they
        are made); None when a turn runs without a daemon."""
        key = turn.session or session_key(
            self.settings.session_mode, turn.channel, turn.chat, turn.thread
        )
        with self.lock_for(key):
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = Session(self.settings.sessions_dir, key)
            context = session.current_context()
            if turn.turn_id in session.completed:
                return TurnResult(key, session.completed[turn.turn_id], duplicate=True)
            try:
                result = self._handle(session, context, turn, host)
            except BudgetExhausted as exc:
                # One plain sentence, and the turn is done: retrying cannot help.
                log.warning("turn %s: %s", turn.turn_id, exc)
                result = TurnResult(key, [str(exc)])
            session.append({"t": "done", "turn_id": turn.turn_id, "replies": result.replies})
            return result

    def _handle(
        self, session: Session, context: Context | None, turn: TurnRequest, host: HostLink | None
    ) -> TurnResult:
        result = TurnResult(session.key)
        if turn.text.strip() == CLEAR_COMMAND:
            self.new_context(session, "clear", context, host)
            result.fresh_context = "clear"
            result.replies.append("Started a fresh context; memory was loaded again.")
            return result
        if context is None or (context.provider, context.model) != (
            self.settings.provider,
            self.settings.model,
        ):
            if context is not None:  # a provider or model switch: archive the old talk
                session.rotate()
            context = self.new_context(session, "startup", context, host)
            result.fresh_context = "startup"
        elif context.size_chars() > self.settings.context_budget_chars:
            context = self.compact(session, context, host)
            result.fresh_context, result.compacted = "compact", True
        self._record(
            session,
            context,
            turn.turn_id,
            {
                "role": "user",
                "content": turn.text,
                "sender": turn.sender,
                "trust": turn.trust,
                **({"said": turn.said} if turn.said is not None else {}),
            },
        )
        result.replies = self._agent_loop(session, context, turn, host)
        return result

    # contexts

    def standing(self, host: HostLink | None) -> tuple[str, str]:
        """(the operator's instructions, the learned behaviors), each capped: from the
        host, which keeps both outside the container; without a host (a turn run by
        hand), from files of those names in the agent folder, if any."""
        if host is None:
            return tuple(  # type: ignore[return-value]
                cap_standing(_local_text(self.settings.agent_dir / name), name)
                for name in (INSTRUCTIONS_FILE, LEARNED_FILE)
            )
        try:
            answer = host.request(STANDING_GET)
        except HostRequestFailed as exc:
            log.warning("standing text unavailable; the context starts without it: %s", exc)
            return "", ""
        return (
            cap_standing(_text(answer.get("instructions")), INSTRUCTIONS_FILE),
            cap_standing(_text(answer.get("learned")), LEARNED_FILE),
        )

    def compose_system(
        self, source: str, hook_outputs: list[str], standing: tuple[str, str] = ("", "")
    ) -> str:
        from orchestrator.templates import render

        prepend, learned = standing
        return (
            render(
                "agent/instructions.md.j2",
                agent_dir=str(self.settings.agent_dir),
                provider=self.settings.provider,
                model=self.settings.model,
                source=source,
                created=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                prepend=prepend,
                learned=learned,
                hook_outputs=hook_outputs,
            ).strip()
            + "\n"
        )

    def new_context(
        self,
        session: Session,
        source: str,
        previous: Context | None,
        host: HostLink | None = None,
    ) -> Context:
        standing = self.standing(host)
        outputs = run_session_start(
            self.hooks, source=source, session_id=session.key, agent_dir=self.settings.agent_dir
        )
        session.append(
            {
                "t": "context",
                "context_id": (previous.context_id + 1) if previous else 1,
                "source": source,
                "provider": self.settings.provider,
                "model": self.settings.model,
                "system": self.compose_system(source, outputs, standing),
            }
        )
        assert session.context is not None
        return session.context

    def compact(self, session: Session, context: Context, host: HostLink | None = None) -> Context:
        appended = self._flush(context, host)
        session.append({"t": "flush", "appended_chars": appended})
        messages = context.messages
        start = max(0, len(messages) - COMPACTION_KEEP_MESSAGES)
        while start < len(messages) and messages[start].get("role") != "user":
            start += 1  # never split a tool call from its result
        older, kept = messages[:start], messages[start:]
        summary = (
            self.provider.complete(
                CompletionRequest(system=context.system, messages=older, purpose=SUMMARY),
                host,
            ).text
            or ""
        )
        fresh = self.new_context(session, "compact", context, host)
        note = {"role": "user", "content": f"[Summary of the earlier conversation]\n{summary}"}
        for message in (note, *kept):
            self._record(session, fresh, None, message)
        return fresh

    def _flush(self, context: Context, host: HostLink | None) -> int:
        """A private flush turn: its messages never join the session."""
        toolbox = Toolbox(
            self.settings.agent_dir, FLUSH_MODE, locks=self.file_locks, sources=self.tool_sources
        )
        messages = [*context.messages, {"role": "user", "content": FLUSH_PROMPT}]
        for _ in range(MAX_TOOL_STEPS_PER_TURN):
            completion = self.provider.complete(
                CompletionRequest(
                    system=context.system, messages=messages, tools=toolbox.specs, purpose=FLUSH
                ),
                host,
            )
            if not completion.tool_calls:
                break
            messages.append(_assistant(completion.text, completion.tool_calls))
            messages.extend(self._run_tools(toolbox, completion.tool_calls))
        return toolbox.flushed_chars

    # the loop

    def _record(
        self, session: Session, context: Context, turn_id: str | None, message: dict[str, Any]
    ) -> None:
        """Append a message to the session, which adds it to its live context."""
        assert session.context is context
        session.append({"t": "msg", "turn_id": turn_id, **message})

    def _run_tools(self, toolbox: Toolbox, calls: Any) -> list[dict[str, Any]]:
        out = []
        for call in calls:
            try:
                content = toolbox.call(call.name, dict(call.arguments))
            except ToolError as exc:
                content = f"ERROR: {exc}"
            except OSError as exc:
                content = f"ERROR: {call.name} failed: {exc.strerror or exc}"
            out.append(
                {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
            )
        return out

    def _agent_loop(
        self, session: Session, context: Context, turn: TurnRequest, host: HostLink | None
    ) -> list[str]:
        turn_id = turn.turn_id
        toolbox = Toolbox(
            self.settings.agent_dir,
            locks=self.file_locks,
            host=host,
            sources=self.tool_sources,
            allowed=None if turn.tools is None else frozenset(turn.tools),
        )
        final: str | None = None
        for _ in range(MAX_TOOL_STEPS_PER_TURN):
            completion = self.provider.complete(
                CompletionRequest(
                    system=context.system,
                    messages=context.messages,
                    tools=toolbox.specs,
                    purpose=TURN,
                ),
                host,
            )
            self._record(
                session, context, turn_id, _assistant(completion.text, completion.tool_calls)
            )
            if not completion.tool_calls:
                final = completion.text
                break
            for message in self._run_tools(toolbox, completion.tool_calls):
                self._record(session, context, turn_id, message)
        else:
            final = f"(stopped after {MAX_TOOL_STEPS_PER_TURN} tool steps in one turn)"
        replies = list(toolbox.outbox)
        if final and final.strip() and final.strip() != NO_REPLY:
            replies.append(final.strip()[:MESSAGE_MAX_CHARS])
        return replies


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _local_text(path: Path) -> str:
    """A file's text, read without following a symlink ('' when there is none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a folder, FIFO or device: nothing
        os.close(fd)
        return ""
    with os.fdopen(fd, "rb") as handle:
        return handle.read(LEARNED_READ_MAX_BYTES).decode("utf-8", errors="replace")


def _assistant(text: str | None, calls: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
        ]
    return message
