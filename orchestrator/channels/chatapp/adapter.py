"""What a chat app supplies to the core: an adapter.

The core (``core.ChatAccount``) owns everything chat apps share: routing (binding,
pairing, activation, the sender's rate, the size, the daemon, the error notice), the
bot's mention taken off the turn's text, the outbound state machine (wake, sweep, claim,
send, finish or release, the dead-letter notice), typing and health. The adapter only
speaks its app's protocol: it logs in, receives (handing each message to
``core.route`` as a ``Received``), sends, shows typing, says whether a message
addresses the bot and how the bot is mentioned, and classifies a send failure by the
exception's type.

Files in: ``attachment`` stores the message's file (``chatapp.files.store_received``)
and describes it as a ``StoredFile``; the core transcribes voice and audio, extracts a
PDF's text, shows images to a model that takes them and writes the lines the turn
carries. (A plain line, the older form, is still taken as it is.) Files out:
``send_file`` sends a file the agent sent (``send_file``), copied by the host into its
outbox, with the same key on every try; the default says in the chat that the app
cannot take files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestrator.media.inbox import StoredFile
from orchestrator.store.chats import FAILED, UNKNOWN

__all__ = ["OUTCOMES", "RETRY", "ChatAdapter", "OutgoingFile", "Received", "Refusal", "StoredFile"]

# how a send that raised ended (``ChatAdapter.classify``)
RETRY = "retry"  # it surely did not arrive (the connection was refused): send it later
OUTCOMES = (FAILED, UNKNOWN, RETRY)  # FAILED: refused; UNKNOWN: it may have arrived


@dataclass(frozen=True)
class Received:
    """One message an adapter received, in the core's terms."""

    chat: str
    sender: str  # the app's id of the person, without the kind's prefix
    text: str
    message_id: str  # the app's id of the message (replies are threaded to it)
    event_id: str  # the id the inbound record keys on (a retried read is dropped)
    thread: str | None = None
    group_chat: bool = False  # more than two people: the binding's activation applies
    title: str | None = None  # the chat's name, for pairing requests
    raw: Any = None  # the app's own object, for the adapter's own questions


@dataclass(frozen=True)
class Refusal:
    """A message the adapter will not pass on, and what the chat is told."""

    text: str


# What ``attachment`` answers where ``attachments_max_bytes`` is 0: no file is taken,
# not even an empty one, and none is downloaded to find its size.
NO_FILES = Refusal("Sorry, I do not take files here.")

# What ``attachment`` answers: the file(s) stored, the line of the older form, a
# refusal, or None when the message has no file.
Attachment = StoredFile | Sequence[StoredFile] | str | Refusal | None


@dataclass(frozen=True)
class OutgoingFile:
    """A file the agent sent, as the host copied it into its outbox: ``path`` is the
    host's copy (the container cannot change it), ``name`` the file's name for people,
    ``kind`` one of ``orchestrator.media.inbox.KINDS``; ``caption`` the words that go
    with it (may be empty)."""

    path: Path
    name: str
    mime: str
    size: int
    kind: str
    caption: str = ""


class ChatAdapter(Protocol):
    """One account's link to its chat app; made with the account's core (``core``'s
    ``AdapterBase`` holds it, with defaults an adapter may keep)."""

    chat_word: str  # what the app calls a chat ("chat", "room")
    # whether a send repeated with the same key posts once (Matrix's transaction ids):
    # then a reply claimed but not confirmed at a crash is sent again, else never
    resends_safely: bool
    # how long after the first try the app still drops a repeat (Discord remembers a
    # nonce for minutes); None: for ever. A claim older than this is not sent again.
    resend_window: float | None
    typing_every: float  # seconds between typing refreshes

    async def connect(self) -> str:
        """Log in (raise when it fails: the core tries again with backoff); the bot's
        name, for people."""

    async def receive(self) -> None:
        """Read messages until cancelled, passing each to ``core.route``; a read is
        committed only after its messages are queued."""

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        """Send ``text`` (in pieces when the app needs that), the first threaded to
        ``reply_to``; ``key`` is the same on every try of one reply. The app's ids of
        what was sent; raise when it was not."""

    async def typing(self, chat: str, thread: str | None, on: bool) -> None: ...

    def classify(self, exc: BaseException) -> str:
        """How a send that raised ``exc`` ended: FAILED, UNKNOWN or RETRY."""

    def addressed(self, received: Received) -> bool:
        """Whether a group-chat message mentions the bot or replies to it."""

    def mention_forms(self, received: Received) -> tuple[str, ...]:
        """How the bot is mentioned in ``received``'s chat (``@helperbot``; a Matrix
        user id or display name): taken off the front of a turn's text."""

    def may_send(self, chat: str) -> bool:
        """Whether replies may be sent into ``chat`` (never in clear into a room the
        app encrypts)."""

    async def attachment(self, received: Received, group: str) -> Attachment:
        """Store the message's file(s) for ``group`` and describe each as a StoredFile
        (the core writes the turn's lines); a Refusal (told in the chat, no turn), or
        None when it has none. A line (str) is taken as it is."""

    async def send_file(
        self, chat: str, thread: str | None, reply_to: str | None, file: OutgoingFile, key: str
    ) -> list[str]:
        """Send ``file`` (with its caption), threaded to ``reply_to``; ``key`` is the
        same on every try. The app's ids of what was sent; raise when it was not
        (``classify`` says how it ended). The default (``AdapterBase``) sends a line
        saying the app cannot take files."""

    async def close(self) -> None: ...
