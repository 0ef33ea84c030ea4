"""The runner: serves turns for one group, inside its container.

For each turn it resumes the session's context or creates a fresh one. Fresh contexts
(a new session: ``startup``; ``/clear``: ``clear``; after compaction: ``compact``; a
provider switch: ``startup``) run the SessionStart hooks, whose output (the group's
memory) joins the system prompt; a resumed context never runs them. When a context
passes its budget, a memory flush turn may append to today's daily note, older turns are
summarized, and a fresh ``compact`` context takes over.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.agent.hooks import CommandHook, load_hooks, run_session_start
from orchestrator.agent.hostlink import HostLink, HostRequestFailed
from orchestrator.agent.providers import Provider, get_provider
from orchestrator.agent.providers.base import (
    FLUSH,
    STOP_CUT,
    STOP_LENGTH,
    SUMMARY,
    TURN,
    BudgetExhausted,
    CompletionRequest,
    ContextOverflow,
)
from orchestrator.agent.session import Context, Session
from orchestrator.agent.settings import AgentSettings
from orchestrator.agent.tools import (
    BUILT_IN,
    FileLocks,
    Toolbox,
    ToolError,
    ToolSource,
    ToolSpec,
)
from orchestrator.agent.tools import FLUSH as FLUSH_MODE
from orchestrator.agent.tools.mcp import mcp_sources
from orchestrator.agent.tools.shell import shell_source
from orchestrator.agent.tools.skills import rooted, skills_prompt
from orchestrator.limits import (
    CHARS_PER_TOKEN_ESTIMATE,
    COMPACTION_KEEP_MESSAGES,
    COMPACTION_KEEP_SHARE,
    COMPACTION_MIN_NEW_SHARE,
    CONTEXT_WORKING_MARGIN_CHARS,
    DEFAULT_GROUP_MAX_TOKENS,
    FLUSH_SOFT_SHARE,
    FRESH_EXTRA_SHARE,
    LEARNED_READ_MAX_BYTES,
    MAX_TOOL_STEPS_PER_TURN,
    MESSAGE_MAX_CHARS,
    OFFLINE_CONTEXT_TOKENS,
    RECENT_NOTES_MAX_CHARS,
    RUNNER_DEADLINE_MARGIN_SECONDS,
    SUMMARY_FALLBACK_CHARS,
    SUMMARY_MAX_CHARS,
    SUMMARY_MAX_TOKENS,
    SUMMARY_MIN_CHARS,
)
from orchestrator.memory.okf import DAILY_DIR
from orchestrator.protocol import (
    CLEAR_COMMAND,
    DAILY_NOTES_SOURCE,
    INSTRUCTIONS_FILE,
    LEARNED_FILE,
    NO_REPLY_WORD,
    OTHERS_WORDS,
    STANDING_GET,
    TurnRequest,
    TurnResult,
    cap_standing,
    session_key,
)

log = logging.getLogger(__name__)
NO_REPLY = NO_REPLY_WORD
CUT_NOTICE = (
    "[This answer was cut off: it took longer than this group's turn_timeout allows. Ask "
    "again, perhaps more narrowly.]"
)
SUMMARY_PROMPT = (
    "[compaction] The conversation above is about to leave your context. Write a summary "
    "of it for your own later use: the facts learned, decisions made, open tasks and "
    "questions, and who said what. Answer with the summary only, in at most a few short "
    "paragraphs."
)
SUMMARY_PREVIOUS = (
    "\n\nThe summary of what came before it, which your summary replaces (keep what "
    "still matters of it, in one summary, without repeating it as a quote):\n{summary}"
)
SUMMARY_HEADER = "\n\n## Summary of the earlier conversation\n\n"


@dataclass
class LoopResult:
    replies: list[str] = field(default_factory=list)
    shown: int = 0  # the first ``shown`` replies reached the chat during the turn
    cut: bool = False
    compacted: bool = False


@dataclass(frozen=True)
class FlushDone:
    """One session flushed outside a turn, and the characters its flush appended."""

    session: str
    appended_chars: int


class ContextTooSmall(Exception):
    """The group's context budget cannot hold a fresh context with room to work."""


