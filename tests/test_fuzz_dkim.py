"""Fuzzing DKIM verification of inbound mail (orchestrator/channels/email/dkimverify.py):
anyone can send the account any bytes, signed or not. verify_from returns a DkimResult
for any of them, never raising (an exception skipped the mail with a traceback instead
of the reason), and a mail it verifies is one whose From: and whole body the sender's
domain signed: a signed mail changed in its From: or its body is not verified.
"""

from __future__ import annotations

import base64
from functools import cache

import dkim
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import example, given

from orchestrator.channels.email.dkimverify import DkimResult, verify_from
from orchestrator.channels.email.reading import read_mail
from tests.fuzzing import fuzz, mutated

SELECTOR, DOMAIN = b"s1", b"example.org"


@cache
def key() -> tuple[bytes, bytes]:
    """A private key (PEM) and its DNS TXT record."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem, b"v=DKIM1; k=rsa; p=" + base64.b64encode(public)


def txt(name: bytes, timeout: int = 5) -> bytes | None:
    return key()[1] if name == SELECTOR + b"._domainkey." + DOMAIN + b"." else None


TEXT = "See you at 8."
BODY = TEXT.encode() + b"\r\n"
PLAIN = (
    b"From: Alice <alice@example.org>\r\nTo: helper@example.net\r\nSubject: Plans\r\n"
    b"Message-ID: <m1@example.org>\r\n\r\n" + BODY
)


@cache
def signed(length: bool = False) -> bytes:
    """PLAIN signed by example.org (with ``length``: an l= tag, the body's length)."""
    signature: bytes = dkim.sign(
        PLAIN, SELECTOR, DOMAIN, key()[0], include_headers=[b"from", b"to", b"subject"],
        length=length,
    )  # fmt: skip
    return signature + PLAIN


SEEDS = [signed(), signed(length=True), PLAIN]


@fuzz(150)
@given(raw=mutated(SEEDS, max_edits=4))
@example(raw=b"DKIM-Signature: v=1; a=rsa-sha256; d=; s=\r\nFrom: a@b.org\r\n\r\nx")
@example(raw=b"DKIM-Signature: \xff\xfe\r\n\r\n")
@example(raw=b"DKIM-Signature: v=1; b=%%%; bh=***\r\nFrom: a@example.org\r\n\r\nx")
@example(raw=b"From: Boss <boss@example.org>\r\n" + signed()).via("a second From: first")
@example(raw=signed().replace(b"Subject: Plans\r\n", b"Subject: Plans\r\nFrom: b@example.org\r\n"))
def test_any_mail_is_judged_and_only_what_was_signed_verifies(raw: bytes) -> None:
    # as the adapter asks: for the From: address the turn would be from
    result = verify_from(raw, read_mail(raw).sender, txt)
    assert isinstance(result, DkimResult) and result.why
    if result.verified:  # what the turn reads of it is what was signed
        mail = read_mail(raw)
        assert (mail.sender, mail.subject, mail.text) == ("alice@example.org", "Plans", TEXT)


def test_the_seeds_are_judged_as_the_module_says() -> None:
    assert verify_from(signed(), "alice@example.org", txt).verified
    # l= signs the start of the body only: text appended after it would pass as signed
    partial = verify_from(signed(length=True), "alice@example.org", txt)
    assert not partial.verified and "covers part of the body only" in partial.why
    assert not verify_from(signed(), "mallory@example.net", txt).verified  # not aligned
