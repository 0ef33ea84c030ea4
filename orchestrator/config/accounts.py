"""Chat-app accounts (``channels`` in orchestrator.yaml) and the HTTP API's named tokens.

    channels:
      familybot:
        kind: telegram                     # a kind of account (config/kinds.py)
        token_env: TELEGRAM_FAMILY_TOKEN   # or token_secret: NAME (an entry of secrets_file)
        sender_rate: {messages: 20, per: 10m}   # per sender and group
        api_url: http://127.0.0.1:8081     # the kind's own settings (here Telegram's)
    http:
      tokens:
        rocketchat:
          token_env: ROCKETCHAT_BRIDGE_TOKEN
          senders: "rocketchat:"          # the only sender ids this token may name

A token is read on the host when the channel starts; it never enters a container, a
log line or a stored error (the log handlers redact every token they know of). A kind
may call its secret otherwise (an email account's ``password_env`` / ``password_secret``).

Sender ids are namespaced by the channel's kind: ``telegram:123456`` is that Telegram
user whichever bot sees them, and it is what a group's ``creators`` and ``members`` hold.
A channel produces ids under its own prefix only; an HTTP token names senders under its
own prefix only; only the operator's token (``http.token``) may name any sender.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.config.kinds import (
    NO_OPTIONS,
    KindOptions,
    account_kinds,
    prefix_owner,
)
from orchestrator.errors import OrchestratorError
from orchestrator.limits import (
    DEFAULT_SENDER_RATE_MESSAGES,
    DEFAULT_SENDER_RATE_SECONDS,
)
from orchestrator.secrets import SecretRef, parse_secret_ref

if TYPE_CHECKING:
    from orchestrator.validate import MappingReader

ACCOUNT_NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"
SENDER_PREFIX_PATTERN = r"[a-z][a-z0-9_-]{0,30}:"
COMMON_KEYS = ("kind", "sender_rate")  # and the kind's credential keys (token_env, ...)


def account_of_channel(channel: str) -> str | None:
    """The chat-app account whose messages carry ``channel`` ("telegram:familybot" ->
    "familybot"), or None for the daemon's other channels (cli, http, dashboard)."""
    kind, sep, name = channel.partition(":")
    return name if sep and kind in account_kinds() else None


@dataclass(frozen=True)
class ChannelAccount:
    name: str
    kind: str
    # where the account's secret comes from (a token; for some kinds a password, under
    # the kind's own keys in orchestrator.yaml: AccountKind.credential)
    token_env: str | None = None
    token_secret: str | None = None
    options: KindOptions = NO_OPTIONS  # the settings only its kind has
    rate_messages: int = DEFAULT_SENDER_RATE_MESSAGES
    rate_seconds: int = DEFAULT_SENDER_RATE_SECONDS

    @property
    def prefix(self) -> str:
        """The sender ids this account produces start with this."""
        return f"{self.kind}:"

    @property
    def channel(self) -> str:
        """The ``channel`` of the messages it queues."""
        return f"{self.kind}:{self.name}"

    @property
    def credential(self) -> str:
        """What its secret is called ("token", "password")."""
        kind = account_kinds().get(self.kind)
        return kind.credential if kind is not None else "token"

    @property
    def token(self) -> SecretRef:
        env_key, secret_key = f"{self.credential}_env", f"{self.credential}_secret"
        return SecretRef(self.token_env, self.token_secret, env_key, secret_key)

    def token_reference(self) -> str:
        return self.token.describe()

    def to_dict(self) -> dict[str, Any]:
        """For people and JSON: never the token, only where it comes from."""
        return {
            "name": self.name,
            "kind": self.kind,
            "credential": self.credential,
            "token": self.token_reference(),
            "sender_rate": {"messages": self.rate_messages, "per_seconds": self.rate_seconds},
            **self.options.to_dict(),
        }


@dataclass(frozen=True)
class HttpToken:
    """A named token of the HTTP API, allowed to name senders under one prefix."""

    name: str
    senders: str
    token_env: str | None = None
    token_secret: str | None = None

    @property
    def token(self) -> SecretRef:
        return SecretRef(self.token_env, self.token_secret, "token_env", "token_secret")

    def token_reference(self) -> str:
        return self.token.describe()


def _token_source(
    item: MappingReader, keys: tuple[str, str] = ("token_env", "token_secret")
) -> tuple[str | None, str | None]:
    ref = parse_secret_ref(item, *keys, required=True)
    return ref.env, ref.secret


