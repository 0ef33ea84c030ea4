"""Mail threads: which conversation a mail belongs to, and the headers that keep a reply
in it.

A thread is a chain of Message-ID / In-Reply-To / References: its root is the first id
of References (the message that started it), else In-Reply-To, else the mail's own id.
A reply carries ``In-Reply-To: <the mail answered>`` and ``References:`` that mail's
references and its id (RFC 5322 section 3.6.4, the middle trimmed when long, as mail
clients do), its subject ``Re:`` the mail's, and a Message-ID made from the reply's
send key, so a reply sent twice carries the same id (RFC 5322: a receiving system may
drop the copy; the loop rules of the other side see it as one message).

What a reply needs of the mail it answers (its id, subject and references) travels as
the inbound message's platform id (``ReplyTarget.encode``), so it is in the queue's
database with the message and nothing else keeps it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from orchestrator.channels.email.reading import Mail, message_ids
from orchestrator.limits import EMAIL_REFERENCES_MAX, SENDER_ID_MAX_CHARS

_REPLY_PREFIX = re.compile(r"^\s*((re|aw|sv|antw|vs|ref)\s*(\[\d+\])?\s*:\s*)+", re.I)
SUBJECT_MAX_CHARS = 200  # of the subject a reply repeats
NO_SUBJECT = "Your message"


def thread_root(mail: Mail) -> str | None:
    """The id of the message that started ``mail``'s thread (its own when it starts
    one; None when it has no id at all)."""
    if mail.references:
        return mail.references[0]
    return mail.in_reply_to or mail.message_id


def thread_key(root: str | None) -> str | None:
    """A thread root as the turn's thread: the id itself, or a digest of one too long
    to be a thread id."""
    if root is None:
        return None
    if len(root) <= SENDER_ID_MAX_CHARS and root.isprintable():
        return root
    return "<sha256." + hashlib.sha256(root.encode()).hexdigest()[:40] + ">"


def reply_subject(subject: str) -> str:
    """``Re: subject``, without piling up prefixes (``Re: Re: AW:`` becomes one)."""
    bare = _REPLY_PREFIX.sub("", subject).strip()[:SUBJECT_MAX_CHARS]
    return f"Re: {bare or NO_SUBJECT}"


def reply_references(references: tuple[str, ...], answered: str | None) -> tuple[str, ...]:
    """References of a reply to a mail with ``references`` and id ``answered``: the
    chain and the mail's id, at most EMAIL_REFERENCES_MAX ids (the root and the newest
    kept, the middle dropped)."""
    chain = list(dict.fromkeys([*references, *([answered] if answered else [])]))
    if len(chain) > EMAIL_REFERENCES_MAX:
        chain = [chain[0], *chain[-(EMAIL_REFERENCES_MAX - 1) :]]
    return tuple(chain)


def message_id_for(key: str, piece: int, domain: str) -> str:
    """The Message-ID of one piece of a reply: the same for the same send key and
    piece, on every try."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", key).strip(".") or "reply"
    host = re.sub(r"[^A-Za-z0-9.-]", "-", domain).strip(".-") or "localhost"
    return f"<{safe}.{piece}@{host}>"


@dataclass(frozen=True)
class ReplyTarget:
    """What a reply needs of the mail it answers."""

    message_id: str | None
    subject: str
    references: tuple[str, ...]

    @classmethod
    def of(cls, mail: Mail) -> ReplyTarget:
        return cls(mail.message_id, mail.subject[:SUBJECT_MAX_CHARS], mail.references)

    def encode(self) -> str:
        """As the inbound message's platform id (compact JSON)."""
        refs = reply_references(self.references, None)
        data = {"id": self.message_id, "subject": self.subject, "refs": list(refs)}
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str | None) -> ReplyTarget | None:
        """A platform id back into a target; None for anything else (a bare id is
        taken as the id of the mail answered)."""
        if not text:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            ids = message_ids(text)
            return cls(ids[0], "", ()) if ids else None
        if not isinstance(data, dict):
            return None
        found = message_ids(str(data.get("id") or ""))
        refs = data.get("refs")
        return cls(
            found[0] if found else None,
            str(data.get("subject") or "")[:SUBJECT_MAX_CHARS],
            tuple(r for r in refs if isinstance(r, str)) if isinstance(refs, list) else (),
        )
