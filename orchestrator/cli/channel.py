"""``orchestrator channel``, ``bind``, ``unbind`` and ``pair``: chat-app accounts and which
group each of their chats talks to."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table, safe_line
from orchestrator.config import load_config
from orchestrator.units import human_seconds

if TYPE_CHECKING:
    from orchestrator.config.accounts import ChannelAccount

pass_cli = click.make_pass_decorator(CliContext)
ACTIVATION_HELP = (
    "In group chats: mention (only messages that mention the bot or reply to it start a "
    "turn) or always (every message)."
)
TRUST_HELP = (
    "What the chat's people are in the group: member or guest (creators are named one by "
    "one in group.yaml). Default: member; guest for an account that cannot prove who "
    "wrote (an email account without DKIM verification)."
)


def binding_options(command: Any) -> Any:
    """--activation and --trust, as `bind` and `pair` take them."""
    command = click.option(
        "--trust",
        type=click.Choice(["member", "guest"]),
        default=None,
        help=TRUST_HELP,
    )(command)
    return click.option(
        "--activation",
        type=click.Choice(["mention", "always"]),
        default="mention",
        show_default=True,
        help=ACTIVATION_HELP,
    )(command)


def _chats(obj: CliContext) -> Any:
    from orchestrator.store.chats import ChatStore
    from orchestrator.store.messages import open_queue

    obj.home.ensure_writable()
    return ChatStore(open_queue(obj.home))


def _reload_if_running(obj: CliContext) -> str:
    """Ask a running daemon to read orchestrator.yaml again; a line saying what happened."""
    from orchestrator.errors import OrchestratorError
    from orchestrator.service.client import control_request, daemon_running

    if not daemon_running(obj.home):
        return "it takes effect when the daemon starts (orchestrator up)"
    try:
        answer = control_request(obj.home, {"op": "reload"}, timeout=30)
    except OrchestratorError as exc:
        return f"the running daemon did not reload ({exc.message}); run: orchestrator reload"
    if not answer.get("ok"):
        return f"the running daemon did not reload: {answer.get('error')}"
    return "the running daemon reloaded"


def _kinds() -> dict[str, Any]:
    from orchestrator.config.kinds import account_kinds

    return account_kinds()


def _channel_help() -> str:
    examples = "\n".join(f"  {k.example}" for k in _kinds().values() if k.example)
    return (
        "Chat-app accounts (a Telegram bot, a Matrix user, ...) through which people reach "
        "groups.\n\n"
        "An account is defined in orchestrator.yaml; its token stays on the host (in the "
        "daemon's environment or the secrets file) and never reaches a container or a log. "
        "Each chat of an account is bound to one group: `orchestrator bind`, or approve the "
        "pairing code an unbound chat is given with `orchestrator pair CODE GROUP`.\n\n"
        "\b\nExamples:\n"
        f"{examples}\n"
        "  orchestrator pair --list\n"
        "  orchestrator pair K7QM-2XPR family\n"
        "  orchestrator bind family familybot:-1001234567890 --activation mention\n"
    )


@click.group(help=_channel_help())
def channel() -> None:
    pass


def _kind_options(command: Any) -> Any:
    """Each kind's own settings as options of `channel add` (a flag two kinds share is
    one option)."""
    seen: dict[str, Any] = {}
    for kind in _kinds().values():
        for option in kind.options:
            seen.setdefault(option.flag, option)
    for flag, option in reversed(list(seen.items())):
        command = click.option(
            flag,
            option.key,
            multiple=option.multiple,
            default=None,
            metavar=option.metavar,
            help=option.help,
        )(command)
    return command


def _add_help() -> str:
    kinds = "\n\n".join(k.summary for k in _kinds().values())
    return (
        "Define channel account NAME of KIND in orchestrator.yaml (comments and order are "
        "kept); a running daemon starts it at once.\n\n" + kinds
    )


def _credential_options(command: Any) -> Any:
    """``--WORD-env`` and ``--WORD-secret`` for what each kind's secret is called
    (``--token-env`` for a bot's token, ``--password-env`` for a mailbox's password)."""
    words: dict[str, list[str]] = {}
    for kind in _kinds().values():
        words.setdefault(kind.credential, []).append(kind.title)
    words.setdefault("token", [])
    for word in sorted(words, key=lambda w: (w != "token", w), reverse=True):
        whose = "Read" if word == "token" else f"{' and '.join(words[word])}: read"
        shown = "bot token" if word == "token" else word.replace("_", " ")
        command = click.option(
            f"--{word.replace('_', '-')}-secret",
            f"{word}_secret",
            default=None,
            metavar="NAME",
            help=f"{whose} the {shown} from entry NAME of the secrets file (secrets_file "
            "in orchestrator.yaml; mode 0600).",
        )(command)
        command = click.option(
            f"--{word.replace('_', '-')}-env",
            f"{word}_env",
            default=None,
            metavar="VAR",
            help=f"{whose} the {shown} from $VAR.",
        )(command)
    return command


@channel.command("add", help=_add_help())
@click.argument("kind", type=click.Choice(sorted(_kinds())))
@click.argument("name")
@_credential_options
@_kind_options
@click.option("--replace", is_flag=True, help="Replace an account of that name.")
@pass_cli
def add(
    obj: CliContext,
    /,
    kind: str,
    name: str,
    replace: bool,
    **settings: Any,
) -> None:
    from orchestrator.config.edit import edit_config
    from orchestrator.errors import BadInput

    account_kind = _kinds()[kind]
    word = account_kind.credential
    article = "an" if kind[:1] in "aeiou" else "a"  # an email account, a matrix account
    env_key, secret_key = account_kind.credential_keys
    credentials = {k2.credential for k2 in _kinds().values()} | {"token"}
    secret_keys = {f"{w}_{end}" for w in credentials for end in ("env", "secret")}
    named = {k: v for k, v in settings.items() if k in secret_keys and v}
    settings = {k: v for k, v in settings.items() if k not in secret_keys}
    stray = [k for k in named if k not in (env_key, secret_key)]
    if stray:
        raise BadInput(
            f"{', '.join('--' + k.replace('_', '-') for k in stray)}: {article} {kind} account's "
            f"secret is its {word}",
            hint=f"give --{word.replace('_', '-')}-env VAR or "
            f"--{word.replace('_', '-')}-secret NAME",
        )
    token_env, token_secret = named.get(env_key), named.get(secret_key)
    given = {k: v for k, v in settings.items() if v not in (None, ())}
    own = {o.key: o for o in account_kind.options}
    foreign = [k for k in given if k not in own]
    if foreign:
        flags = [o.flag for k2 in _kinds().values() for o in k2.options if o.key in foreign]
        owners = sorted(
            {k2.name for k2 in _kinds().values() for o in k2.options if o.key in foreign}
        )
        raise BadInput(
            f"{', '.join(dict.fromkeys(flags))} {'is' if len(foreign) == 1 else 'are'} for "
            f"{' and '.join(owners)} accounts, not {kind}",
            hint="see: orchestrator channel add --help",
        )
    missing = [o for o in account_kind.options if o.required and o.key not in given]
    if missing:
        raise BadInput(
            f"{article} {kind} account needs "
            + " and ".join(f"{o.flag} {o.metavar}" for o in missing),
            # the example on one line: a hint's newlines would be shown escaped
            hint=account_kind.example
            and "such as: " + " ".join(account_kind.example.replace("\\\n", " ").split()),
        )
    if bool(token_env) == bool(token_secret):
        flag = word.replace("_", "-")
        raise BadInput(
            f"give --{flag}-env VAR or --{flag}-secret NAME (one of them)",
            hint=f"keep the {word.replace('_', ' ')} in the daemon's environment or the "
            "secrets file",
        )
    entry: dict[str, object] = {"kind": kind}
    if token_env:
        entry[env_key] = token_env
    if token_secret:
        entry[secret_key] = token_secret
    for key, value in given.items():
        entry[key] = list(value) if own[key].multiple else value

    def change(data: dict[str, object]) -> None:
        channels = data.setdefault("channels", {})
        if not isinstance(channels, dict):
            raise BadInput("channels in orchestrator.yaml is not a mapping")
        if name in channels and not replace:
            raise BadInput(
                f"a channel account named {name!r} exists", hint="pass --replace to replace it"
            )
        channels[name] = entry

    config = edit_config(obj.home, change)
    account = config.channel_accounts[name]
    click.echo(
        f"channel account {name} ({kind}, {word}: {account.token_reference()}); "
        f"{_reload_if_running(obj)}"
    )


@channel.command("remove")
@click.argument("name")
@click.option("--unbind", is_flag=True, help="Also remove the bindings of its chats.")
@pass_cli
def remove(obj: CliContext, name: str, unbind: bool) -> None:
    """Remove channel account NAME; refused while chats are bound to it (unless --unbind)."""
    from orchestrator.config.edit import edit_config
    from orchestrator.errors import BadInput

    chats = _chats(obj)
    bound = chats.bindings(account=name)
    if bound and not unbind:
        raise BadInput(
            f"1 chat of {name!r} is bound to a group"
            if len(bound) == 1
            else f"{len(bound)} chats of {name!r} are bound to groups",
            hint="pass --unbind to remove them too (orchestrator channel list shows them)",
        )

    def change(data: dict[str, object]) -> None:
        channels = data.get("channels")
        if not isinstance(channels, dict) or name not in channels:
            raise BadInput(
                f"no channel account named {name!r}", hint="see: orchestrator channel list"
            )
        del channels[name]
        if not channels:
            del data["channels"]

    edit_config(obj.home, change)
    for binding in bound:
        chats.unbind(binding.account, binding.chat)
    chats.queue.close()
    click.echo(f"removed channel account {name}; {_reload_if_running(obj)}")


@channel.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def list_(obj: CliContext, as_json: bool) -> None:
    """Channel accounts: kind, where its token or password comes from (never the secret),
    health as the daemon last recorded it, and the chats bound to groups."""
    config = load_config(obj.home)
    chats = _chats(obj)
    try:
        rows = [
            {
                **account.to_dict(),
                "health": chats.health(account.name),
                "bindings": [b.to_dict() for b in chats.bindings(account=account.name)],
            }
            for account in sorted(config.channel_accounts.values(), key=lambda a: a.name)
        ]
    finally:
        chats.queue.close()
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo(
            "no channel accounts; add one with: orchestrator channel add KIND NAME --token-env VAR"
        )
        return
    print_table(
        ("ACCOUNT", "KIND", "SECRET", "STATE", "IN", "OUT", "LAST ERROR"),
        [
            (
                r["name"],
                r["kind"],
                f"{r['credential']}: {r['token']}",
                describe_health(r["health"]),
                str((r["health"] or {}).get("messages_in", "-")),
                str((r["health"] or {}).get("messages_out", "-")),
                safe_line((r["health"] or {}).get("last_error") or "-")[:60],
            )
            for r in rows
        ],
    )
    bindings = [b for r in rows for b in r["bindings"]]
    if bindings:
        click.echo("")
        print_table(
            ("CHAT", "GROUP", "ACTIVATION", "TRUST", "TITLE"),
            [
                (
                    f"{b['account']}:{b['chat']}",
                    b["group"],
                    b["activation"],
                    b["trust"],
                    safe_line(b["title"] or "-"),
                )
                for b in bindings
            ],
        )


def describe_health(health: dict[str, Any] | None) -> str:
    """'connected as @bot, polled 3s ago' from the state the daemon records."""
    if not health:
        return "never started"
    state = str(health.get("state", "?"))
    bot = str(health.get("bot") or "")
    parts = [state + (f" as {bot if '@' in bot else '@' + bot}" if bot else "")]
    if health.get("last_poll"):
        parts.append(f"polled {human_seconds(time.time() - float(health['last_poll']))} ago")
    return ", ".join(parts)


@click.command()
@click.argument("group")
@click.argument("chat_ref", metavar="ACCOUNT:CHAT_ID")
@binding_options
@pass_cli
def bind(obj: CliContext, group: str, chat_ref: str, activation: str, trust: str | None) -> None:
    """Bind chat CHAT_ID of channel account ACCOUNT to GROUP (a running daemon routes its
    next message there). A chat is bound to one group; binding it again changes the
    activation and trust."""
    from orchestrator.groups import GroupStore
    from orchestrator.store.chats import parse_chat_ref

    account, chat = parse_chat_ref(chat_ref)
    defined = _check_account(obj, account)
    trust = trust or defined.options.default_trust
    found = GroupStore(obj.home).find(group)
    chats = _chats(obj)
    try:
        binding = chats.bind(account, chat, found.folder, activation=activation, trust=trust)
    finally:
        chats.queue.close()
    click.echo(
        f"bound {account}:{chat} to group {binding.group} (activation {activation}, "
        f"its people are {trust}s)"
    )


def _check_account(obj: CliContext, account: str) -> ChannelAccount:
    from orchestrator.errors import BadInput

    accounts = load_config(obj.home).channel_accounts
    if account not in accounts:
        known = ", ".join(sorted(accounts)) or "none"
        raise BadInput(
            f"no channel account {account!r} (defined: {known})",
            hint="orchestrator channel add KIND NAME --token-env VAR (see --help for the kinds)",
        )
    return accounts[account]


@click.command()
@click.argument("chat_ref", metavar="ACCOUNT:CHAT_ID")
@pass_cli
def unbind(obj: CliContext, chat_ref: str) -> None:
    """Unbind a chat: its messages reach no group (it is offered a pairing code again)."""
    from orchestrator.errors import BadInput
    from orchestrator.store.chats import parse_chat_ref

    account, chat = parse_chat_ref(chat_ref)
    chats = _chats(obj)
    try:
        found = chats.unbind(account, chat)
    finally:
        chats.queue.close()
    if found is None:
        raise BadInput(f"chat {account}:{chat} is not bound", hint="orchestrator channel list")
    click.echo(f"unbound {account}:{chat} from group {found.group}")


@click.command()
@click.argument("code", required=False)
@click.argument("group", required=False)
@click.option("--list", "listing", is_flag=True, help="List the codes waiting.")
@click.option("--all", "everything", is_flag=True, help="With --list: decided and expired too.")
@click.option("--reject", "reject_code", default=None, metavar="CODE", help="Refuse a code.")
@binding_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def pair(
    obj: CliContext,
    code: str | None,
    group: str | None,
    listing: bool,
    everything: bool,
    reject_code: str | None,
    activation: str,
    trust: str | None,
    as_json: bool,
) -> None:
    """Approve pairing CODE: bind the chat that was given it to GROUP.

    A chat that is not bound to a group (a new private chat, or the bot added to a group
    chat) is never routed anywhere: the daemon answers it once with a code, good for one
    hour and once. `pair --list` shows the codes waiting; `pair --reject CODE` refuses one.
    """
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore
    from orchestrator.store.chats import normalize_code

    chats = _chats(obj)
    try:
        if listing:
            pairings = chats.pairings(everything=everything)
            if as_json:
                print_json([p.to_dict() for p in pairings])
            elif not pairings:
                click.echo("no pairing codes waiting")
            else:
                now = time.time()
                print_table(
                    ("CODE", "CHAT", "TITLE", "ASKED BY", "STATE", "EXPIRES"),
                    [
                        (
                            p.code,
                            f"{p.account}:{p.chat}",
                            safe_line(p.title or "-"),
                            p.requested_by or "-",
                            p.state if p.expires > now or p.state != "pending" else "expired",
                            f"in {human_seconds(p.expires - now)}" if p.expires > now else "-",
                        )
                        for p in pairings
                    ],
                )
            return
        if reject_code:
            rejected = chats.reject(reject_code)
            click.echo(f"rejected {rejected.code} ({rejected.account}:{rejected.chat})")
            return
        if not code or not group:
            raise BadInput(
                "give CODE and GROUP, or --list, or --reject CODE",
                hint="such as: orchestrator pair K7QM-2XPR family",
            )
        found = GroupStore(obj.home).find(group)
        wanted = normalize_code(code)
        waiting = [p for p in chats.pairings() if p.code == wanted]
        if waiting:  # its account may have been removed since the code was given
            defined = _check_account(obj, waiting[0].account)
            trust = trust or defined.options.default_trust
        # a code not waiting: approve says why (unknown, used, rejected or expired)
        binding = chats.approve(code, found.folder, activation=activation, trust=trust or "member")
    finally:
        chats.queue.close()
    if as_json:
        print_json(binding.to_dict())
        return
    title = f" ({safe_line(binding.title)})" if binding.title else ""
    click.echo(
        f"paired {binding.account}:{binding.chat}{title} with group {binding.group} "
        f"(activation {binding.activation}, its people are {binding.trust}s)"
    )
