"""Exact behaviour of ``orchestrator channel``, ``bind``, ``unbind`` and of the helpers
they share with ``pair`` (cli/channel.py): the whole help texts of ``channel`` and
``channel add`` built from the account kinds, the options each kind and each kind's
secret give ``channel add`` (flag, key, metavar, help, order), the ``--activation`` and
``--trust`` options, the health line of ``channel list``, what a running daemon says to
a reload, an account looked up with the ones defined named, the default trust of an
account's chats, the chat store opened in a home made writable; and the whole outputs,
errors and exit codes of add, list, remove, bind and unbind. Kinds are faked at
``account_kinds`` where the built-in ones cannot show a case; the daemon is faked at its
client, or absent."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click
import pytest
from click.testing import CliRunner

from orchestrator.cli import CliContext, cli
from orchestrator.cli import channel as cli_channel
from orchestrator.cli.channel import (
    _add_help,
    _channel_help,
    _chats,
    _check_account,
    _credential_options,
    _kind_options,
    _kinds,
    _reload_if_running,
    binding_options,
    describe_health,
)
from orchestrator.config import kinds as config_kinds
from orchestrator.config.kinds import NO_OPTIONS, AccountKind, KindOption
from orchestrator.errors import BadInput, OrchestratorError
from orchestrator.home import Home
from orchestrator.service import client as service_client
from orchestrator.store.chats import ChatStore
from orchestrator.store.messages import open_queue

CONFIG = """\
channels:
  tg:
    kind: telegram
    token_env: TG_TOKEN
  mail:
    kind: email
    imap_url: imaps://mail.example.org
    smtp_url: smtps://mail.example.org
    user: helper@example.org
    password_env: MAIL_PASSWORD
  signed:
    kind: email
    imap_url: imaps://mail.example.org
    smtp_url: smtps://mail.example.org
    user: helper@example.org
    password_env: MAIL_PASSWORD
    verify: dkim
