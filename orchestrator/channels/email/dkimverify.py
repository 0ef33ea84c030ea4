"""DKIM verification of an inbound mail's From: (dkimpy).

Anyone can write any From: line. DKIM lets the sender's domain sign the mail (the From:
header among what is signed) with a key it publishes in DNS; a valid signature whose
domain is the From: address's domain (or a parent of it: DMARC's relaxed alignment)
shows the mail came from that domain's servers. The domain vouches for its users (the
same trust DMARC gives it), so with verification on an account takes a mail only when
its From: is proven so. Signatures that cover only the start of the body (``l=``) are
not accepted: text appended after the signed part would pass as signed; nor are those
that leave a copy of a header they sign unsigned (a second Subject: above the signed
one would be the one read).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("orchestrator.channels.email")
# (name, timeout=...) -> the TXT record as bytes, or None; dkimpy's hook for DNS
TxtLookup = Callable[..., bytes | None]


@dataclass(frozen=True)
class DkimResult:
    verified: bool
    why: str  # for a log line: which domain signed, or why nothing counts


def aligned(signer: str, sender_domain: str) -> bool:
    """Whether a signature by ``signer`` speaks for addresses at ``sender_domain``."""
    signer, sender_domain = signer.lower().rstrip("."), sender_domain.lower().rstrip(".")
    return bool(signer) and (sender_domain == signer or sender_domain.endswith("." + signer))


def _unsigned_copy(headers: list[tuple[bytes, bytes]], signed: tuple[bytes, ...]) -> str | None:
    """A header the signature covers that the mail has more copies of than the signature
    lists, or None. DKIM signs the last copies (from the bottom); the mail is read from
    its first (read_mail), so an extra copy above them would be read unsigned."""
    names = [name.lower() for name in signed]
    counts: dict[bytes, int] = {}
    for name, _ in headers:
        counts[name.lower()] = counts.get(name.lower(), 0) + 1
    extra = next((name for name in names if counts.get(name, 0) > names.count(name)), None)
    return None if extra is None else extra.decode("ascii", "replace")


def verify_from(raw: bytes, sender: str, txt: TxtLookup | None = None) -> DkimResult:
    """Whether one of ``raw``'s DKIM signatures is valid, covers From: and the whole
    body, and is aligned with ``sender``'s domain. ``txt``: the DNS lookup (default:
    dkimpy's, through dnspython). Blocks while DNS answers: run it in a thread."""
    import dkim

    # what dkimpy raises for a mail or signature it cannot read: DKIMException, and on
    # some malformed ones IndexError (a folded line before any header) or ValueError
    # (binascii.Error: a bh= value that is not base64 past dkimpy's own check)
    unreadable = (dkim.DKIMException, IndexError, ValueError)
    domain = sender.rpartition("@")[2]
    if not domain:
        return DkimResult(False, "the From: address has no domain")
    try:
        checker = dkim.DKIM(raw, logger=log)
    except unreadable as exc:  # a header dkimpy cannot read
        return DkimResult(False, f"the mail cannot be read for DKIM: {exc}")
    count = sum(1 for name, _ in checker.headers if name.lower() == b"dkim-signature")
    if not count:
        return DkimResult(False, "the mail has no DKIM signature")
    reasons = []
    for index in range(count):
        try:
            valid = checker.verify(idx=index, dnsfunc=txt) if txt else checker.verify(idx=index)
        except unreadable as exc:
            reasons.append(f"signature {index + 1}: {exc}")
            continue
        signer = (checker.domain or b"").decode("ascii", "replace")
        fields = checker.signature_fields or {}
        if not valid:
            reasons.append(f"signature {index + 1} by {signer} does not verify")
        elif b"from" not in (checker.include_headers or ()):
            reasons.append(f"signature {index + 1} by {signer} does not cover From:")
        elif b"l" in fields:
            reasons.append(f"signature {index + 1} by {signer} covers part of the body only")
        elif unsigned := _unsigned_copy(checker.headers, checker.include_headers or ()):
            reasons.append(
                f"signature {index + 1} by {signer} leaves a {unsigned} header unsigned "
                "(the mail has more of them than it signs)"
            )
        elif not aligned(signer, domain):
            reasons.append(f"signature {index + 1} is by {signer}, not {domain}")
        else:
            return DkimResult(True, f"signed by {signer}")
    return DkimResult(False, "; ".join(reasons))