@dataclass(frozen=True)
class ContextBudget:
    """What a request may hold before the context is compacted: ``tokens`` (a share of
    the window, less the answer's room), of which the tools' specs take ``tools_chars``
    characters, and a context of at most ``max_chars`` characters."""

    tokens: int
    max_chars: int | None = None
    tools_chars: int = 0

    def chars(self) -> int:
        """The context's budget in characters, for cutting what is kept."""
        chars = max(self.tokens * CHARS_PER_TOKEN_ESTIMATE - self.tools_chars, 1_000)
        return min(chars, self.max_chars) if self.max_chars else chars

    def check_room(self, context: Context) -> None:
        """ContextTooSmall when the budget cannot hold the fresh part of ``context`` (its
        system text of memory and instructions, and the tools) and
        CONTEXT_WORKING_MARGIN_CHARS: every turn would compact, and compacting would not
        shrink it. (The summary and the recent notes a fresh context also holds are each
        kept to FRESH_EXTRA_SHARE of the budget.)"""
        fresh = context.base_chars  # the tools' specs are outside chars() already
        needed = fresh + CONTEXT_WORKING_MARGIN_CHARS
        if self.chars() < needed:
            raise ContextTooSmall(
                f"this group's context budget ({self.chars():,} characters beside the "
                f"tools) cannot hold a fresh context ({fresh:,} characters of memory and "
                f"instructions) and {CONTEXT_WORKING_MARGIN_CHARS:,} to work in; set "
                "group.yaml context_budget to a larger share (or a model with a larger "
                f"window), so that at least {needed + self.tools_chars:,} characters fit"
            )

    def soft_exceeded(self, context: Context) -> bool:
        """The context passed FLUSH_SOFT_SHARE of its budget: time for an early flush."""
        if self.max_chars is not None and context.size_chars() > self.max_chars * FLUSH_SOFT_SHARE:
            return True
        tokens = context.tokens(CHARS_PER_TOKEN_ESTIMATE, self.tools_chars)
        return tokens > self.tokens * FLUSH_SOFT_SHARE

    def worth_compacting(self, context: Context, extra_chars: int = 0) -> bool:
        """Whether compacting can shrink the context: what came after its summary and
        kept messages (and ``extra_chars`` coming) is at least COMPACTION_MIN_NEW_SHARE
        of the budget."""
        new = sum(len(json.dumps(m, ensure_ascii=False)) for m in context.messages[context.kept :])
        return new + extra_chars >= self.chars() * COMPACTION_MIN_NEW_SHARE

    def exceeded(self, context: Context, extra_chars: int = 0) -> bool:
        if self.max_chars is not None and context.size_chars() + extra_chars > self.max_chars:
            return True
        extra = extra_chars // CHARS_PER_TOKEN_ESTIMATE
        tokens = context.tokens(CHARS_PER_TOKEN_ESTIMATE, self.tools_chars)
        return tokens + extra > self.tokens


@dataclass(frozen=True)
class TurnClock:
    """The runner's own deadline for a turn: the host's, less a margin for the answer
    to reach it; none for a turn run by hand."""

    at: float | None

    @classmethod
    def of(cls, seconds: float | None) -> TurnClock:
        if seconds is None:
            return cls(None)
        margin = min(RUNNER_DEADLINE_MARGIN_SECONDS, seconds * 0.1)
        return cls(time.monotonic() + seconds - margin)

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at