def parse_channel_accounts(reader: MappingReader) -> dict[str, ChannelAccount]:
    """The ``channels`` mapping of orchestrator.yaml, validated: the keys every account
    has here, the rest by its kind."""
    from orchestrator.units import parse_duration

    kinds = account_kinds()
    out: dict[str, ChannelAccount] = {}
    for name in reader.data:
        if not isinstance(name, str) or not re.fullmatch(ACCOUNT_NAME_PATTERN, name):
            raise reader.fail(
                str(name),
                "channel account names are 1-40 of a-z, 0-9, '-' and '_', starting with a "
                "letter or digit",
            )
        item = reader.child(name)
        kind = kinds[item.choice("kind", tuple(kinds), item.raw("kind"))]
        item.reject_unknown([*COMMON_KEYS, *kind.credential_keys, *kind.keys])
        options = kind.parse(item)
        token_env, token_secret = _token_source(item, kind.credential_keys)
        messages, seconds = DEFAULT_SENDER_RATE_MESSAGES, DEFAULT_SENDER_RATE_SECONDS
        if "sender_rate" in item.data:
            rate = item.child("sender_rate")
            rate.reject_unknown(["messages", "per"])
            messages = rate.whole_number(
                "messages", DEFAULT_SENDER_RATE_MESSAGES, 1, 100_000, "1 to 100000"
            )
            per = parse_duration(rate.raw("per", DEFAULT_SENDER_RATE_SECONDS))
            if per is None or not 1 <= per <= 86_400:
                raise rate.fail(
                    "per", f"got {rate.data.get('per')!r}; expected a duration from 1s to 1d"
                )
            seconds = per
        out[name] = ChannelAccount(
            name, kind.name, token_env, token_secret, options, messages, seconds
        )
    return out


def parse_http_tokens(reader: MappingReader) -> dict[str, HttpToken]:
    """``http.tokens``: named tokens, each with the sender prefix it may name."""
    out: dict[str, HttpToken] = {}
    for name in reader.data:
        if not isinstance(name, str) or not re.fullmatch(ACCOUNT_NAME_PATTERN, name):
            raise reader.fail(
                str(name), "token names are 1-40 of a-z, 0-9, '-' and '_', starting with one"
            )
        item = reader.child(name)
        item.reject_unknown(["token_env", "token_secret", "senders"])
        token_env, token_secret = _token_source(item)
        senders = item.text("senders", max_chars=32)
        if not re.fullmatch(SENDER_PREFIX_PATTERN, senders):
            raise item.fail(
                "senders",
                f"got {senders!r}; expected a prefix such as 'rocketchat:' (lowercase, "
                "ending in ':')",
            )
        owner = prefix_owner(senders)
        if owner is not None:
            raise item.fail(
                "senders",
                f"{senders!r} belongs to {owner}, and a bridge's token may not name those "
                f"senders; rename the bridge's prefix, such as {bridge_prefix(senders)!r} "
                "(the bridge then sends ids under it, and group.yaml's creators and members "
                "name them so)",
            )
        out[name] = HttpToken(name, senders, token_env, token_secret)
    return out


def bridge_prefix(taken: str) -> str:
    """A prefix for a bridge in place of ``taken``, which a channel of the daemon owns:
    'slack:' -> 'slack-bridge:'."""
    base = taken.removesuffix(":")
    for candidate in (f"{base}-bridge:", f"bridge-{base}:"):
        if prefix_owner(candidate) is None and re.fullmatch(SENDER_PREFIX_PATTERN, candidate):
            return candidate
    return "bridge:"


def account_token(account: ChannelAccount, secrets_file: Path | None) -> str:
    return account.token.require(f"channel account {account.name!r}", secrets_file)


def http_tokens(
    tokens: Mapping[str, HttpToken], secrets_file: Path | None
) -> tuple[dict[str, HttpToken], list[str]]:
    """token value -> definition for the named tokens that can be found, and a line
    for each that cannot."""
    found: dict[str, HttpToken] = {}
    problems = []
    for definition in tokens.values():
        try:
            value = definition.token.require(f"HTTP token {definition.name!r}", secrets_file)
        except OrchestratorError as exc:
            problems.append(exc.message)
            continue
        if len(value) < 16:
            problems.append(f"HTTP token {definition.name!r} is shorter than 16 characters")
            continue
        found[value] = definition
    return found, problems
