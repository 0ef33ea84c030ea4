"""What the host and a group's container share: the turn the host sends and the answer
the runner gives, the names of the requests a runner makes during a turn, the session
keys, and the constants both sides must agree on. Imports nothing host-side (the image
installs the same package, so each of these exists once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.limits import MESSAGE_MAX_CHARS, STANDING_TEXT_BUDGET_CHARS

OFFLINE = "offline"  # the embedded provider: it runs in the container; no definition
NO_REPLY_WORD = "NO_REPLY"  # an answer of only this is no reply at all
CLEAR_COMMAND = "/clear"  # a fresh context, answered by the runner itself
# the frame op (beside "turn" and "ping") by which the host asks, outside any turn, for
# the memory flush of every session the runner served (before its idle container stops)
FLUSH_OP = "flush"

# The agent folder (groups/<folder>/ on the host, /workspace/agent in the container).
MEMORY_DIR, SESSIONS_DIR, FILES_DIR = "memory", "sessions", "files"
LEARNED_FILE = "learned-behaviors.md"  # host-owned, never mounted
INSTRUCTIONS_FILE = "instructions.prepend.md"  # the operator's, never mounted
LEARNED_LABEL = "learned"  # the label the model's memory tools use for that store

# Trust levels the host records with a message.
CREATOR, MEMBER, GUEST = "creator", "member", "guest"

# The answer to a write the host makes for the agent.
PERSISTED, NOT_PERSISTED, UNKNOWN = "PERSISTED", "NOT_PERSISTED", "PERSISTENCE_UNKNOWN"

# Requests a runner makes during a turn (a frame with "req" and "op").
MODEL_COMPLETE = "model.complete"
REPLY = "reply"
STANDING_GET = "standing.get"
LEARNED_READ = "learned.read"
LEARNED_WRITE = "learned.write"
MEMORY_SEARCH = "memory.search"
MEMORY_GET = "memory.get"
TASK_SCHEDULE = "task.schedule"
TASK_LIST = "task.list"
TASK_CANCEL = "task.cancel"
PACKAGES_REQUEST = "packages.request"
MCP_LIST = "mcp.list"  # a remote MCP server's tools, as this turn may use them
MCP_CALL = "mcp.call"  # a call of one, made by the host
OTHERS_WORDS = "others.words"  # this turn's context received others' words (a tool's result)
MCP_REQUEST = "mcp.request"  # a creator asks for a stdio MCP server, held for approval
WEB_FETCH = "web.fetch"  # a page, fetched by the host under the group's web policy
WEB_SEARCH = "web.search"  # results of the group's search backend
FILE_SEND = "file.send"  # a file of files/, copied by the host and sent to the chat
OPS = (
    MODEL_COMPLETE, REPLY, STANDING_GET, LEARNED_READ, LEARNED_WRITE, MEMORY_SEARCH,
    MEMORY_GET, TASK_SCHEDULE, TASK_LIST, TASK_CANCEL, PACKAGES_REQUEST, MCP_LIST, MCP_CALL,
    OTHERS_WORDS, MCP_REQUEST, WEB_FETCH, WEB_SEARCH, FILE_SEND,
)  # fmt: skip

# Images by reference: a message's ``images`` (a user message's, or a tool result's)
# name files under the agent folder's files/, at most this many per message; the host
# reads each through its confined layer and shows it to a model that takes images.
IMAGE_PATH_PATTERN = r"files/[^\x00]{1,400}"
IMAGES_PER_MESSAGE_MAX = 16


def image_refs(value: Any) -> tuple[str, ...] | None:
    """``value`` as a message's image references, or None when it is not a list of at
    most IMAGES_PER_MESSAGE_MAX paths under files/ (no '..')."""
    if (
        not isinstance(value, list)
        or len(value) > IMAGES_PER_MESSAGE_MAX
        or not all(
            isinstance(v, str) and re.fullmatch(IMAGE_PATH_PATTERN, v) and ".." not in v.split("/")
            for v in value
        )
    ):
        return None
    return tuple(value)


SESSION_MODES = ("per-chat", "per-thread", "shared")
SESSION_KEY_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"  # what session_key makes
_ID_MAX = 200


class BadFrame(Exception):
    """A turn or an answer that is not what the protocol says (the message names the
    field); it fails that turn only."""


def session_key(mode: str, channel: str, chat: str, thread: str | None) -> str:
    """A file-safe key: one session per (channel, chat), per (channel, chat, thread), or
    one for the whole group (``shared``). The channel is part of the key, so a chat id
    named through one channel (an HTTP bridge naming "dashboard", or a Telegram chat's
    id) never reaches another channel's conversation."""
    if mode == "shared":
        return "shared"
    # channels are "kind" or "kind:name" of [a-z0-9_-]: with ':' as '.', still distinct
    where = re.sub(r"[^a-z0-9_-]+", ".", channel.lower())[:40].strip(".") or "channel"
    raw = f"chat-{chat}" if mode == "per-chat" or not thread else f"chat-{chat}-thread-{thread}"
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", raw)[:72].strip("._") or "chat"
    if safe != raw or where != channel.replace(":", "."):  # keep distinct ids distinct
        import hashlib  # rarely needed; the runner does not load OpenSSL at its start for it

        safe += "-" + hashlib.sha256(f"{channel}\n{raw}".encode()).hexdigest()[:10]
    return f"{where}.{safe}"