FLUSH_PROMPT = (
    "[memory flush] The conversation above (since the last flush) will leave your "
    "context. Append anything worth keeping (decisions, facts, preferences, open tasks) "
    "to today's daily note with append_daily, one fact per line, sending only what is "
    "not there yet; questions are not facts. Reply NO_REPLY when there is nothing to keep."
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
        # where the model's tools come from (unless given: the built-in sources, a
        # shell, and the group's MCP servers)
        self.tool_sources = (
            (
                *rooted(BUILT_IN, settings.skills_dir),  # the skill tool sees skills_dir
                shell_source(settings),
                *mcp_sources(settings.mcp, cwd=str(settings.agent_dir / "files")),
            )
            if tool_sources is None
            else tuple(tool_sources)
        )
        self.provider = provider or get_provider(settings.provider, settings.model)
        self.hooks = load_hooks(settings.hooks_file) if hooks is None else hooks
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._sessions: dict[str, Session] = {}
        # the last turn of each session served since the runner started: its chat and
        # time zone, for a flush the host asks for outside any turn (``flush_idle``)
        self._last_turns: dict[str, TurnRequest] = {}
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
            with session.batch():  # the turn's events are synced once, before the answer
                return self._handle_in(session, key, turn, host)

    def _handle_in(
        self, session: Session, key: str, turn: TurnRequest, host: HostLink | None
    ) -> TurnResult:
        """One turn of ``session``, with its lock held and its events batched."""
        context = session.current_context()
        if turn.turn_id in session.completed:
            return TurnResult(key, session.completed[turn.turn_id], duplicate=True)
        if context is not None and context.has_turn(turn.turn_id):
            # An earlier attempt of this turn did not finish: its messages leave the
            # live context (the transcript keeps them), so the next holds them once.
            session.append({"t": "supersede", "turn_id": turn.turn_id})
            context = session.current_context()
        clock = TurnClock.of(turn.deadline_seconds)
        self._last_turns[key] = turn
        try:
            result = self._handle(session, context, turn, host, clock)
        except (BudgetExhausted, ContextTooSmall) as exc:
            # One plain sentence, and the turn is done: retrying cannot help.
            log.warning("turn %s: %s", turn.turn_id, exc)
            result = TurnResult(key, [str(exc)])
        session.append({"t": "done", "turn_id": turn.turn_id, "replies": result.replies})
        return result

    def _handle(
        self,
        session: Session,
        context: Context | None,
        turn: TurnRequest,
        host: HostLink | None,
        clock: TurnClock,
    ) -> TurnResult:
        result = TurnResult(session.key)
        if turn.text.strip() == CLEAR_COMMAND:
            self._each_source("reset", session.key)  # a fresh shell, too
            if context is not None:
                try:
                    self.flush(session, context, host, turn)  # what it held is saved first
                except BudgetExhausted as exc:  # the clear goes ahead: it costs nothing
                    log.warning("turn %s: no memory flush before the clear: %s", turn.turn_id, exc)
            self.new_context(session, "clear", context, host, turn=turn)
            result.fresh_context = "clear"
            result.replies.append("Started a fresh context; memory was loaded again.")
            return result
        toolbox = Toolbox(
            self.settings.agent_dir,
            locks=self.file_locks,
            host=host,
            sources=self.tool_sources,
            allowed=None if turn.tools is None else frozenset(turn.tools),
            session_key=session.key,
            deadline=clock.at,
            sender=turn.sender or None,
        )
        try:
            return self._turn(session, context, turn, host, clock, toolbox, result)
        finally:
            self._each_source("end_turn", toolbox)  # what a turn started ends with it

    def flush_idle(self, request: TurnRequest, host: HostLink | None = None) -> list[FlushDone]:
        """A flush the host asks for outside any turn (before an idle container stops):
        each session served since the runner started, whose conversation has messages no
        flush has seen, is flushed under its session's lock, with its last turn's chat
        and the time zone ``request`` names. Sessions with nothing new are left alone
        (at most one flush per compaction cycle holds: the session records how far)."""
        done = []
        for key, last in sorted(self._last_turns.items()):
            with self.lock_for(key):
                session = self._sessions.get(key)
                context = session.current_context() if session is not None else None
                if session is None or context is None:
                    continue
                turn = replace(last, turn_id=request.turn_id, timezone=request.timezone)
                try:
                    appended = self.flush(session, context, host, turn, idle=True)
                except BudgetExhausted as exc:
                    log.warning("idle flush of %s not made: %s", key, exc)
                    continue
                if appended is not None:
                    done.append(FlushDone(key, appended))
        return done

    def _each_source(self, hook: str, argument: object) -> None:
        """Call the optional ``hook`` (``reset`` with a session key at /clear,
        ``end_turn`` with the toolbox when a turn ends) of every tool source that has
        one; a failing hook is logged and must not lose the turn's replies."""
        for source in self.tool_sources:
            if (method := getattr(source, hook, None)) is not None:
                try:
                    method(argument)
                except Exception:
                    log.exception("tool source %s: %s failed", source.name, hook)

    def _turn(
        self,
        session: Session,
        context: Context | None,
        turn: TurnRequest,
        host: HostLink | None,
        clock: TurnClock,
        toolbox: Toolbox,
        result: TurnResult,
    ) -> TurnResult:
        budget = self.budget(turn, toolbox.specs)
        if context is not None:
            budget.check_room(context)
        if context is None or (context.provider, context.model) != (
            self.settings.provider,
            self.settings.model,
        ):
            if context is not None:  # a provider or model switch: archive the old talk
                session.rotate()
            context = self.new_context(session, "startup", context, host, turn=turn)
            result.fresh_context = "startup"
        elif budget.exceeded(context, extra_chars=len(turn.text)):
            if budget.worth_compacting(context, extra_chars=len(turn.text)):
                context = self.compact(session, context, host, budget, turn=turn)
                result.fresh_context, result.compacted = "compact", True
            else:
                log.warning(
                    "turn %s: the context is over its budget but mostly fresh (memory, "
                    "summary, kept messages): not compacted again; raise context_budget",
                    turn.turn_id,
                )
        elif budget.soft_exceeded(context) and not context.soft_flushed:
            self.flush(session, context, host, turn, soft=True)  # save facts early
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
                # by reference: the host shows them to a model that takes images
                **({"images": list(turn.images)} if turn.images else {}),
            },
        )
        loop = self._agent_loop(session, context, turn, host, toolbox, budget, clock)
        result.replies, result.shown, result.cut = loop.replies, loop.shown, loop.cut
        result.compacted = result.compacted or loop.compacted
        if loop.compacted:
            result.fresh_context = "compact"
        return result

    def budget(self, turn: TurnRequest, tools: Sequence[ToolSpec] = ()) -> ContextBudget:
        """What this turn's requests may hold: a share of the model's window (as the host
        says it, else the default) less the answer's room, the ``tools``' specs counted
        in; and at most the characters an older ``context_budget`` names."""
        window = turn.window_tokens or OFFLINE_CONTEXT_TOKENS
        answer = turn.answer_tokens or DEFAULT_GROUP_MAX_TOKENS
        specs = [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in tools
        ]
        tokens = max(int(window * self.settings.context_share) - answer, 256)
        return ContextBudget(tokens, self.settings.context_budget_chars, len(json.dumps(specs)))

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
                skills=skills_prompt(self.settings.skills_dir),  # names, not bodies
            ).strip()
            + "\n"
        )

    def new_context(
        self,
        session: Session,
        source: str,
        previous: Context | None,
        host: HostLink | None = None,
        *,
        summary: str = "",
        flushed: int = 0,
        turn: TurnRequest | None = None,
    ) -> Context:
        """A fresh context (memory injected by the session-start hooks); after a
        compaction, with ``summary`` after the memory in its system text, and its first
        ``flushed`` messages (those kept) counted as flushed already."""
        standing = self.standing(host)
        outputs = run_session_start(
            self.hooks, source=source, session_id=session.key, agent_dir=self.settings.agent_dir
        )
        base = len(self.compose_system(source, outputs, standing))
        if turn is not None:
            outputs = [*outputs, *self._recent_notes(turn, host)]
        session.append(
            {
                "t": "context",
                "context_id": (previous.context_id + 1) if previous else 1,
                "source": source,
                "provider": self.settings.provider,
                "model": self.settings.model,
                "system": self.compose_system(source, outputs, standing)
                + (SUMMARY_HEADER + summary + "\n" if summary else ""),
                **({"summary": summary} if summary else {}),
                **({"flushed": flushed} if flushed else {}),
                "base_chars": base,
            }
        )
        assert session.context is not None
        return session.context

    def _recent_notes(self, turn: TurnRequest, host: HostLink | None) -> list[str]:
        """Today's and yesterday's daily-note lines for a fresh context of ``turn``'s chat
        (orchestrator.agent.notes.recent_notes); lines from anyone but a creator are
        others' words, which the host is told of (they hold a learned-behaviors write)."""
        from orchestrator.agent.notes import recent_notes

        recent = recent_notes(
            self.settings.memory_dir / DAILY_DIR,
            _local_now(turn.timezone).date(),
            turn.chat,
            min(RECENT_NOTES_MAX_CHARS, int(self.budget(turn).chars() * FRESH_EXTRA_SHARE)),
        )
        if recent.others_words and host is not None:
            try:
                host.request(OTHERS_WORDS, source=DAILY_NOTES_SOURCE)
            except HostRequestFailed as exc:
                log.warning("others' words in the recent notes not recorded: %s", exc)
        return [recent.block] if recent.block else []

    def compact(
        self,
        session: Session,
        context: Context,
        host: HostLink | None = None,
        budget: ContextBudget | None = None,
        keep_from: int | None = None,
        turn: TurnRequest | None = None,
    ) -> Context:
        """A memory flush, then a fresh ``compact`` context: a summary of the older
        messages, and the newest ones verbatim (as many as COMPACTION_KEEP_SHARE of the
        budget holds, at most COMPACTION_KEEP_MESSAGES; a message too long for that is
        cut). ``keep_from``: keep every message from this index on (a turn compacted in
        its middle keeps what it has done so far)."""
        budget = budget or ContextBudget(OFFLINE_CONTEXT_TOKENS, self.settings.context_budget_chars)
        self.flush(session, context, host, turn)
        messages = context.messages
        room = int(budget.chars() * COMPACTION_KEEP_SHARE)
        start = len(messages) if keep_from is None else keep_from
        if keep_from is None:
            used = 0
            while start > 0 and len(messages) - start < COMPACTION_KEEP_MESSAGES:
                size = len(json.dumps(messages[start - 1], ensure_ascii=False))
                if used + size > room and start < len(messages):
                    break
                used += size
                start -= 1
        while start < len(messages) and messages[start].get("role") != "user":
            start += 1  # never split a tool call from its result
        if start == len(messages) and keep_from is None:
            start = max(
                (i for i, m in enumerate(messages) if m.get("role") == "user"), default=start
            )
        # an image becomes a line at compaction: the fresh context names it, the agent
        # may look again (the file stays in files/inbox)
        agent_dir = self.settings.agent_dir
        older = [image_lines(m, agent_dir) for m in messages[:start]]
        kept = [_cut(image_lines(m, agent_dir), room) for m in messages[start:]]
        summary = self._summary(session, context, older, host) if older else context.summary
        summary = summary[: int(budget.chars() * FRESH_EXTRA_SHARE)]
        fresh = self.new_context(
            session, "compact", context, host, summary=summary, flushed=len(kept), turn=turn
        )
        kept_ids = context.turn_ids[start:]
        for message, turn_id in zip(kept, kept_ids, strict=True):
            self._record(session, fresh, turn_id, message)
        return fresh

    def _summary(
        self,
        session: Session,
        context: Context,
        older: list[dict[str, Any]],
        host: HostLink | None,
    ) -> str:
        """The summary of ``older``, asked for in so many words (a request that ends on
        an assistant message is taken as one to continue). An empty or runaway answer
        is asked again once; then the older messages are kept cut short instead, and
        the transcript says so."""
        prompt = SUMMARY_PROMPT
        if context.summary:  # one summary, built on the last: never a summary of summaries
            prompt += SUMMARY_PREVIOUS.format(summary=context.summary)
        request = CompletionRequest(
            system=_base_system(context),
            messages=[*older, {"role": "user", "content": prompt}],
            purpose=SUMMARY,
            max_tokens=SUMMARY_MAX_TOKENS,
        )
        for attempt in (1, 2):
            try:
                completion = self.provider.complete(request, host)
            except ContextOverflow:
                log.warning("compaction summary: the older messages are over the model's window")
                break
            text = (completion.text or "").strip()
            runaway = completion.stop_reason == STOP_LENGTH
            if len(text) >= SUMMARY_MIN_CHARS and not runaway:
                return text[:SUMMARY_MAX_CHARS]
            log.warning(
                "compaction summary %d was %s; %s",
                attempt,
                "cut at its length cap" if runaway else f"{len(text)} characters",
                "asking again" if attempt == 1 else "keeping the older messages cut short",
            )
        session.append(
            {
                "t": "note",
                "text": "no summary (it came back empty or runaway twice, or the older "
                "messages are over the model's window): they are kept cut to their last "
                f"{SUMMARY_FALLBACK_CHARS} characters instead",
            }
        )
        kept = _plain(older)[-SUMMARY_FALLBACK_CHARS:]
        return f"{context.summary}\n\n{kept}".strip() if context.summary else kept

    def flush(
        self,
        session: Session,
        context: Context,
        host: HostLink | None,
        turn: TurnRequest | None,
        *,
        soft: bool = False,
        idle: bool = False,
    ) -> int | None:
        """A memory flush of the conversation since the last one (never the summary),
        recorded in the session; the characters appended, None when there was nothing
        new to flush."""
        upto = len(context.messages)
        if context.flushed >= upto:
            return None
        appended = self._flush(context, host, turn)
        event: dict[str, Any] = {"t": "flush", "appended_chars": appended, "upto": upto}
        if soft:
            event["soft"] = True
        if idle:
            event["idle"] = True
        session.append(event)
        return appended

    def _flush(self, context: Context, host: HostLink | None, turn: TurnRequest | None) -> int:
        """A private flush turn: its messages never join the session. It sees the
        messages since the last flush; each line it keeps is marked with their senders,
        the chat and the group's local time."""
        from orchestrator.agent.notes import describe_source

        # a flush keeps facts in words: images are named, not shown again
        recent = [
            image_lines(m, self.settings.agent_dir) for m in context.messages[context.flushed :]
        ]
        while recent and recent[0].get("role") == "tool":
            recent = recent[1:]  # a tool result without its call is refused by providers
        senders = [
            (str(m["sender"]), str(m.get("trust") or "member"))
            for m in recent
            if m.get("role") == "user" and m.get("sender")
        ]
        now = _local_now(turn.timezone if turn is not None else None)
        toolbox = Toolbox(
            self.settings.agent_dir,
            FLUSH_MODE,
            locks=self.file_locks,
            sources=self.tool_sources,
            now=now,
            source=describe_source(
                senders, turn.chat if turn is not None else "-", f"{now:%Y-%m-%d %H:%M}"
            ),
        )
        messages = [*recent, {"role": "user", "content": FLUSH_PROMPT}]
        for _ in range(MAX_TOOL_STEPS_PER_TURN):
            try:
                completion = self.provider.complete(
                    CompletionRequest(
                        system=_base_system(context),
                        messages=messages,
                        tools=toolbox.specs,
                        purpose=FLUSH,
                    ),
                    host,
                )
            except ContextOverflow:
                # the context is already over the window: no flush can see it whole
                log.warning("memory flush skipped: the context is over the model's window")
                break
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
        self,
        session: Session,
        context: Context,
        turn: TurnRequest,
        host: HostLink | None,
        toolbox: Toolbox,
        budget: ContextBudget,
        clock: TurnClock,
    ) -> LoopResult:
        out = LoopResult()
        final: str | None = None
        final_shown = overflowed = False
        steps = 0
        while steps < MAX_TOOL_STEPS_PER_TURN:
            if clock.passed():
                out.cut = True
                break
            size = context.size_chars()
            try:
                completion = self.provider.complete(
                    CompletionRequest(
                        system=context.system,
                        messages=context.messages,
                        tools=toolbox.specs,
                        purpose=TURN,
                        show=host is not None,
                    ),
                    host,
                )
            except ContextOverflow:
                if overflowed:
                    raise  # compacted once already: the host says why, and it is final
                overflowed = out.compacted = True
                log.warning("turn %s: over the model's context window; compacting", turn.turn_id)
                start = next(
                    i for i, t in enumerate(context.turn_ids) if t == turn.turn_id
                )  # this turn's user message and what followed it stay
                context = self.compact(session, context, host, budget, keep_from=start, turn=turn)
                continue
            steps += 1
            if completion.input_tokens:
                context.measured = (completion.input_tokens, size)
            self._record(
                session, context, turn.turn_id, _assistant(completion.text, completion.tool_calls)
            )
            if completion.stop_reason == STOP_CUT:
                final, final_shown, out.cut = completion.text, completion.shown, True
                break
            if not completion.tool_calls:
                final, final_shown = completion.text, completion.shown
                break
            for message in self._run_tools(toolbox, completion.tool_calls):
                self._record(session, context, turn.turn_id, message)
        else:
            final = f"(stopped after {MAX_TOOL_STEPS_PER_TURN} tool steps in one turn)"
        out.replies = list(toolbox.outbox)
        out.shown = len(out.replies) if host is not None else 0
        if final and final.strip() and final.strip() != NO_REPLY:
            out.replies.append(final.strip()[:MESSAGE_MAX_CHARS])
            if final_shown and out.shown == len(out.replies) - 1:
                out.shown += 1
        if out.cut:
            out.replies.append(CUT_NOTICE)
            log.warning("turn %s: cut at its deadline", turn.turn_id)
        return out


