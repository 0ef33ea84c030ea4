"""``orchestrator channel``, ``bind``, ``unbind`` and ``pair``: chat-app accounts and which
group each of their chats talks to."""

from __future__ import annotations

import time
from typing import Any

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table, safe_line
from orchestrator.config import load_config
from orchestrator.units import human_seconds

pass_cli = click.make_pass_decorator(CliContext)
ACTIVATION_HELP = (
    "In group chats: mention (only messages that mention the bot or reply to it start a "
    "turn) or always (every message)."
)
TRUST_HELP = (
    "What the chat's people are in the group: member or guest (creators are named one by "
    "one in group.yaml)."
)


def binding_options(command: Any) -> Any:
    """--activation and --trust, as `bind` and `pair` take them."""
    command = click.option(
        "--trust",
        type=click.Choice(["member", "guest"]),
        default="member",
        show_default=True,
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
    from orchestrator.service import control_request, daemon_running

    if not daemon_running(obj.home):
        return "it takes effect when the daemon starts (orchestrator up)"
    try:
        answer = control_request(obj.home, {"op": "reload"}, timeout=30)
    except OrchestratorError as exc:
        return f"the running daemon did not reload ({exc.message}); run: orchestrator reload"
    if not answer.get("ok"):
        return f"the running daemon did not reload: {answer.get('error')}"
    return "the running daemon reloaded"


@click.group()
def channel() -> None:
    """Chat-app accounts (a Telegram bot, ...) through which people reach groups.

    An account is defined in orchestrator.yaml; its token stays on the host (in the
    daemon's environment or the secrets file) and never reaches a container or a log.
    Each chat of an account is bound to one group: `orchestrator bind`, or approve the
    pairing code an unbound chat is given with `orchestrator pair CODE GROUP`.

    \b
    Examples:
      orchestrator channel add telegram familybot --token-env TELEGRAM_FAMILY_TOKEN
      orchestrator channel add matrix helper --homeserver https://matrix.example.org \\
          --user-id @helper:example.org --token-env MATRIX_TOKEN \\
          --allow-inviter @me:example.org
      orchestrator pair --list
      orchestrator pair K7QM-2XPR family
      orchestrator bind family familybot:-1001234567890 --activation mention
    """


@channel.command("add")
@click.argument("kind", type=click.Choice(["telegram", "matrix"]))
@click.argument("name")
@click.option("--token-env", default=None, metavar="VAR", help="Read the bot token from $VAR.")
@click.option(
    "--token-secret",
    default=None,
    metavar="NAME",
    help="Read the token from entry NAME of the secrets file (secrets_file in "
    "orchestrator.yaml; mode 0600).",
)
@click.option(
    "--api-url",
    default=None,
    metavar="URL",
    help="A self-hosted Bot API server (default: https://api.telegram.org).",
)
@click.option(
    "--attachments-max",
    default=None,
    metavar="SIZE",
    help="The largest photo or document stored per message (default 10m; 0 refuses files).",
)
@click.option(
    "--homeserver", default=None, metavar="URL", help="Matrix: the homeserver's base URL."
)
@click.option(
    "--user-id", default=None, metavar="ID", help="Matrix: the bot's user id (@bot:example.org)."
)
@click.option(
    "--allow-inviter",
    "inviters",
    multiple=True,
    metavar="ID",
    help="Matrix: a user whose invites the bot accepts (repeatable); other invites get a "
    "pairing code.",
)
@click.option("--replace", is_flag=True, help="Replace an account of that name.")
@pass_cli
def add(
    obj: CliContext,
    kind: str,
    name: str,
    token_env: str | None,
    token_secret: str | None,
    api_url: str | None,
    attachments_max: str | None,
    homeserver: str | None,
    user_id: str | None,
    inviters: tuple[str, ...],
    replace: bool,
) -> None:
    """Define channel account NAME of KIND in orchestrator.yaml (comments and order are
    kept); a running daemon starts it at once.

    \b
    Telegram: a bot token from @BotFather.
    Matrix: the bot's user, an access token of it (from logging it in once), its
    homeserver; --allow-inviter names whose invites it accepts.
    """
    from orchestrator.config.edit import edit_config
    from orchestrator.errors import BadInput

    if kind == "matrix":
        if not homeserver or not user_id:
            raise BadInput(
                "a matrix account needs --homeserver URL and --user-id @bot:server",
                hint="such as --homeserver https://matrix.example.org --user-id "
                "@helper:example.org",
            )
        if api_url or attachments_max is not None:
            raise BadInput("--api-url and --attachments-max are for telegram accounts")
    elif homeserver or user_id or inviters:
        raise BadInput("--homeserver, --user-id and --allow-inviter are for matrix accounts")

    if bool(token_env) == bool(token_secret):
        raise BadInput(
            "give --token-env VAR or --token-secret NAME (one of them)",
            hint="the token comes from BotFather; keep it in the daemon's environment or the "
            "secrets file",
        )
    entry: dict[str, object] = {"kind": kind}
    if token_env:
        entry["token_env"] = token_env
    if token_secret:
        entry["token_secret"] = token_secret
    if api_url:
        entry["api_url"] = api_url
    if attachments_max is not None:
        entry["attachments_max_bytes"] = attachments_max
    if homeserver:
        entry["homeserver"] = homeserver
    if user_id:
        entry["user_id"] = user_id
    if inviters:
        entry["allow_inviters"] = list(inviters)

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
        f"channel account {name} ({kind}, token: {account.token_reference()}); "
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
            f"{len(bound)} chats of {name!r} are bound to groups",
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
    """Channel accounts: kind, where the token comes from (never the token), health as
    the daemon last recorded it, and the chats bound to groups."""
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
            "no channel accounts; add one with: orchestrator channel add telegram NAME "
            "--token-env VAR"
        )
        return
    print_table(
        ("ACCOUNT", "KIND", "TOKEN", "STATE", "IN", "OUT", "LAST ERROR"),
        [
            (
                r["name"],
                r["kind"],
                r["token"],
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
    parts = [state + (f" as {bot if bot.startswith('@') else '@' + bot}" if bot else "")]
    if health.get("last_poll"):
        parts.append(f"polled {human_seconds(time.time() - float(health['last_poll']))} ago")
    return ", ".join(parts)


@click.command()
@click.argument("group")
@click.argument("chat_ref", metavar="ACCOUNT:CHAT_ID")
@binding_options
@pass_cli
def bind(obj: CliContext, group: str, chat_ref: str, activation: str, trust: str) -> None:
    """Bind chat CHAT_ID of channel account ACCOUNT to GROUP (a running daemon routes its
    next message there). A chat is bound to one group; binding it again changes the
    activation and trust."""
    from orchestrator.groups import GroupStore
    from orchestrator.store.chats import parse_chat_ref

    account, chat = parse_chat_ref(chat_ref)
    _check_account(obj, account)
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


def _check_account(obj: CliContext, account: str) -> None:
    from orchestrator.errors import BadInput

    accounts = load_config(obj.home).channel_accounts
    if account not in accounts:
        known = ", ".join(sorted(accounts)) or "none"
        raise BadInput(
            f"no channel account {account!r} (defined: {known})",
            hint="orchestrator channel add telegram NAME --token-env VAR",
        )


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
    trust: str,
    as_json: bool,
) -> None:
    """Approve pairing CODE: bind the chat that was given it to GROUP.

    A chat that is not bound to a group (a new private chat, or the bot added to a group
    chat) is never routed anywhere: the daemon answers it once with a code, good for one
    hour and once. `pair --list` shows the codes waiting; `pair --reject CODE` refuses one.
    """
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore

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
        binding = chats.approve(code, found.folder, activation=activation, trust=trust)
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
