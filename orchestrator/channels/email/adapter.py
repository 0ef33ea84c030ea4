"""The email adapter: a mailbox read over IMAP (``mailbox``) and answered over SMTP
(``outbox``). The chat-app core does the rest (``orchestrator.channels.chatapp.core``).

Inbound: the account's folder is read by UID, IDLE keeping the connection open where the
server offers it (polled every ``poll_interval`` otherwise). Each new mail is read
(``reading``: HTML reduced to text, quoted history trimmed), checked against the loop
rules (``rules``: automatic mail, lists and bounces are never answered) and, with
``verify: dkim``, its From: against its DKIM signature (``dkimverify``); then it goes to
the core, its chat and sender being the From: address. The last UID handled is
committed (with the folder's UIDVALIDITY) only after that: a mail is queued with its
(UIDVALIDITY, UID) in the same transaction, so a crash reads it again and the queue
drops it, and a restart never answers a mail twice. The first start of an account only
notes where the folder ends: mail already there is not answered.

Files: a mail's attachments are stored under ``groups/<folder>/files/inbox/`` and
described to the core (an audio file is transcribed, an image shown to a model that
takes images, a PDF's text saved beside it); a file the agent sends is attached to a
reply mail.

Outbound: a reply is a mail threaded to the one it answers (``threads``, ``compose``):
``In-Reply-To``, ``References``, ``Re:`` its subject, a Message-ID made from the reply's
key, ``Auto-Submitted: auto-replied``. SMTP has no idempotency key, so a claimed reply
is never sent again (as for Telegram).

Pairing: an address that is not bound gets a code by mail, at most once per
EMAIL_PAIRING_ADDRESS_SECONDS, and an account sends at most EMAIL_PAIRING_PER_HOUR codes
in an hour: a flood of forged senders cannot make it mail strangers.
"""

from __future__ import annotations

import asyncio
import contextlib
import imaplib
import logging
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar, cast

from orchestrator.channels.chatapp.adapter import Attachment, OutgoingFile, Received, Refusal
from orchestrator.channels.chatapp.core import AdapterBase, Backoff, describe
from orchestrator.channels.chatapp.files import store_received
from orchestrator.channels.email import outbox
from orchestrator.channels.email.compose import Attached, reply_mail
from orchestrator.channels.email.dkimverify import TxtLookup, verify_from
from orchestrator.channels.email.kind import EmailOptions
from orchestrator.channels.email.mailbox import Fetched, Mailbox, Opened, tls_context
from orchestrator.channels.email.reading import Mail, read_mail
from orchestrator.channels.email.rules import automatic_reason
from orchestrator.channels.email.threads import ReplyTarget, thread_key, thread_root
from orchestrator.channels.textfmt import split_message
from orchestrator.config.accounts import account_token
from orchestrator.errors import DaemonStopping, OrchestratorError
from orchestrator.limits import (
    EMAIL_ATTACHMENTS_MAX,
    EMAIL_FETCH_MAX_BYTES,
    EMAIL_IDLE_SECONDS,
    EMAIL_PAIRING_ADDRESS_SECONDS,
    EMAIL_PAIRING_PER_HOUR,
    EMAIL_TEXT_MAX,
    FILE_UPLOAD_TIMEOUT_SECONDS,
    SENDER_ID_MAX_CHARS,
)
from orchestrator.store.chats import PENDING
from orchestrator.units import human_bytes

if TYPE_CHECKING:
    from orchestrator.channels.chatapp.core import ChatAccount

log = logging.getLogger("orchestrator.channels.email")
T = TypeVar("T")


@dataclass(frozen=True)
class Incoming:
    """A mail as the core passes it back to the adapter (``Received.raw``)."""

    mail: Mail
    fetched: Fetched