"""


@pytest.fixture
def configured(obj: CliContext) -> CliContext:
    (obj.home.root / "orchestrator.yaml").write_text(CONFIG)
    return obj


def _kind(
    name: str,
    title: str,
    *,
    credential: str = "token",
    example: str = "",
    options: tuple[KindOption, ...] = (),
) -> AccountKind:
    return AccountKind(
        name=name,
        title=title,
        summary=f"{title}: summary.",
        options=options,
        parse=lambda item: NO_OPTIONS,
        adapter="x:Y",
        example=example,
        credential=credential,
    )


@pytest.fixture
def fake_kinds(monkeypatch: pytest.MonkeyPatch) -> dict[str, AccountKind]:
    """Three kinds: two whose secret is a password (one with no example) sharing the
    flag --region, and one whose secret is an API key; none has a token."""
    kinds = {
        "alpha": _kind(
            "alpha",
            "Alpha",
            credential="password",
            example="orchestrator channel add alpha a --password-env A",
            options=(
                KindOption("region", "REGION", "Alpha: the region."),
                KindOption("url", "URL", "Alpha: the server.", required=True),
            ),
        ),
        "beta": _kind(
            "beta",
            "Beta",
            credential="password",
            options=(
                KindOption("region", "ZONE", "Beta: the zone."),
                KindOption("peers", "ID", "Beta: a peer (repeatable).", multiple=True),
            ),
        ),
        "gamma": _kind(
            "gamma",
            "Gamma",
            credential="api_key",
            example="orchestrator channel add gamma g --api-key-env G",
            options=(KindOption("max_bytes", "SIZE", "Gamma: a bound.", cli_flag="--max"),),
        ),
    }
    monkeypatch.setattr(config_kinds, "account_kinds", lambda: dict(kinds))
    return kinds


def _params(decorator: Any) -> list[tuple[Any, ...]]:
    def command(**kwargs: Any) -> None:
        pass

    built = click.command()(decorator(command))
    return [
        (
            tuple(p.opts),
            p.name,
            p.multiple,
            p.default,
            p.metavar,
            p.help,
            bool(p.show_default),
            tuple(p.type.choices) if isinstance(p.type, click.Choice) else None,
        )
        for p in built.params
        if isinstance(p, click.Option)
    ]


# the help texts


def test_the_channel_help_whole_with_the_built_in_kinds() -> None:
    assert _channel_help() == (
        "Chat-app accounts (a Telegram bot, a Matrix user, ...) through which people reach "
        "groups.\n\n"
        "An account is defined in orchestrator.yaml; its token stays on the host (in the "
        "daemon's environment or the secrets file) and never reaches a container or a log. "
        "Each chat of an account is bound to one group: `orchestrator bind`, or approve the "
        "pairing code an unbound chat is given with `orchestrator pair CODE GROUP`.\n\n"
        "\b\nExamples:\n"
        "  orchestrator channel add discord server --token-env DISCORD_TOKEN\n"
        "  orchestrator channel add email mailbot --imap-url imaps://mail.example.org \\\n"
        "      --smtp-url smtps://mail.example.org --user helper@example.org "
        "--password-env MAIL_PASSWORD\n"
        "  orchestrator channel add matrix helper --homeserver https://matrix.example.org \\\n"
        "      --user-id @helper:example.org --token-env MATRIX_TOKEN "
        "--allow-inviter @me:example.org\n"
        "  orchestrator channel add slack team --bot-token-env SLACK_BOT_TOKEN \\\n"
        "      --app-token-env SLACK_APP_TOKEN\n"
        "  orchestrator channel add telegram familybot --token-env TELEGRAM_FAMILY_TOKEN\n"
        "  orchestrator pair --list\n"
        "  orchestrator pair K7QM-2XPR family\n"
        "  orchestrator bind family familybot:-1001234567890 --activation mention\n"
    )


def test_the_channel_help_skips_a_kind_without_an_example(
    fake_kinds: dict[str, AccountKind],
) -> None:
    text = _channel_help()
    assert text.endswith(
        "\b\nExamples:\n"
        "  orchestrator channel add alpha a --password-env A\n"
        "  orchestrator channel add gamma g --api-key-env G\n"
        "  orchestrator pair --list\n"
        "  orchestrator pair K7QM-2XPR family\n"
        "  orchestrator bind family familybot:-1001234567890 --activation mention\n"
    )


def test_the_add_help_whole_with_the_built_in_kinds() -> None:
    assert _add_help() == (
        "Define channel account NAME of KIND in orchestrator.yaml (comments and order are "
        "kept); a running daemon starts it at once.\n\n"
        "Discord: a bot's token (Developer Portal, Bot); turn on the Message Content intent "
        "there for channels bound with activation always.\n\n"
        "Email: a mailbox's IMAP and SMTP servers (--imap-url, --smtp-url), its login "
        "(--user) and password (--password-env or --password-secret); a From: line is not "
        "proof, so chats are bound as guests unless --verify dkim.\n\n"
        "Matrix: the bot's user, an access token of it (from logging it in once), its "
        "homeserver; --allow-inviter names whose invites it accepts.\n\n"
        "Slack: an app in Socket Mode: its bot token (xoxb-...) and an app-level token "
        "(xapp-..., scope connections:write).\n\n"
        "Telegram: a bot token from @BotFather."
    )


def test_the_add_help_with_other_kinds(fake_kinds: dict[str, AccountKind]) -> None:
    assert _add_help() == (
        "Define channel account NAME of KIND in orchestrator.yaml (comments and order are "
        "kept); a running daemon starts it at once.\n\n"
        "Alpha: summary.\n\nBeta: summary.\n\nGamma: summary."
    )


def test_kinds_are_the_configured_ones_in_name_order() -> None:
    assert list(_kinds()) == ["discord", "email", "matrix", "slack", "telegram"]
    assert _kinds() == config_kinds.account_kinds()


def test_kinds_come_from_account_kinds(fake_kinds: dict[str, AccountKind]) -> None:
    assert _kinds() == fake_kinds


# the options


SECRETS_FILE = "of the secrets file (secrets_file in orchestrator.yaml; mode 0600)."


def test_the_credential_options_of_the_built_in_kinds() -> None:
    assert _params(_credential_options) == [
        (("--token-env",), "token_env", False, None, "VAR", "Read the bot token from $VAR.",
         False, None),
        (("--token-secret",), "token_secret", False, None, "NAME",
         f"Read the bot token from entry NAME {SECRETS_FILE}", False, None),
        (("--bot-token-env",), "bot_token_env", False, None, "VAR",
         "Slack: read the bot token from $VAR.", False, None),
        (("--bot-token-secret",), "bot_token_secret", False, None, "NAME",
         f"Slack: read the bot token from entry NAME {SECRETS_FILE}", False, None),
        (("--password-env",), "password_env", False, None, "VAR",
         "Email: read the password from $VAR.", False, None),
        (("--password-secret",), "password_secret", False, None, "NAME",
         f"Email: read the password from entry NAME {SECRETS_FILE}", False, None),
    ]  # fmt: skip


def test_the_credential_options_name_every_kind_of_a_word_and_always_offer_a_token(
    fake_kinds: dict[str, AccountKind],
) -> None:
    assert _params(_credential_options) == [
        (("--token-env",), "token_env", False, None, "VAR", "Read the bot token from $VAR.",
         False, None),
        (("--token-secret",), "token_secret", False, None, "NAME",
         f"Read the bot token from entry NAME {SECRETS_FILE}", False, None),
        (("--api-key-env",), "api_key_env", False, None, "VAR",
         "Gamma: read the api key from $VAR.", False, None),
        (("--api-key-secret",), "api_key_secret", False, None, "NAME",
         f"Gamma: read the api key from entry NAME {SECRETS_FILE}", False, None),
        (("--password-env",), "password_env", False, None, "VAR",
         "Alpha and Beta: read the password from $VAR.", False, None),
        (("--password-secret",), "password_secret", False, None, "NAME",
         f"Alpha and Beta: read the password from entry NAME {SECRETS_FILE}", False, None),
    ]  # fmt: skip


def test_the_kind_options_of_the_built_in_kinds() -> None:
    email = "Email: "
    assert _params(_kind_options) == [
        (("--api-url",), "api_url", False, None, "URL",
         "The API base URL, for a proxy or a test server (default: Discord's own).", False,
         None),
        (("--attachments-max",), "attachments_max_bytes", False, None, "SIZE",
         "The largest file stored per message (default 10m; 0 refuses files).", False, None),
        (("--imap-url",), "imap_url", False, None, "URL",
         email + "the IMAP server, imaps://HOST[:PORT] (or imap:// with STARTTLS).", False,
         None),
        (("--smtp-url",), "smtp_url", False, None, "URL",
         email + "the SMTP server, smtps://HOST[:PORT] (or smtp:// with STARTTLS).", False,
         None),
        (("--user",), "user", False, None, "LOGIN", email + "the login of both servers.",
         False, None),
        (("--address",), "address", False, None, "ADDRESS",
         email + "the From: of replies (default: the login).", False, None),
        (("--folder",), "folder", False, None, "FOLDER",
         email + "the IMAP folder read (default INBOX).", False, None),
        (("--verify",), "verify", False, None, "none|dkim",
         email + "dkim takes only mail whose From: a DKIM signature proves (bindings then "
         "default to member); default none.", False, None),
        (("--ca-file",), "ca_file", False, None, "PATH",
         email + "a CA file the servers' certificates chain to.", False, None),
        (("--poll-interval",), "poll_interval", False, None, "DURATION",
         email + "how often a server without IMAP IDLE is asked (default 60s).", False, None),
        (("--homeserver",), "homeserver", False, None, "URL",
         "Matrix: the homeserver's base URL.", False, None),
        (("--user-id",), "user_id", False, None, "ID",
         "Matrix: the bot's user id (@bot:example.org).", False, None),
        (("--allow-inviter",), "allow_inviters", True, None, "ID",
         "Matrix: a user whose invites the bot accepts (repeatable); other invites get a "
         "pairing code.", False, None),
        (("--app-token-env",), "app_token_env", False, None, "VAR",
         "Slack: read the app-level token (xapp-...) from $VAR.", False, None),
        (("--app-token-secret",), "app_token_secret", False, None, "NAME",
         "Slack: read the app-level token (xapp-...) from entry NAME of the secrets file.",
         False, None),
    ]  # fmt: skip


def test_a_flag_two_kinds_share_is_one_option_described_by_the_first(
    fake_kinds: dict[str, AccountKind],
) -> None:
    assert _params(_kind_options) == [
        (("--region",), "region", False, None, "REGION", "Alpha: the region.", False, None),
        (("--url",), "url", False, None, "URL", "Alpha: the server.", False, None),
        (("--peers",), "peers", True, None, "ID", "Beta: a peer (repeatable).", False, None),
        (("--max",), "max_bytes", False, None, "SIZE", "Gamma: a bound.", False, None),
    ]


def test_the_binding_options() -> None:
    assert _params(binding_options) == [
        (("--activation",), "activation", False, "mention", None,
         "In group chats: mention (only messages that mention the bot or reply to it start a "
         "turn) or always (every message).", True, ("mention", "always")),
        (("--trust",), "trust", False, None, None,
         "What the chat's people are in the group: member or guest (creators are named one "
         "by one in group.yaml). Default: member; guest for an account that cannot prove who "
         "wrote (an email account without DKIM verification).", False, ("member", "guest")),
    ]  # fmt: skip


def test_the_add_command_offers_every_option_once() -> None:
    names = [p.name for p in cli_channel.add.params]
    assert names[:2] == ["kind", "name"]
    assert names[-1] == "replace"
    assert len(names) == len(set(names))


# the health line


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_channel, "time", SimpleNamespace(time=lambda: 1000.0))


@pytest.mark.usefixtures("clock")
@pytest.mark.parametrize(
    ("health", "line"),
    [
        (None, "never started"),
        ({}, "never started"),
        ({"state": "connected"}, "connected"),
        ({"state": "connected", "bot": ""}, "connected"),
        ({"state": "connected", "bot": None}, "connected"),
        ({"state": "connected", "bot": "fambot"}, "connected as @fambot"),
        ({"state": "connected", "bot": "@me:example.org"}, "connected as @me:example.org"),
        ({"bot": "fambot"}, "? as @fambot"),
        ({"state": 3}, "3"),
        ({"state": "polling", "last_poll": "900.5"}, "polling, polled 99s ago"),
        ({"state": "polling", "last_poll": 0}, "polling"),
        ({"state": "polling", "last_poll": None}, "polling"),
        (
            {"state": "connected", "bot": "fambot", "last_poll": 1000.0 - 7300},
            "connected as @fambot, polled 2h01m ago",
        ),
    ],
)
def test_the_health_line(health: dict[str, Any] | None, line: str) -> None:
    assert describe_health(health) == line


# a reload of a running daemon


@pytest.fixture
def daemon(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The daemon's client faked: whether one runs, what it answers, what was asked."""
    fake = SimpleNamespace(running=True, answer={"ok": True}, error=None, asked=[])

    def daemon_running(home: Home) -> bool:
        fake.asked.append(("running", home))
        return bool(fake.running)

    def control_request(home: Home, message: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        fake.asked.append(("request", home, message, kwargs))
        if fake.error is not None:
            raise fake.error
        return dict(fake.answer)

    monkeypatch.setattr(service_client, "daemon_running", daemon_running)
    monkeypatch.setattr(service_client, "control_request", control_request)
    return fake


def test_no_daemon_no_reload(obj: CliContext, daemon: SimpleNamespace) -> None:
    daemon.running = False
    assert _reload_if_running(obj) == "it takes effect when the daemon starts (orchestrator up)"
    assert daemon.asked == [("running", obj.home)]


def test_a_running_daemon_is_asked_to_reload(obj: CliContext, daemon: SimpleNamespace) -> None:
    assert _reload_if_running(obj) == "the running daemon reloaded"
    assert daemon.asked == [
        ("running", obj.home),
        ("request", obj.home, {"op": "reload"}, {"timeout": 30}),
    ]


def test_a_reload_that_fails_to_reach_the_daemon(obj: CliContext, daemon: SimpleNamespace) -> None:
    daemon.error = OrchestratorError("the daemon went away", hint="ignored")
    assert _reload_if_running(obj) == (
        "the running daemon did not reload (the daemon went away); run: orchestrator reload"
    )


def test_a_reload_the_daemon_refuses(obj: CliContext, daemon: SimpleNamespace) -> None:
    daemon.answer = {"ok": False, "error": "orchestrator.yaml: bad channels"}
    assert _reload_if_running(obj) == (
        "the running daemon did not reload: orchestrator.yaml: bad channels"
    )
    daemon.answer = {"error": "no ok"}
    assert _reload_if_running(obj) == "the running daemon did not reload: no ok"
    daemon.answer = {}
    assert _reload_if_running(obj) == "the running daemon did not reload: None"


# accounts and their default trust


def test_an_account_is_found_by_name(configured: CliContext) -> None:
    account = _check_account(configured, "tg")
    assert (account.name, account.kind) == ("tg", "telegram")
    assert _check_account(configured, "mail").name == "mail"


def test_an_unknown_account_names_the_defined_ones(configured: CliContext) -> None:
    with pytest.raises(BadInput) as caught:
        _check_account(configured, "nobot")
    assert caught.value.message == "no channel account 'nobot' (defined: mail, signed, tg)"
    assert caught.value.hint == (
        "orchestrator channel add KIND NAME --token-env VAR (see --help for the kinds)"
    )


def test_an_unknown_account_when_none_is_defined(obj: CliContext) -> None:
    with pytest.raises(BadInput) as caught:
        _check_account(obj, "tg")
    assert caught.value.message == "no channel account 'tg' (defined: none)"


def _pairing_code(home: Home, account: str, chat: str) -> str:
    queue = open_queue(home)
    try:
        pairing, _ = ChatStore(queue).request_pairing(account, chat, title=None, requested_by=None)
    finally:
        queue.close()
    assert pairing is not None
    return pairing.code


def test_pair_gives_the_accounts_default_trust_unless_told(configured: CliContext) -> None:
    root = configured.home.root
    assert run(root, "group", "add", "fam")[0] == 0
    expected = {
        ("tg", ()): "members",
        ("mail", ()): "guests",
        ("signed", ()): "members",
        ("mail", ("--trust", "member")): "members",
        ("tg", ("--trust", "guest")): "guests",
    }
    for number, ((account, flags), trust) in enumerate(expected.items()):
        code = _pairing_code(configured.home, account, str(number))
        assert run(root, "pair", code, "fam", *flags) == (
            0,
            f"paired {account}:{number} with group fam (activation mention, its people are "
            f"{trust})\n",
        )


def test_pair_refuses_a_code_whose_account_was_removed_since(configured: CliContext) -> None:
    root = configured.home.root
    assert run(root, "group", "add", "fam")[0] == 0
    code = _pairing_code(configured.home, "gone", "42")
    for flags in ((), ("--trust", "guest")):
        assert run(root, "pair", code, "fam", *flags) == (
            2,
            "error: no channel account 'gone' (defined: mail, signed, tg)\n"
            "hint: orchestrator channel add KIND NAME --token-env VAR (see --help for the "
            "kinds)\n",
        )
    exit_code, out = run(root, "pair", "--list", "--json")
    assert exit_code == 0 and [p["state"] for p in json.loads(out)] == ["pending"]
    exit_code, out = run(root, "group", "show", "fam", "--json")
    assert exit_code == 0 and json.loads(out)["bindings"] == []


def test_pair_of_a_code_not_waiting_says_why(configured: CliContext) -> None:
    root = configured.home.root
    assert run(root, "group", "add", "fam")[0] == 0
    assert run(root, "pair", "ZZZZ-ZZZZ", "fam") == (
        2,
        "error: no pairing code ZZZZ-ZZZZ\nhint: orchestrator pair --list shows the codes "
        "waiting\n",
    )


# the chat store


def test_the_chat_store_is_the_homes_queue_in_a_home_made_writable(tmp_path: Path) -> None:
    home = Home(tmp_path / "new")
    chats = _chats(CliContext(home=home, debug=False))
    try:
        assert isinstance(chats, ChatStore)
        assert home.groups_dir.is_dir() and home.state_dir.is_dir()
        assert Path(chats.queue.path) == home.state_dir / "queue.db"
        chats.bind("tg", "1", "fam")
        assert [b.chat for b in chats.bindings(account="tg")] == ["1"]
    finally:
        chats.queue.close()


def test_the_credential_options_keep_the_credential_words_own_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The values reach ``add`` under the kind's credential keys (``appKey_env``), not
    under the lower-cased names click would make of the flags."""
    kinds = {"kappa": _kind("kappa", "Kappa", credential="appKey")}
    monkeypatch.setattr(config_kinds, "account_kinds", lambda: dict(kinds))
    assert [(opts, name) for opts, name, *_ in _params(_credential_options)] == [
        (("--token-env",), "token_env"),
        (("--token-secret",), "token_secret"),
        (("--appKey-env",), "appKey_env"),
        (("--appKey-secret",), "appKey_secret"),
    ]
    assert kinds["kappa"].credential_keys == ("appKey_env", "appKey_secret")


# the commands, whole outputs


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--home", str(home), *args])
    return result.exit_code, result.output


@pytest.fixture
def fam(obj: CliContext) -> Path:
    """A home with group fam and telegram account bot; no daemon runs."""
    root = obj.home.root
    assert run(root, "group", "add", "fam")[0] == 0
    assert run(root, "channel", "add", "telegram", "bot", "--token-env", "TG")[0] == 0
    return root


NO_DAEMON = "it takes effect when the daemon starts (orchestrator up)"


def test_channel_add_says_where_the_secret_comes_from(obj: CliContext) -> None:
    root = obj.home.root
    assert run(root, "channel", "add", "telegram", "bot", "--token-secret", "tg") == (
        0,
        f"channel account bot (telegram, token: secret tg); {NO_DAEMON}\n",
    )
    assert run(root, "channel", "add", "telegram", "bot", "--token-env", "TG") == (
        2,
        "error: a channel account named 'bot' exists\nhint: pass --replace to replace it\n",
    )
    assert run(root, "channel", "add", "telegram", "bot", "--token-env", "TG", "--replace") == (
        0,
        f"channel account bot (telegram, token: env TG); {NO_DAEMON}\n",
    )
    assert run(
        root, "channel", "add", "slack", "team", "--bot-token-env", "B", "--app-token-env", "A"
    ) == (
        0,
        f"channel account team (slack, bot_token: env B); {NO_DAEMON}\n",
    )


def test_channel_add_refuses_the_secrets_and_settings_of_other_kinds(obj: CliContext) -> None:
    root = obj.home.root
    add = ("channel", "add", "telegram", "bot", "--token-env", "TG")
    assert run(root, *add, "--password-env", "X", "--bot-token-secret", "y") == (
        2,
        "error: --password-env, --bot-token-secret: a telegram account's secret is its token\n"
        "hint: give --token-env VAR or --token-secret NAME\n",
    )
    assert run(root, *add, "--homeserver", "h", "--imap-url", "i") == (
        2,
        "error: --imap-url, --homeserver are for email and matrix accounts, not telegram\n"
        "hint: see: orchestrator channel add --help\n",
    )
    assert run(root, *add, "--user-id", "@b:s") == (
        2,
        "error: --user-id is for matrix accounts, not telegram\n"
        "hint: see: orchestrator channel add --help\n",
    )
    assert run(
        root, "channel", "add", "telegram", "bot", "--token-env", "T", "--token-secret", "s"
    ) == (
        2,
        "error: give --token-env VAR or --token-secret NAME (one of them)\n"
        "hint: keep the token in the daemon's environment or the secrets file\n",
    )
    assert run(root, "channel", "add", "slack", "team") == (
        2,
        "error: give --bot-token-env VAR or --bot-token-secret NAME (one of them)\n"
        "hint: keep the bot token in the daemon's environment or the secrets file\n",
    )
    assert not (root / "orchestrator.yaml").exists()


def test_bind_unbind_and_the_listing(fam: Path) -> None:
    assert run(fam, "bind", "fam", "bot:-100") == (
        0,
        "bound bot:-100 to group fam (activation mention, its people are members)\n",
    )
    assert run(fam, "bind", "fam", "bot:7", "--activation", "always", "--trust", "guest") == (
        0,
        "bound bot:7 to group fam (activation always, its people are guests)\n",
    )
    queue = open_queue(Home(fam))
    ChatStore(queue).set_state(
        "bot",
        "health",
        json.dumps({"state": "connected", "bot": "fambot", "messages_in": 4, "messages_out": 2,
                    "last_error": "timed out\nagain " + "x" * 80}),
    )  # fmt: skip
    queue.close()
    code, out = run(fam, "channel", "list")
    assert code == 0
    assert out == (
        "ACCOUNT  KIND      SECRET         STATE                 IN  OUT  LAST ERROR\n"
        "bot      telegram  token: env TG  connected as @fambot  4   2    "
        + ("timed out\\nagain " + "x" * 80)[:60]
        + "\n\n"
        "CHAT      GROUP  ACTIVATION  TRUST   TITLE\n"
        "bot:-100  fam    mention     member  -\n"
        "bot:7     fam    always      guest   -\n"
    )
    assert run(fam, "unbind", "bot:7") == (0, "unbound bot:7 from group fam\n")
    assert run(fam, "unbind", "bot:7") == (
        2,
        "error: chat bot:7 is not bound\nhint: orchestrator channel list\n",
    )


def test_channel_list_with_no_accounts(obj: CliContext) -> None:
    assert run(obj.home.root, "channel", "list") == (
        0,
        "no channel accounts; add one with: orchestrator channel add KIND NAME --token-env VAR\n",
    )
    assert run(obj.home.root, "channel", "list", "--json") == (0, "[]\n")


def test_channel_remove(fam: Path) -> None:
    assert run(fam, "channel", "remove", "nobot") == (
        2,
        "error: no channel account named 'nobot'\nhint: see: orchestrator channel list\n",
    )
    assert run(fam, "bind", "fam", "bot:1")[0] == 0
    assert run(fam, "channel", "remove", "bot") == (
        2,
        "error: 1 chat of 'bot' is bound to a group\n"
        "hint: pass --unbind to remove them too (orchestrator channel list shows them)\n",
    )
    assert run(fam, "channel", "remove", "bot", "--unbind") == (
        0,
        f"removed channel account bot; {NO_DAEMON}\n",
    )
    assert "channels" not in (fam / "orchestrator.yaml").read_text()
    assert run(fam, "unbind", "bot:1")[0] == 2


def test_bind_refuses_an_account_that_is_not_defined_even_with_a_trust(fam: Path) -> None:
    refused = (
        2,
        "error: no channel account 'typo' (defined: bot)\n"
        "hint: orchestrator channel add KIND NAME --token-env VAR (see --help for the kinds)\n",
    )
    assert run(fam, "bind", "fam", "typo:123") == refused
    assert run(fam, "bind", "fam", "typo:123", "--trust", "guest") == refused
    assert json.loads(run(fam, "group", "show", "fam", "--json")[1])["bindings"] == []


def test_a_missing_setting_is_hinted_with_the_kinds_example_on_one_line(
    obj: CliContext,
) -> None:
    assert run(obj.home.root, "channel", "add", "matrix", "mx", "--token-env", "T") == (
        2,
        "error: a matrix account needs --homeserver URL and --user-id ID\n"
        "hint: such as: orchestrator channel add matrix helper --homeserver "
        "https://matrix.example.org --user-id @helper:example.org --token-env MATRIX_TOKEN "
        "--allow-inviter @me:example.org\n",
    )


def test_an_email_account_is_named_with_an(obj: CliContext) -> None:
    code, out = run(obj.home.root, "channel", "add", "email", "mail", "--password-env", "P")
    assert code == 2
    assert out.startswith(
        "error: an email account needs --imap-url URL and --smtp-url URL and --user LOGIN\n"
    )
    code, out = run(
        obj.home.root, "channel", "add", "email", "mail", "--token-env", "T", "--user", "u"
    )
    assert (code, out.splitlines()[0]) == (
        2,
        "error: --token-env: an email account's secret is its password",
    )
