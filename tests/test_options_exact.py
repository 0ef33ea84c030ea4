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
    assert "in the 1 group chats" in nameless.text
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