def turn_text(mail: Mail) -> str:
    """What the turn reads: the mail's new text, after its subject when it starts a
    thread (a command such as /clear stays first)."""
    text = mail.text.strip()
    starts = not mail.in_reply_to and not mail.references
    if mail.subject and starts and not text.startswith("/"):
        return f"Subject: {mail.subject}\n\n{text}".strip()
    return text


class EmailAdapter(AdapterBase):
    """One mailbox: its IMAP reader and its SMTP sends."""

    chat_word = "address"
    typing_every = 3600.0  # mail has no typing indicator
    # DKIM's DNS lookup (dkimpy's dnsfunc); None: dkimpy's own, through dnspython
    txt_lookup: ClassVar[TxtLookup | None] = None

    def __init__(self, core: ChatAccount) -> None:
        super().__init__(core)
        self.options = cast(EmailOptions, core.account.options)
        core.health.bot = self.options.address
        self.pool = ThreadPoolExecutor(1, thread_name_prefix=f"imap-{core.name}")
        self.mailbox: Mailbox | None = None
        self.opened: Opened | None = None
        self.password = ""
        self.context: ssl.SSLContext | None = None
        self.last_uid = 0

    @property
    def name(self) -> str:
        return self.core.name

    def line(self, text: str) -> str:
        return self.core.line(text)

    async def _imap(self, call: Callable[..., T], *args: object) -> T:
        """``call`` on the account's IMAP thread."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, call, *args)

    # life

    async def connect(self) -> str:
        """Log in to SMTP (and leave), then to IMAP, and find where to read from."""
        self.password = account_token(self.core.account, self.core.daemon.config.secrets_file)
        self.context = await asyncio.to_thread(tls_context, self.options.ca_file)
        await outbox.check_login(self.options.smtp, self.options.user, self.password, self.context)
        await self._open()
        return self.options.address

    async def _open(self) -> Opened:
        assert self.context is not None
        if self.mailbox is not None:
            await self._imap(self.mailbox.close)
        options = self.options
        self.mailbox = Mailbox(
            options.imap, options.user, self.password, options.folder, self.context
        )
        opened = await self._imap(self.mailbox.open)
        self.opened = opened
        stored = await asyncio.to_thread(self.core.chats.get_state, self.name, "uid")
        validity, _, uid = (stored or "").partition(":")
        if stored and validity == str(opened.uidvalidity) and uid.isdigit():
            self.last_uid = int(uid)
        else:
            if stored:
                log.warning(
                    self.line(
                        "folder %s was made anew (its UIDVALIDITY changed): the mail in it "
                        "now is not answered, new mail is"
                    ),
                    options.folder,
                )
            self.last_uid = opened.uidnext - 1
            await self._commit(self.last_uid)
        if not opened.idle:
            log.info(
                self.line("the IMAP server offers no IDLE; %s is read every %ds"),
                options.folder,
                options.poll_interval,
            )
        return opened

    async def _commit(self, uid: int) -> None:
        assert self.opened is not None
        value = f"{self.opened.uidvalidity}:{uid}"
        await asyncio.to_thread(self.core.chats.set_state, self.name, "uid", value)

    async def close(self) -> None:
        mailbox = self.mailbox
        if mailbox is not None:
            mailbox.interrupt()  # a blocked IDLE ends now
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._imap(mailbox.close), timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)

    # inbound

    async def receive(self) -> None:
        core = self.core
        backoff = Backoff()
        while True:
            try:
                if self.mailbox is None or self.mailbox.client is None:
                    await self._open()
                read = await self._read_new(backoff)
                if read is None:
                    continue  # the queue could not take a mail: read it again
                backoff.reset()
                core.polled()
                await asyncio.to_thread(core.save_health)
                if read:
                    # a mail that came while these were handled was announced in the
                    # answers to their commands, never again in an IDLE: search first
                    continue
                await self._wait()
            except asyncio.CancelledError:
                raise
            except DaemonStopping:
                return  # not committed: read again at the next start
            except (imaplib.IMAP4.error, OSError, OrchestratorError) as exc:
                if self.mailbox is not None:
                    await self._imap(self.mailbox.close)
                await core.read_failed("reading mail", describe(exc), backoff)

    async def _wait(self) -> None:
        """Until new mail may be there: IDLE where offered, else the poll interval."""
        assert self.mailbox is not None and self.opened is not None
        if self.opened.idle:
            await self._imap(self.mailbox.wait, EMAIL_IDLE_SECONDS)
        else:
            await asyncio.sleep(self.options.poll_interval)
            await self._imap(self.mailbox.noop)

    async def _read_new(self, backoff: Backoff) -> int | None:
        """Handle each mail above the last UID handled, committing each: how many there
        were, or None when the queue could not take one (it is read again)."""
        mailbox = self.mailbox
        assert mailbox is not None
        uids = await self._imap(mailbox.new_uids, self.last_uid)
        for uid in uids:
            fetched = await self._imap(mailbox.fetch, uid)
            if fetched is not None:
                try:
                    await self.handle(fetched)
                except (asyncio.CancelledError, DaemonStopping):
                    raise
                except OrchestratorError as exc:
                    await self.core.not_queued(f"mail {uid}", exc, backoff)
                    return None
                except Exception:
                    log.exception(self.line("mail %d could not be handled; skipped"), uid)
                with contextlib.suppress(imaplib.IMAP4.error):
                    await self._imap(mailbox.mark_seen, uid)
            self.last_uid = uid
            await self._commit(uid)
        return len(uids)

    async def handle(self, fetched: Fetched) -> None:
        """One mail: dropped by the loop rules (or DKIM), else to the core."""
        assert self.opened is not None
        mail = read_mail(fetched.raw)
        uid = fetched.uid
        if mail.sender == self.options.address:
            log.debug(self.line("mail %d is from this account itself; ignored"), uid)
            return
        reason = automatic_reason(mail)
        if reason is not None:
            log.info(
                self.line("mail %d from %s is automatic (%s): no turn, no answer"),
                uid,
                mail.sender or "nobody",
                reason,
            )
            return
        if self.options.verify == "dkim":
            result = await asyncio.to_thread(verify_from, fetched.raw, mail.sender, self.txt_lookup)
            if not result.verified:
                log.info(
                    self.line("mail %d claims to be from %s, unproven (%s): no turn, no answer"),
                    uid,
                    mail.sender,
                    result.why,
                )
                return
        chat = mail.sender
        if len(chat) > SENDER_ID_MAX_CHARS or not chat.isprintable():
            log.warning(self.line("mail %d: the address %r is too long; ignored"), uid, chat[:80])
            return
        bound = await asyncio.to_thread(self.core.chats.binding, self.name, chat)
        if bound is None and not await self._may_pair(chat):
            return
        await self.core.route(
            Received(
                chat=chat,
                sender=chat,
                text=turn_text(mail),
                message_id=ReplyTarget.of(mail).encode(),
                event_id=f"{self.opened.uidvalidity}.{uid}",
                thread=thread_key(thread_root(mail)),
                group_chat=False,
                title=mail.sender_name or mail.subject or None,
                raw=Incoming(mail, fetched),
            )
        )

    async def _may_pair(self, chat: str) -> bool:
        """Whether an unbound address may be mailed a pairing code now: one that has a
        live code is not mailed again anyway; otherwise at most one code per address
        per EMAIL_PAIRING_ADDRESS_SECONDS, and EMAIL_PAIRING_PER_HOUR per account."""
        now = time.time()
        mine = [
            p
            for p in await asyncio.to_thread(self.core.chats.pairings, everything=True)
            if p.account == self.name
        ]
        if any(p.chat == chat and p.state == PENDING and p.expires > now for p in mine):
            return True
        if any(p.chat == chat and p.created > now - EMAIL_PAIRING_ADDRESS_SECONDS for p in mine):
            log.info(
                self.line("%s is not bound and was mailed a code recently; no code again"), chat
            )
            return False
        if sum(p.created > now - 3600 for p in mine) >= EMAIL_PAIRING_PER_HOUR:
            log.warning(
                self.line(
                    "%s is not bound; %d pairing codes were mailed in the last hour, the most "
                    "an account sends: it gets none"
                ),
                chat,
                EMAIL_PAIRING_PER_HOUR,
            )
            return False
        return True

    def addressed(self, received: Received) -> bool:
        return True  # a mail is written to the account

    def mention_forms(self, received: Received) -> tuple[str, ...]:
        return ()

    async def attachment(self, received: Received, group: str) -> Attachment:
        """Store the mail's files in the group's files/inbox and describe them (an audio
        file as audio, which the core transcribes); a Refusal (a mail or a file over its
        limit, too many files), or None when it has none."""
        incoming = cast(Incoming, received.raw)
        if not incoming.fetched.whole:
            return Refusal(
                f"Sorry, your mail is {human_bytes(incoming.fetched.size)}; I read mails up "
                f"to {human_bytes(EMAIL_FETCH_MAX_BYTES)}."
            )
        files = incoming.mail.attachments
        if not files:
            return None
        limit = self.options.attachments_max_bytes
        if len(files) > EMAIL_ATTACHMENTS_MAX:
            return Refusal(
                f"Sorry, your mail has {len(files)} files; I take at most "
                f"{EMAIL_ATTACHMENTS_MAX} per mail."
            )
        largest = max(len(f.data) for f in files)
        if largest > limit or not limit:  # 0 takes no file, not even an empty one
            return Refusal(
                f"Sorry, a file of your mail is {human_bytes(largest)}; I take files up to "
                f"{human_bytes(limit)}."
                if limit
                else "Sorry, I do not take files here."
            )
        root = self.core.daemon.runtime.store.root
        return [
            await asyncio.to_thread(
                store_received,
                root,
                group,
                item.data,
                original=item.filename,
                mime=item.mime,
                label="file",
            )
            for item in files
        ]

    # outbound

    async def send(
        self, chat: str, thread: str | None, reply_to: str | None, text: str, key: str
    ) -> list[str]:
        """Mail ``text`` to ``chat`` (in pieces when long), threaded to the mail
        ``reply_to`` names; the Message-IDs sent."""
        assert self.context is not None
        target = ReplyTarget.decode(reply_to)
        pieces = split_message(text, EMAIL_TEXT_MAX)
        mails = [
            reply_mail(
                sender=self.options.address,
                to=chat,
                text=piece,
                target=target,
                thread=thread,
                key=key,
                piece=index,
                pieces=len(pieces),
            )
            for index, piece in enumerate(pieces)
        ]
        options = self.options
        return await outbox.send_mails(
            options.smtp, options.user, self.password, self.context, mails
        )

    async def send_file(
        self, chat: str, thread: str | None, reply_to: str | None, file: OutgoingFile, key: str
    ) -> list[str]:
        """A reply mail with the file attached, threaded to the mail ``reply_to`` names
        and with its Message-ID made from ``key``, as a text reply's; the caption as its
        text (or a line naming the file). Sent at most once, as text. Its Message-ID."""
        assert self.context is not None
        data = await asyncio.to_thread(file.path.read_bytes)
        text = file.caption.strip() or f"{file.name} ({human_bytes(file.size)}) is attached."
        mail = reply_mail(
            sender=self.options.address,
            to=chat,
            text=text,
            target=ReplyTarget.decode(reply_to),
            thread=thread,
            key=key,
            piece=0,
            pieces=1,
            files=(Attached(file.name, file.mime, data),),
        )
        options = self.options
        return await outbox.send_mails(
            options.smtp,
            options.user,
            self.password,
            self.context,
            [mail],
            timeout=FILE_UPLOAD_TIMEOUT_SECONDS,
        )

    def classify(self, exc: BaseException) -> str:
        return outbox.classify(exc)
