"""The chat apps' options in orchestrator.yaml, exactly: values read, each error naming
file, key, value and what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import load_config
from orchestrator.config.accounts import ChannelAccount
from orchestrator.errors import InvalidConfig
from orchestrator.home import Home


def accounts(home: Path, text: str, monkeypatch) -> dict[str, ChannelAccount]:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    (home / "orchestrator.yaml").write_text(text)
    return dict(load_config(Home(home)).channel_accounts)


def error(home: Path, text: str, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidConfig) as caught:
        accounts(home, text, monkeypatch)
    return str(caught.value).replace(str(home), "HOME")


def channel(body: str) -> str:
    return "channels:\n  fam:\n" + "".join(f"    {line}\n" for line in body.splitlines())


def test_telegram_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    text = channel(
        "kind: telegram\ntoken_env: T\napi_url: http://127.0.0.1:8081/\n"
        "attachments_max_bytes: 2g\nsender_rate: {messages: 100000, per: 1d}"
    )
    account = accounts(home, text, monkeypatch)["fam"]
    assert account.to_dict() == {
        "name": "fam",
        "kind": "telegram",
        "credential": "token",
        "token": "env T",
        "sender_rate": {"messages": 100000, "per_seconds": 86400},
        "api_url": "http://127.0.0.1:8081",
        "attachments_max_bytes": 2 * 1024**3,
    }
    assert (account.channel, account.prefix) == ("telegram:fam", "telegram:")


def test_telegram_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    account = accounts(home, channel("kind: telegram\ntoken_secret: t"), monkeypatch)["fam"]
    assert account.to_dict() == {
        "name": "fam",
        "kind": "telegram",
        "credential": "token",
        "token": account.token_reference(),
        "sender_rate": {"messages": 20, "per_seconds": 600},
        "api_url": None,
        "attachments_max_bytes": 10 * 1024**2,
    }
    assert (account.token_env, account.token_secret) == (None, "t")


def test_discord_all_keys_and_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    text = channel(
        "kind: discord\ntoken_env: T\napi_url: http://d.example/api/\nattachments_max_bytes: 1g"
    )
    options = accounts(home, text, monkeypatch)["fam"].to_dict()
    assert (options["api_url"], options["attachments_max_bytes"]) == (
        "http://d.example/api",
        1024**3,
    )
    assert options["credential"] == "token"
    plain = accounts(home, channel("kind: discord\ntoken_env: T"), monkeypatch)["fam"].to_dict()
    assert (plain["api_url"], plain["attachments_max_bytes"]) == (None, 10 * 1024**2)


def test_matrix_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    text = channel(
        "kind: matrix\ntoken_env: T\nhomeserver: https://m.example.org/\n"
        "user_id: '@helper:example.org'\nallow_inviters: ['@me:example.org', '@you:x.org']\n"
        "attachments_max_bytes: 0"
    )
    options = accounts(home, text, monkeypatch)["fam"].to_dict()
    assert {k: options[k] for k in ("homeserver", "user_id", "allow_inviters")} == {
        "homeserver": "https://m.example.org",
        "user_id": "@helper:example.org",
        "allow_inviters": ["@me:example.org", "@you:x.org"],
    }
    assert options["attachments_max_bytes"] == 0
    plain = channel(
        "kind: matrix\ntoken_env: T\nhomeserver: https://m.example.org\n"
        "user_id: '@helper:example.org'\nattachments_max_bytes: 2g"
    )
    options = accounts(home, plain, monkeypatch)["fam"].to_dict()
    assert (options["allow_inviters"], options["attachments_max_bytes"]) == ([], 2 * 1024**3)


def test_matrix_default_size(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    plain = channel(
        "kind: matrix\ntoken_env: T\nhomeserver: https://m.example.org\nuser_id: '@h:e.org'"
    )
    assert accounts(home, plain, monkeypatch)["fam"].to_dict()["attachments_max_bytes"] == (
        10 * 1024**2
    )


def test_slack_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    text = channel(
        "kind: slack\nbot_token_env: B\napp_token_env: A\napi_url: http://s.example/api\n"
        "attachments_max_bytes: 1g"
    )
    account = accounts(home, text, monkeypatch)["fam"]
    assert account.to_dict() == {
        "name": "fam",
        "kind": "slack",
        "credential": "bot_token",
        "token": "env B",
        "sender_rate": {"messages": 20, "per_seconds": 600},
        "api_url": "http://s.example/api/",
        "attachments_max_bytes": 1024**3,
        "app_token": "env A",
    }
    (secret,) = account.options.secrets()
    assert (secret.env, secret.secret, secret.env_key, secret.secret_key) == (
        "A",
        None,
        "app_token_env",
        "app_token_secret",
    )


def test_slack_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    text = channel("kind: slack\nbot_token_secret: b\napp_token_secret: a")
    options = accounts(home, text, monkeypatch)["fam"].options
    assert (options.api_url, options.attachments_max_bytes) == (None, 10 * 1024**2)  # type: ignore[attr-defined]
    assert (options.app_token.env, options.app_token.secret) == (None, "a")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "kind: telegram\ntoken_env: T\nattachments_max_bytes: 2147483649",
            "HOME/orchestrator.yaml:5: channels.fam.attachments_max_bytes: got 2147483649; "
            "expected a size up to 2g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: telegram\ntoken_env: T\nattachments_max_bytes: -1",
            "HOME/orchestrator.yaml:5: channels.fam.attachments_max_bytes: got -1; "
            "expected a size up to 2g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: telegram\ntoken_env: T\nattachments_max_bytes: lots",
            "HOME/orchestrator.yaml:5: channels.fam.attachments_max_bytes: got 'lots'; "
            "expected a size up to 2g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: telegram\ntoken_env: T\napi_url: ftp://x",
            r"HOME/orchestrator.yaml:5: channels.fam.api_url: 'ftp://x' does not match "
            r"https?://[^\s/]+(/\S*)?",
        ),
        (
            "kind: discord\ntoken_env: T\nattachments_max_bytes: 1073741825",
            "HOME/orchestrator.yaml:5: channels.fam.attachments_max_bytes: got 1073741825; "
            "expected a size up to 1g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: discord\ntoken_env: T\nattachments_max_bytes: -1",
            "HOME/orchestrator.yaml:5: channels.fam.attachments_max_bytes: got -1; "
            "expected a size up to 1g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: discord\ntoken_env: T\napi_url: x",
            r"HOME/orchestrator.yaml:5: channels.fam.api_url: 'x' does not match "
            r"https?://[^\s/]+(/\S*)?",
        ),
        (
            "kind: matrix\ntoken_env: T\nhomeserver: https://m.example.org\n"
            "user_id: '@helper:example.org'\nallow_inviters: ['@ok:e.org', 'me']",
            "HOME/orchestrator.yaml:7: channels.fam.allow_inviters: 'me' is not a Matrix "
            "user id (@name:server)",
        ),
        (
            "kind: matrix\ntoken_env: T\nhomeserver: https://m.example.org\n"
            "user_id: '@helper:example.org'\nattachments_max_bytes: 2147483649",
            "HOME/orchestrator.yaml:7: channels.fam.attachments_max_bytes: got 2147483649; "
            "expected a size up to 2g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: matrix\ntoken_env: T\nhomeserver: https://m.example.org\n"
            "user_id: '@helper:example.org'\nattachments_max_bytes: -1",
            "HOME/orchestrator.yaml:7: channels.fam.attachments_max_bytes: got -1; "
            "expected a size up to 2g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: matrix\ntoken_env: T\nhomeserver: https://m.example.org\nuser_id: helper",
            r"HOME/orchestrator.yaml:6: channels.fam.user_id: 'helper' does not match "
            r"@[a-z0-9._=/+-]+:[A-Za-z0-9.:\[\]-]+",
        ),
        (
            "kind: matrix\ntoken_env: T\nhomeserver: m.example.org\nuser_id: '@h:e.org'",
            r"HOME/orchestrator.yaml:5: channels.fam.homeserver: 'm.example.org' does not "
            r"match https?://[^\s/]+(/\S*)?",
        ),
        (
            "kind: slack\nbot_token_env: B",
            "HOME/orchestrator.yaml:2: channels.fam.app_token_env: give app_token_env or "
            "app_token_secret (one of them)",
        ),
        (
            "kind: slack\nbot_token_env: B\napp_token_secret: a\nattachments_max_bytes: -1",
            "HOME/orchestrator.yaml:6: channels.fam.attachments_max_bytes: got -1; "
            "expected a size up to 1g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: slack\nbot_token_env: B\napp_token_secret: a\nattachments_max_bytes: 1073741825",
            "HOME/orchestrator.yaml:6: channels.fam.attachments_max_bytes: got 1073741825; "
            "expected a size up to 1g (such as 10m; 0 refuses every file)",
        ),
        (
            "kind: slack\nbot_token_env: B\napp_token_secret: a\napi_url: nope",
            r"HOME/orchestrator.yaml:6: channels.fam.api_url: 'nope' does not match "
            r"https?://[^\s/]+(/\S*)?",
        ),
        (
            "kind: irc",
            "HOME/orchestrator.yaml:3: channels.fam.kind: got 'irc'; valid values: discord, "
            "email, matrix, slack, telegram",
        ),
        (
            "kind: telegram",
            "HOME/orchestrator.yaml:2: channels.fam.token_env: give token_env or token_secret "
            "(one of them)",
        ),
        (
            "kind: telegram\ntoken_env: T\nuser_id: x",
            "HOME/orchestrator.yaml:5: channels.fam.user_id: unknown key; valid keys here: "
            "api_url, attachments_max_bytes, kind, sender_rate, token_env, token_secret",
        ),
        (
            "kind: telegram\ntoken_env: T\nsender_rate: {messages: 1, per: 86401}",
            "HOME/orchestrator.yaml:5: channels.fam.sender_rate.per: got 86401; expected a "
            "duration from 1s to 1d",
        ),
        (
            "kind: telegram\ntoken_env: T\nsender_rate: {messages: 1, per: 0}",
            "HOME/orchestrator.yaml:5: channels.fam.sender_rate.per: got 0; expected a "
            "duration from 1s to 1d",
        ),
        (
            "kind: telegram\ntoken_env: T\nsender_rate: {messages: 0}",
            "HOME/orchestrator.yaml:5: channels.fam.sender_rate.messages: got 0; expected 1 "
            "to 100000",
        ),
        (
            "kind: telegram\ntoken_env: T\nsender_rate: {messages: 100001}",
            "HOME/orchestrator.yaml:5: channels.fam.sender_rate.messages: got 100001; "
            "expected 1 to 100000",
        ),
        (
            "kind: telegram\ntoken_env: T\nsender_rate: {x: 0}",
            "HOME/orchestrator.yaml:5: channels.fam.sender_rate.x: unknown key; valid keys "
            "here: messages, per",
        ),
    ],
)
def test_channel_errors(home: Path, monkeypatch, body: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, channel(body), monkeypatch) == expected


def test_sender_rate_lowest(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    text = channel("kind: telegram\ntoken_env: T\nsender_rate: {messages: 1, per: 1s}")
    account = accounts(home, text, monkeypatch)["fam"]
    assert (account.rate_messages, account.rate_seconds) == (1, 1)


def test_bad_account_name(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    message = error(home, "channels:\n  Bad:\n    kind: telegram\n", monkeypatch)
    assert message == (
        "HOME/orchestrator.yaml:2: channels.Bad: channel account names are 1-40 of a-z, 0-9, "
        "'-' and '_', starting with a letter or digit"
    )


def test_telegram_advice_on_privacy_mode_with_group_chats() -> None:
    from orchestrator.channels.telegram.kind import advice

    health = {"can_read_all_group_messages": False, "bot": "famBot"}
    found = advice(health, ["-100", "42", "-7"])
    assert found is not None
    assert found.text == (
        "@famBot has Telegram's privacy mode on: in the 2 group chats bound it is sent only "
        "commands (/...), replies to its own messages and service messages, not the rest of "
        "the conversation"
    )
    assert found.hint == (
        "to let it see every message: @BotFather, /setprivacy, Disable, then remove the "
        "bot from those groups and add it again (or make it a group admin)"
    )
    nameless = advice({"can_read_all_group_messages": False}, ["-1"])
    assert nameless is not None and nameless.text.startswith("the bot has Telegram's")
    assert "in the 1 group chat bound" in nameless.text
    assert advice(health, ["42"]) is None  # no group chat
    assert advice({"can_read_all_group_messages": True}, ["-1"]) is None
    assert advice({}, ["-1"]) is None  # not known


def test_discord_advice_without_message_content() -> None:
    from orchestrator.channels.discord.kind import advice

    found = advice({"can_read_all_group_messages": False, "bot": "srv#1"}, [])
    assert found is not None
    assert found.text == (
        "srv#1 does not have Discord's Message Content intent: in servers it is sent the "
        "text only of messages that mention it or reply to it (and of direct messages), so "
        "a channel bound with activation always gets nothing else, and files in other "
        "messages are not seen"
    )
    assert found.hint == (
        "to let it read every message: Discord Developer Portal, your application, Bot, "
        "Privileged Gateway Intents, turn on Message Content Intent; then orchestrator "
        "reload (the daemon asks for the intent when the application has it)"
    )
    nameless = advice({"can_read_all_group_messages": False, "bot": ""}, [])
    assert nameless is not None and nameless.text.startswith("the bot does not have")
    assert advice({"can_read_all_group_messages": True}, []) is None
    assert advice({}, []) is None


def test_kinds_as_channel_add_shows_them() -> None:
    from orchestrator.channels.discord.kind import KIND as DISCORD
    from orchestrator.channels.matrix.kind import KIND as MATRIX
    from orchestrator.channels.slack.kind import KIND as SLACK
    from orchestrator.channels.telegram.kind import KIND as TELEGRAM

    def flags(kind):  # type: ignore[no-untyped-def]
        return [(o.key, o.metavar, o.flag, o.multiple, o.required) for o in kind.options]

    assert (TELEGRAM.name, TELEGRAM.title, TELEGRAM.credential) == ("telegram", "Telegram", "token")
    assert flags(TELEGRAM) == [
        ("api_url", "URL", "--api-url", False, False),
        ("attachments_max_bytes", "SIZE", "--attachments-max", False, False),
    ]
    assert TELEGRAM.adapter == "orchestrator.channels.telegram.adapter:TelegramAdapter"
    assert TELEGRAM.loggers == ("telegram", "httpx", "httpcore")
    assert TELEGRAM.summary == "Telegram: a bot token from @BotFather."
    assert TELEGRAM.example == (
        "orchestrator channel add telegram familybot --token-env TELEGRAM_FAMILY_TOKEN"
    )
    assert (DISCORD.name, DISCORD.title, DISCORD.credential) == ("discord", "Discord", "token")
    assert flags(DISCORD) == flags(TELEGRAM)
    assert DISCORD.adapter == "orchestrator.channels.discord.adapter:DiscordAdapter"
    assert DISCORD.loggers == ("discord",)
    assert DISCORD.example == "orchestrator channel add discord server --token-env DISCORD_TOKEN"
    assert (MATRIX.name, MATRIX.title, MATRIX.credential) == ("matrix", "Matrix", "token")
    assert flags(MATRIX) == [
        ("homeserver", "URL", "--homeserver", False, True),
        ("user_id", "ID", "--user-id", False, True),
        ("allow_inviters", "ID", "--allow-inviter", True, False),
        ("attachments_max_bytes", "SIZE", "--attachments-max", False, False),
    ]
    assert MATRIX.adapter == "orchestrator.channels.matrix.adapter:MatrixAdapter"
    assert MATRIX.loggers == ("nio", "aiohttp.client")
    assert (SLACK.name, SLACK.title, SLACK.credential) == ("slack", "Slack", "bot_token")
    assert flags(SLACK) == [
        ("app_token_env", "VAR", "--app-token-env", False, False),
        ("app_token_secret", "NAME", "--app-token-secret", False, False),
        ("api_url", "URL", "--api-url", False, False),
        ("attachments_max_bytes", "SIZE", "--attachments-max", False, False),
    ]
    assert SLACK.adapter == "orchestrator.channels.slack.adapter:SlackAdapter"
    assert SLACK.loggers == ("slack_sdk",)
    assert SLACK.example == (
        "orchestrator channel add slack team --bot-token-env SLACK_BOT_TOKEN \\\n"
        "      --app-token-env SLACK_APP_TOKEN"
    )


def test_kinds_registry_prefixes_and_loggers() -> None:
    from orchestrator.config.kinds import (
        account_kind,
        account_kinds,
        kind_loggers,
        prefix_owner,
        reserved_prefixes,
        unproven_sender,
    )

    assert list(account_kinds()) == ["discord", "email", "matrix", "slack", "telegram"]
    assert reserved_prefixes() == (
        "discord:",
        "email:",
        "matrix:",
        "slack:",
        "telegram:",
        "operator",
        "task:",
        "cli:",
    )
    assert kind_loggers() == (
        "discord",
        "imapclient",
        "aiosmtplib",
        "nio",
        "aiohttp.client",
        "slack_sdk",
        "telegram",
        "httpx",
        "httpcore",
    )
    own = "a channel of the daemon's own (its Slack accounts, kind slack)"
    assert [prefix_owner(p) for p in ("slack:", "sl", "slack:x")] == [own, own, own]
    daemon = "the daemon itself (the operator, scheduled tasks, the command line)"
    assert [prefix_owner(p) for p in ("operator:", "task:", "cli", "t")] == [daemon] * 3 + [
        "a channel of the daemon's own (its Telegram accounts, kind telegram)"
    ]
    assert prefix_owner("rocketchat:") is None
    email = unproven_sender("email:a@b.org")
    assert email is not None and email.name == "email"
    assert unproven_sender("slack:U1") is None and unproven_sender("rocketchat:1") is None
    assert account_kind("matrix").name == "matrix"
    with pytest.raises(InvalidConfig) as caught:
        account_kind("irc")
    assert str(caught.value) == (
        "unknown channel kind 'irc'; valid kinds: discord, email, matrix, slack, telegram"
    )


def test_register_and_unregister_a_kind() -> None:
    from orchestrator.config.kinds import (
        NO_OPTIONS,
        AccountKind,
        KindOption,
        account_kinds,
        register_kind,
        unregister_kind,
    )

    kind = AccountKind(
        name="zz_test",
        title="ZZ",
        summary="",
        options=(KindOption("room_name", "NAME", "a room"),),
        parse=lambda item: NO_OPTIONS,
        adapter="x:Y",
        loggers=("zz",),
    )
    assert (kind.prefix, kind.keys, kind.credential_keys) == (
        "zz_test:",
        ("room_name",),
        ("token_env", "token_secret"),
    )
    assert kind.options[0].flag == "--room-name"
    assert (kind.proves_senders, kind.files_out_max_bytes) == (True, 50 * 1024**2)
    with pytest.raises(ValueError, match=r"kind name 'Bad' must match \[a-z\]"):
        register_kind(AccountKind("Bad", "", "", (), lambda item: NO_OPTIONS, "x:Y"))
    register_kind(kind)
    try:
        assert account_kinds()["zz_test"] is kind
        assert list(account_kinds())[-1] == "zz_test"  # in name order
        copy = account_kinds()
        copy.pop("zz_test")
        assert "zz_test" in account_kinds()  # a copy
    finally:
        unregister_kind("zz_test")
    assert "zz_test" not in account_kinds()
    unregister_kind("zz_test")  # twice: nothing


def test_kind_options_base() -> None:
    from orchestrator.channels.matrix.kind import MatrixOptions
    from orchestrator.config.kinds import NO_OPTIONS

    assert (NO_OPTIONS.to_dict(), NO_OPTIONS.default_trust, NO_OPTIONS.secrets()) == (
        {},
        "member",
        (),
    )
    assert MatrixOptions("h", "u", ("a", "b"), 5).to_dict() == {
        "homeserver": "h",
        "user_id": "u",
        "allow_inviters": ["a", "b"],
        "attachments_max_bytes": 5,
    }


def test_accounts_helpers() -> None:
    from orchestrator.config.accounts import account_of_channel, bridge_prefix

    assert account_of_channel("telegram:fam") == "fam"
    assert account_of_channel("http:x") is None and account_of_channel("telegram") is None
    assert bridge_prefix("slack:") == "slack-bridge:"
    assert bridge_prefix("operator:") == "bridge-operator:"
    assert bridge_prefix("x" * 30 + ":") == "bridge:"


def test_http_tokens(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.accounts import HttpToken, http_tokens

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    (home / "orchestrator.yaml").write_text(
        "http:\n  tokens:\n    rc:\n      token_env: RC_T\n      senders: 'rocketchat:'\n"
    )
    tokens = load_config(Home(home)).http_tokens
    assert tokens == {"rc": HttpToken("rc", "rocketchat:", "RC_T", None)}
    assert tokens["rc"].token_reference() == "env RC_T"
    monkeypatch.setenv("RC_T", "a" * 16)
    assert http_tokens(tokens, None) == ({"a" * 16: tokens["rc"]}, [])
    monkeypatch.setenv("RC_T", "a" * 15)
    assert http_tokens(tokens, None) == ({}, ["HTTP token 'rc' is shorter than 16 characters"])
    monkeypatch.delenv("RC_T")
    found, problems = http_tokens(tokens, None)
    assert found == {} and len(problems) == 1 and "HTTP token 'rc'" in problems[0]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "rc:\n  token_env: RC\n  senders: 'Rocket:'",
            "5: http.tokens.rc.senders: got 'Rocket:'; expected a prefix such as 'rocketchat:' "
            "(lowercase, ending in ':')",
        ),
        (
            "rc:\n  token_env: RC\n  senders: 'slack:'",
            "5: http.tokens.rc.senders: 'slack:' belongs to a channel of the daemon's own (its "
            "Slack accounts, kind slack), and a bridge's token may not name those senders; "
            "rename the bridge's prefix, such as 'slack-bridge:' (the bridge then sends ids "
            "under it, and group.yaml's creators and members name them so)",
        ),
        (
            "Bad:\n  token_env: RC\n  senders: 'x:'",
            "3: http.tokens.Bad: token names are 1-40 of a-z, 0-9, '-' and '_', starting with one",
        ),
        (
            "rc:\n  token_env: RC\n  senders: 'x:'\n  foo: 1",
            "6: http.tokens.rc.foo: unknown key; valid keys here: senders, token_env, token_secret",
        ),
    ],
)
def test_http_token_errors(home: Path, monkeypatch, body: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    text = "http:\n  tokens:\n" + "".join(f"    {line}\n" for line in body.splitlines())
    (home / "orchestrator.yaml").write_text(text)
    with pytest.raises(InvalidConfig) as caught:
        load_config(Home(home))
    assert str(caught.value).replace(str(home), "HOME") == f"HOME/orchestrator.yaml:{expected}"


def test_account_token_and_credential(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.accounts import ChannelAccount, account_token

    monkeypatch.setenv("TG_T", "tok")
    account = ChannelAccount("fam", "telegram", token_env="TG_T")
    assert account_token(account, None) == "tok"
    assert ChannelAccount("m", "email").credential == "password"
    assert ChannelAccount("m", "nosuch").credential == "token"
    ref = ChannelAccount("m", "email", token_secret="pw").token
    assert (ref.env_key, ref.secret_key, ref.secret) == ("password_env", "password_secret", "pw")


def test_kinds_help_texts() -> None:
    """What ``channel add --help`` shows of each kind, word for word."""
    from orchestrator.channels.discord.kind import KIND as DISCORD
    from orchestrator.channels.matrix.kind import KIND as MATRIX
    from orchestrator.channels.slack.kind import KIND as SLACK
    from orchestrator.channels.telegram.kind import KIND as TELEGRAM

    size = "The largest file stored per message (default 10m; 0 refuses files)."
    assert [o.help for o in TELEGRAM.options] == [
        "The app's API base URL, for a self-hosted Telegram Bot API server or a test server "
        "(default: the app's own).",
        size,
    ]
    assert DISCORD.summary == (
        "Discord: a bot's token (Developer Portal, Bot); turn on the Message Content intent "
        "there for channels bound with activation always."
    )
    assert [o.help for o in DISCORD.options] == [
        "The API base URL, for a proxy or a test server (default: Discord's own).",
        size,
    ]
    assert MATRIX.summary == (
        "Matrix: the bot's user, an access token of it (from logging it in once), its "
        "homeserver; --allow-inviter names whose invites it accepts."
    )
    assert [o.help for o in MATRIX.options] == [
        "Matrix: the homeserver's base URL.",
        "Matrix: the bot's user id (@bot:example.org).",
        "Matrix: a user whose invites the bot accepts (repeatable); other invites get a "
        "pairing code.",
        "Matrix: the largest image, file or audio stored per message (default 10m; 0 "
        "refuses files).",
    ]
    assert MATRIX.example == (
        "orchestrator channel add matrix helper --homeserver https://matrix.example.org \\\n"
        "      --user-id @helper:example.org --token-env MATRIX_TOKEN --allow-inviter "
        "@me:example.org"
    )
    assert SLACK.summary == (
        "Slack: an app in Socket Mode: its bot token (xoxb-...) and an app-level token "
        "(xapp-..., scope connections:write)."
    )
    assert [o.help for o in SLACK.options] == [
        "Slack: read the app-level token (xapp-...) from $VAR.",
        "Slack: read the app-level token (xapp-...) from entry NAME of the secrets file.",
        "The Web API's base URL, for a proxy or a test server (default: Slack's own).",
        size,
    ]
    # the largest file the agent may send to a chat of each app
    assert (TELEGRAM.files_out_max_bytes, MATRIX.files_out_max_bytes) == (50 * 1024**2,) * 2
    assert (DISCORD.files_out_max_bytes, SLACK.files_out_max_bytes) == (10 * 1024**2, 1024**3)
    assert all(k.proves_senders and k.advice is None for k in (MATRIX, SLACK))


class FakePoint:
    def __init__(self, name: str, value: object) -> None:
        self.name, self.value, self._value = name, f"pkg:{name}", value

    def load(self) -> object:
        if isinstance(self._value, Exception):
            raise self._value
        return self._value


def test_kinds_from_entry_points(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    import importlib.metadata
    import logging

    from orchestrator.channels.telegram.kind import KIND as TELEGRAM
    from orchestrator.config import kinds
    from orchestrator.config.kinds import NO_OPTIONS, AccountKind, account_kinds

    plug = AccountKind("plug", "Plug", "", (), lambda item: NO_OPTIONS, "x:Y")
    clash = AccountKind("telegram", "Other", "", (), lambda item: NO_OPTIONS, "x:Z")
    points = [
        FakePoint("broken", RuntimeError("no module")),
        FakePoint("notakind", object()),
        FakePoint("telegram", clash),
        FakePoint("plug", plug),
    ]
    asked = []

    def entry_points(group: str):  # type: ignore[no-untyped-def]
        asked.append(group)
        return points

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    monkeypatch.setattr(kinds, "_found", None)
    monkeypatch.setattr(kinds, "_merged", None)
    with caplog.at_level(logging.WARNING, logger="orchestrator.config"):
        found = account_kinds()
    assert asked == ["orchestrator.account_kinds"]
    assert list(found) == ["discord", "email", "matrix", "plug", "slack", "telegram"]
    assert found["plug"] is plug and found["telegram"] is TELEGRAM  # built-in wins
    assert [r.getMessage() for r in caplog.records] == [
        "account kind broken (pkg:broken) could not be loaded: no module"
    ]
    account_kinds()
    assert asked == ["orchestrator.account_kinds"]  # found once


@pytest.mark.parametrize(
    "head",
    [
        "kind: telegram\ntoken_env: T",
        "kind: discord\ntoken_env: T",
        "kind: slack\nbot_token_env: B\napp_token_env: A",
    ],
)
def test_api_url_length_and_zero_size(home: Path, monkeypatch, head: str) -> None:  # type: ignore[no-untyped-def]
    url = "http://h/" + "a" * 503
    options = accounts(
        home, channel(f"{head}\napi_url: {url}\nattachments_max_bytes: 0"), monkeypatch
    )["fam"].options
    assert options.api_url.rstrip("/") == url  # type: ignore[attr-defined]
    assert options.attachments_max_bytes == 0  # type: ignore[attr-defined]
    message = error(home, channel(f"{head}\napi_url: {url}a"), monkeypatch)
    assert message.endswith("channels.fam.api_url: is 513 characters; at most 512 allowed")


def test_sender_rate_keys_each_default(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    only_per = channel("kind: telegram\ntoken_env: T\nsender_rate: {per: 1m}")
    account = accounts(home, only_per, monkeypatch)["fam"]
    assert (account.rate_messages, account.rate_seconds) == (20, 60)
    only_messages = channel("kind: telegram\ntoken_env: T\nsender_rate: {messages: 5}")
    account = accounts(home, only_messages, monkeypatch)["fam"]
    assert (account.rate_messages, account.rate_seconds) == (5, 600)


def test_an_address_keeps_what_ends_it_but_its_slashes(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    heads = {
        "telegram": "kind: telegram\ntoken_env: T\napi_url",
        "discord": "kind: discord\ntoken_env: T\napi_url",
        "slack": "kind: slack\nbot_token_env: B\napp_token_env: A\napi_url",
    }
    for kind, head in heads.items():
        options = accounts(home, channel(f"{head}: http://h.example/X//"), monkeypatch)["fam"]
        assert options.to_dict()["api_url"] == (
            "http://h.example/X/" if kind == "slack" else "http://h.example/X"
        ), kind
    matrix = channel(
        "kind: matrix\ntoken_env: T\nhomeserver: https://m.example/X//\nuser_id: '@h:e.org'"
    )
    assert accounts(home, matrix, monkeypatch)["fam"].to_dict()["homeserver"] == (
        "https://m.example/X"
    )


def test_matrix_homeserver_and_user_id_lengths(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    homeserver = "https://m.example/" + "a" * 494
    user_id = "@" + "u" * 246 + ":e.org"
    assert (len(homeserver), len(user_id)) == (512, 253)
    user_id += "ab"
    text = channel(
        f"kind: matrix\ntoken_env: T\nhomeserver: {homeserver}\nuser_id: '{user_id}'\n"
        f"allow_inviters: ['{user_id}']"
    )
    options = accounts(home, text, monkeypatch)["fam"].to_dict()
    assert (options["homeserver"], options["user_id"]) == (homeserver, user_id)
    assert options["allow_inviters"] == [user_id]
    message = error(home, text.replace(f"['{user_id}", f"['{user_id}g"), monkeypatch)
    assert "channels.fam.allow_inviters[0]: must be 1..255 characters, got '@uuu" in message
    message = error(home, text.replace(homeserver, homeserver + "a"), monkeypatch)
    assert message.endswith("channels.fam.homeserver: is 513 characters; at most 512 allowed")
    message = error(home, text.replace(f"'{user_id}'\n", f"'{user_id}g'\n"), monkeypatch)
    assert message.endswith("channels.fam.user_id: is 256 characters; at most 255 allowed")


def test_http_token_senders_length_and_secret(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.accounts import HttpToken

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    senders = "r" * 31 + ":"
    text = f"http:\n  tokens:\n    rc:\n      token_secret: rc-t\n      senders: '{senders}'\n"
    (home / "orchestrator.yaml").write_text(text)
    assert load_config(Home(home)).http_tokens == {"rc": HttpToken("rc", senders, None, "rc-t")}
    (home / "orchestrator.yaml").write_text(text.replace(senders, "r" + senders))
    with pytest.raises(InvalidConfig) as caught:
        load_config(Home(home))
    assert str(caught.value).endswith(
        "http.tokens.rc.senders: is 33 characters; at most 32 allowed"
    )


def test_a_bridge_prefix_is_offered_up_to_the_32_characters_senders_takes() -> None:
    from orchestrator.config.accounts import bridge_prefix

    taken = "operator" + "o" * 16 + ":"
    assert bridge_prefix(taken) == "bridge-" + taken
    assert len(bridge_prefix(taken)) == 32
    assert bridge_prefix("o" + taken) == "bridge:"


def test_account_of_channel_splits_at_the_first_colon() -> None:
    from orchestrator.config.accounts import account_of_channel

    assert account_of_channel("telegram:fam:x") == "fam:x"


def secrets_file(home: Path, text: str) -> Path:
    path = home / "secrets.yaml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_account_token_from_the_secrets_file_and_its_errors(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.accounts import ChannelAccount, account_token
    from orchestrator.errors import OrchestratorError

    secrets = secrets_file(home, "tg: s3cret\n")
    assert account_token(ChannelAccount("fam", "telegram", token_secret="tg"), secrets) == "s3cret"
    monkeypatch.delenv("TG_T", raising=False)
    with pytest.raises(OrchestratorError) as caught:
        account_token(ChannelAccount("fam", "telegram", token_env="TG_T"), None)
    assert caught.value.message == "channel account 'fam': environment variable TG_T is not set"


def test_http_tokens_each_found_or_named_in_its_problem(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.accounts import HttpToken, http_tokens

    secrets = secrets_file(home, "good: " + "g" * 16 + "\nshort: s\n")
    monkeypatch.delenv("NO_T", raising=False)
    tokens = {
        "absent": HttpToken("absent", "a:", "NO_T"),
        "short": HttpToken("short", "s:", None, "short"),
        "good": HttpToken("good", "g:", None, "good"),
    }
    assert http_tokens(tokens, secrets) == (
        {"g" * 16: tokens["good"]},
        [
            "HTTP token 'absent': environment variable NO_T is not set",
            "HTTP token 'short' is shorter than 16 characters",
        ],
    )


def test_unregistering_a_kind_keeps_every_other_kind() -> None:
    from orchestrator.config.kinds import (
        NO_OPTIONS,
        AccountKind,
        account_kinds,
        register_kind,
        unregister_kind,
    )

    register_kind(AccountKind("zz_test", "ZZ", "", (), lambda item: NO_OPTIONS, "x:Y"))
    assert "zz_test" in account_kinds()
    unregister_kind("zz_test")
    assert list(account_kinds()) == ["discord", "email", "matrix", "slack", "telegram"]


def test_with_no_kind_at_all_the_error_says_none(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config import kinds

    monkeypatch.setattr(kinds, "_found", {})
    monkeypatch.setattr(kinds, "_registered", {})
    monkeypatch.setattr(kinds, "_merged", None)
    with pytest.raises(InvalidConfig) as caught:
        kinds.account_kind("irc")
    assert str(caught.value) == "unknown channel kind 'irc'; valid kinds: none"


def test_an_account_without_a_kind(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert error(home, channel("token_env: T"), monkeypatch) == (
        "HOME/orchestrator.yaml:2: channels.fam.kind: is required"
    )


def test_kinds_are_looked_for_only_in_the_folders_of_packages(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import importlib.metadata
    import pkgutil
    from types import SimpleNamespace

    from orchestrator.config import kinds

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    monkeypatch.setattr(kinds, "BUILT_IN_PACKAGE", "no_such_package_of_kinds")
    assert kinds._discover() == {}
    monkeypatch.undo()
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "kind.py").write_text("KIND = None\n")
    found = [
        pkgutil.ModuleInfo(SimpleNamespace(), "zipped", True),  # a finder with no folder
        pkgutil.ModuleInfo(SimpleNamespace(path=str(tmp_path)), "plain", False),  # a module
    ]
    monkeypatch.setattr(pkgutil, "iter_modules", lambda places: found)
    assert kinds._discover() == {}