def cap_standing(text: str, name: str, budget: int = STANDING_TEXT_BUDGET_CHARS) -> str:
    """Standing text (the operator's instructions, learned behaviors) for a fresh
    context: stripped and cut at ``budget`` characters with a visible notice."""
    text = text.strip()
    if len(text) <= budget:
        return text
    return (
        text[:budget] + f"\n[truncated: {name} is longer than {budget:,} characters and only "
        "its beginning was loaded]"
    )


TOOL_NAME_PATTERN = r"[A-Za-z0-9_.-]{1,64}"
TURN_TOOLS_MAX = 256


# the source an others.words request names when a fresh context was given daily-note
# lines from someone who is not a creator (the agent's own runner, not a tool)
DAILY_NOTES_SOURCE = "daily-notes"
# ... and when sessions_search returned what was said in the group's conversations
SESSIONS_SOURCE = "sessions"


@dataclass(frozen=True)
class TurnRequest:
    """One turn the host delivers: the message, from the host's own record of it."""

    turn_id: str
    chat: str
    text: str
    sender: str = ""
    trust: str = MEMBER
    thread: str | None = None
    channel: str = "cli"
    session: str | None = None  # the host's key for the turn's session (it decides)
    # the tools this turn may use (source or tool names), by the host's record of who
    # sent it; None: every tool of the runner
    tools: tuple[str, ...] | None = None
    # what the person said, when ``text`` is not all of it (the bot's mention taken off):
    # for the transcript, never for the model
    said: str | None = None
    # the model's context window and the room its answer needs, in tokens (the host
    # knows them; None: the runner's defaults), and the seconds the turn has
    window_tokens: int | None = None
    answer_tokens: int | None = None
    deadline_seconds: float | None = None
    # the group's IANA time zone: the day of its daily notes and the time on their lines
    timezone: str | None = None
    # the images the message came with (paths under the agent folder): the runner names
    # them on the turn's user message, and the host shows them to a model that takes them
    images: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {
            **({"images": list(self.images)} if self.images else {}),
            "timezone": self.timezone,
            "window_tokens": self.window_tokens,
            "answer_tokens": self.answer_tokens,
            "deadline_seconds": self.deadline_seconds,
            "said": self.said,
            "tools": None if self.tools is None else list(self.tools),
            "turn_id": self.turn_id,
            "chat": self.chat,
            "thread": self.thread,
            "channel": self.channel,
            "session": self.session,
            "sender": self.sender,
            "trust": self.trust,
            "text": self.text,
        }

    @classmethod
    def from_wire(cls, raw: Any) -> TurnRequest:
        """The turn in an untrusted frame; BadFrame names the field."""
        if not isinstance(raw, dict):
            raise BadFrame("turn must be an object")

        def text(key: str, limit: int, required: bool = True) -> str | None:
            value = raw.get(key)
            if value is None and not required:
                return None
            if not isinstance(value, str) or (required and not value) or len(value) > limit:
                raise BadFrame(f"turn.{key} must be a string of 1..{limit} characters")
            return value

        session = text("session", 128, required=False)
        if session is not None and not re.fullmatch(SESSION_KEY_PATTERN, session):
            raise BadFrame("turn.session must be a session key (letters, digits, . _ -)")
        tools = raw.get("tools")
        if tools is not None and (
            not isinstance(tools, list)
            or len(tools) > TURN_TOOLS_MAX
            or not all(isinstance(t, str) and re.fullmatch(TOOL_NAME_PATTERN, t) for t in tools)
        ):
            raise BadFrame(
                f"turn.tools must be a list of at most {TURN_TOOLS_MAX} tool or source names "
                "(letters, digits, . _ -)"
            )

        def count(key: str, limit: float) -> Any:
            value = raw.get(key)
            if value is None:
                return None
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (0 < value <= limit)
            ):
                raise BadFrame(f"turn.{key} must be a number from 1 to {limit:g}")
            return value

        images = image_refs(raw.get("images", []))
        if images is None:
            raise BadFrame(
                f"turn.images must be a list of at most {IMAGES_PER_MESSAGE_MAX} paths under files/"
            )
        return cls(
            images=images,
            window_tokens=count("window_tokens", 100_000_000),
            answer_tokens=count("answer_tokens", 10_000_000),
            deadline_seconds=count("deadline_seconds", 86_400),
            said=text("said", MESSAGE_MAX_CHARS, required=False),
            tools=None if tools is None else tuple(tools),
            turn_id=text("turn_id", _ID_MAX) or "",
            chat=text("chat", _ID_MAX) or "",
            text=text("text", MESSAGE_MAX_CHARS) or "",
            sender=text("sender", _ID_MAX, required=False) or "",
            trust=text("trust", 20, required=False) or MEMBER,
            thread=text("thread", _ID_MAX, required=False),
            channel=text("channel", _ID_MAX, required=False) or "cli",
            session=session,
            timezone=text("timezone", 64, required=False),
        )