def _base_system(context: Context) -> str:
    """The context's system text without its summary (a flush and a new summary see the
    memory and instructions, and the summary only where it is asked for)."""
    if context.summary:
        block = SUMMARY_HEADER + context.summary + "\n"
        if context.system.endswith(block):
            return context.system[: -len(block)]
    return context.system


def _local_now(zone: str | None) -> datetime:
    """Now in the group's time zone (UTC when it is unknown)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return datetime.now(ZoneInfo(zone or "UTC"))
    except (ZoneInfoNotFoundError, ValueError):
        return datetime.now(UTC)


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


def _cut(message: dict[str, Any], room: int) -> dict[str, Any]:
    """``message`` with its text cut to about ``room`` characters when it is longer."""
    content = message.get("content")
    if not isinstance(content, str) or len(content) <= max(room, 200):
        return message
    keep = max(room, 200)
    return {**message, "content": f"{content[:keep]}\n[cut: {len(content) - keep} more characters]"}


def image_lines(message: dict[str, Any], agent_dir: Path) -> dict[str, Any]:
    """``message`` with its images (references the host shows to a model) replaced by a
    line naming each and its size: what an image becomes at compaction."""
    images = message.get("images")
    if not images:
        return message
    lines = []
    for path in images:
        try:
            size = f", {_human_size((agent_dir / str(path)).lstat().st_size)}"
        except OSError:
            size = ", no longer there"
        lines.append(f"[image {path}{size}: shown earlier, not kept in this context]")
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    out = {k: v for k, v in message.items() if k != "images"}
    out["content"] = (text + "\n" if text else "") + "\n".join(lines)
    return out


def _human_size(size: int) -> str:
    from orchestrator.units import human_bytes

    return human_bytes(size)


def _plain(messages: list[dict[str, Any]]) -> str:
    """Messages as plain text, for a summary that could not be made."""
    lines = []
    for message in messages:
        text = message.get("content")
        if isinstance(text, str) and text.strip():
            lines.append(f"{message.get('role')}: {text.strip()}")
    return "\n".join(lines)


def _assistant(text: str | None, calls: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls
        ]
    return message
