"""Kinds of chat-app accounts, each described by its own module.

A chat app registers one ``AccountKind``: the settings of its accounts in
orchestrator.yaml (their keys, their parser and their ``channel add`` options), what
its one secret is called (a bot's token, a mailbox's password), the sender-id prefix it
owns (which no HTTP token may name) and whether the app proves who sent a message, the
client loggers to keep quiet (their URLs may hold a token), advice for doctor, and the
module of its adapter.
The configuration, the command line and the log setup read kinds from here; none of
them names a kind.

Kinds are found in three places: a subpackage of ``orchestrator.channels`` with a
``kind`` module (the built-in ones), the ``orchestrator.account_kinds`` entry-point
group (a kind installed as a package of its own), and ``register_kind`` (tests).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import pkgutil
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from orchestrator.errors import InvalidConfig
from orchestrator.limits import FILE_SEND_MAX_BYTES

if TYPE_CHECKING:
    from orchestrator.secrets import SecretRef
    from orchestrator.validate import MappingReader

log = logging.getLogger("orchestrator.config")
ENTRY_POINT_GROUP = "orchestrator.account_kinds"
BUILT_IN_PACKAGE = "orchestrator.channels"  # its subpackages with a ``kind`` module
KIND_NAME_PATTERN = r"[a-z][a-z0-9_]{0,19}"
# Sender prefixes that belong to the daemon itself (the operator, the scheduler, the
# command line), beside each kind's own.
HOST_PREFIXES = ("operator", "task:", "cli:")


@dataclass(frozen=True)
class KindOptions:
    """The settings of one account that only its kind has; a kind subclasses it (a
    frozen dataclass, so accounts compare and hash by value)."""

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def secrets(self) -> tuple[SecretRef, ...]:
        """Secrets its settings name beside the account's own credential (Slack's
        app-level token): doctor checks each can be found."""
        return ()

    @property
    def default_trust(self) -> str:
        """The trust ``bind`` and ``pair`` give a chat of the account unless told
        otherwise (a kind whose senders are not proven says guest)."""
        return "member"


@dataclass(frozen=True)
class NoOptions(KindOptions):
    pass


NO_OPTIONS = NoOptions()


@dataclass(frozen=True)
class KindOption:
    """One setting of a kind: its key in orchestrator.yaml and its ``channel add`` flag
    (``--api-url`` for the key ``api_url``)."""

    key: str
    metavar: str
    help: str
    multiple: bool = False  # a list; the flag may be repeated
    required: bool = False  # ``channel add`` refuses an account without it
    cli_flag: str = ""  # the flag, when not the key's own (--api-url for api_url)

    @property
    def flag(self) -> str:
        return self.cli_flag or "--" + self.key.replace("_", "-")


@dataclass(frozen=True)
class Advice:
    """What doctor says of an account that runs but is not set up as it should be."""

    text: str
    hint: str


@dataclass(frozen=True)
class AccountKind:
    name: str  # the ``kind`` in orchestrator.yaml; the sender prefix is ``name:``
    title: str  # the app's name for people ("Telegram")
    summary: str  # one line for ``channel add --help``: what an account needs
    options: tuple[KindOption, ...]
    parse: Callable[[MappingReader], KindOptions]  # the kind's own keys of one account
    adapter: str  # "module:Class" of its chat adapter
    loggers: tuple[str, ...] = ()  # client libraries' loggers that may log a token
    # doctor's advice from the health the account last recorded and its bound chats
    advice: Callable[[Mapping[str, Any], Sequence[str]], Advice | None] | None = None
    example: str = ""  # a ``channel add`` line for help texts
    # what the account's one secret is: its keys in orchestrator.yaml are ``<word>_env``
    # and ``<word>_secret``, its ``channel add`` flags ``--<word>-env``/``--<word>-secret``
    credential: str = "token"
    # whether the app proves who sent a message (an email's From: line can be forged):
    # the senders of a kind that does not are never creators
    proves_senders: bool = True
    # the largest file the agent may send to a chat of this app (send_file); what the
    # host copies into its outbox is capped by it (the adapter may refuse less at send)
    files_out_max_bytes: int = FILE_SEND_MAX_BYTES

    @property
    def prefix(self) -> str:
        """Every sender id an account of this kind produces starts with this."""
        return f"{self.name}:"

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(o.key for o in self.options)

    @property
    def credential_keys(self) -> tuple[str, str]:
        """The orchestrator.yaml keys naming where the secret comes from."""
        return f"{self.credential}_env", f"{self.credential}_secret"


_lock = threading.Lock()
_found: dict[str, AccountKind] | None = None
_registered: dict[str, AccountKind] = {}
_merged: dict[str, AccountKind] | None = None  # found and registered, sorted


def register_kind(kind: AccountKind) -> None:
    """Add ``kind`` (replacing one of that name that was registered)."""
    if not re.fullmatch(KIND_NAME_PATTERN, kind.name):
        raise ValueError(f"kind name {kind.name!r} must match {KIND_NAME_PATTERN}")
    global _merged
    with _lock:
        _registered[kind.name] = kind
        _merged = None


def unregister_kind(name: str) -> None:
    global _merged
    with _lock:
        _registered.pop(name, None)
        _merged = None


def _discover() -> dict[str, AccountKind]:
    # Found by name, as plug-ins are: the kinds' modules import this one, not the reverse.
    spec = importlib.util.find_spec(BUILT_IN_PACKAGE)
    places = list(spec.submodule_search_locations or []) if spec else []
    found: dict[str, AccountKind] = {}
    for module in sorted(pkgutil.iter_modules(places), key=lambda m: m.name):
        # a kind module is looked for as a file: asking importlib would import each
        # subpackage first (the chat-app core's brings the daemon with it)
        folder = getattr(module.module_finder, "path", None)
        if not module.ispkg or folder is None:
            continue
        if not os.path.isfile(os.path.join(folder, module.name, "kind.py")):
            continue
        kind = importlib.import_module(f"{BUILT_IN_PACKAGE}.{module.name}.kind").KIND
        found[kind.name] = kind
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            kind = point.load()
        except Exception as exc:
            log.warning(
                "account kind %s (%s) could not be loaded: %s", point.name, point.value, exc
            )
            continue
        if isinstance(kind, AccountKind) and kind.name not in found:
            found[kind.name] = kind
    return found


def account_kinds() -> dict[str, AccountKind]:
    """Every kind, by name, in name order (a copy: the caller may change it)."""
    global _found, _merged
    with _lock:
        if _found is None:
            _found = _discover()
        if _merged is None:
            _merged = dict(sorted({**_found, **_registered}.items()))
        return dict(_merged)


def account_kind(name: str) -> AccountKind:
    kinds = account_kinds()
    if name not in kinds:
        raise InvalidConfig(
            f"unknown channel kind {name!r}; valid kinds: {', '.join(kinds) or 'none'}"
        )
    return kinds[name]


def reserved_prefixes() -> tuple[str, ...]:
    """Sender prefixes no HTTP token but the operator's may name."""
    return (*(k.prefix for k in account_kinds().values()), *HOST_PREFIXES)


def prefix_owner(prefix: str) -> str | None:
    """Who owns a sender prefix that collides with ``prefix`` (one starts with the
    other), for people: "a channel of the daemon's own (its Slack accounts)", "the
    daemon itself"; None when nothing does."""
    for kind in account_kinds().values():
        if prefix.startswith(kind.prefix) or kind.prefix.startswith(prefix):
            return f"a channel of the daemon's own (its {kind.title} accounts, kind {kind.name})"
    if any(prefix.startswith(p) or p.startswith(prefix) for p in HOST_PREFIXES):
        return "the daemon itself (the operator, scheduled tasks, the command line)"
    return None


def unproven_sender(sender: str) -> AccountKind | None:
    """The kind of ``sender`` when that kind cannot prove who sent a message (such a
    sender is never a creator), else None."""
    for kind in account_kinds().values():
        if not kind.proves_senders and sender.startswith(kind.prefix):
            return kind
    return None


def kind_loggers() -> tuple[str, ...]:
    return tuple(name for k in account_kinds().values() for name in k.loggers)