@dataclass
class TurnResult:
    """What the runner answers for a turn."""

    session: str
    replies: list[str] = field(default_factory=list)
    fresh_context: str | None = None  # the source, when this turn created a context
    compacted: bool = False
    duplicate: bool = False  # the turn id was already completed; replies as recorded
    # the first ``shown`` replies reached the chat during the turn (through the host:
    # send_message, an answer streamed in pieces); the host stores only the rest
    shown: int = 0
    cut: bool = False  # the turn's deadline cut its answer short

    def to_wire(self, turn_id: str) -> dict[str, Any]:
        return {
            "ok": True,
            "turn_id": turn_id,
            "session": self.session,
            "replies": self.replies,
            "fresh_context": self.fresh_context,
            "compacted": self.compacted,
            "duplicate": self.duplicate,
            "shown": self.shown,
            "cut": self.cut,
        }

    @classmethod
    def from_wire(cls, frame: dict[str, Any]) -> TurnResult:
        """The result in a runner's answer (``ok`` checked by the caller); BadFrame
        when its replies are not a list of text."""
        replies = frame.get("replies")
        if not isinstance(replies, list) or not all(isinstance(r, str) for r in replies):
            raise BadFrame("the runner's answer has no list of text replies")
        session = frame.get("session")
        fresh = frame.get("fresh_context")
        shown = frame.get("shown", 0)
        if isinstance(shown, bool) or not isinstance(shown, int) or not 0 <= shown <= len(replies):
            raise BadFrame("the runner's answer says a number of shown replies it does not have")
        return cls(
            session=session if isinstance(session, str) else "",
            replies=list(replies),
            fresh_context=fresh if isinstance(fresh, str) else None,
            compacted=frame.get("compacted") is True,
            duplicate=frame.get("duplicate") is True,
            shown=shown,
            cut=frame.get("cut") is True,
        )
