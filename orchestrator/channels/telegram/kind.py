"""Telegram accounts in orchestrator.yaml:

channels:
  familybot:
    kind: telegram
    token_env: TELEGRAM_FAMILY_TOKEN   # a bot token from @BotFather
    api_url: http://127.0.0.1:8081     # optional: a self-hosted Bot API server
    attachments_max_bytes: 10m         # photos and documents stored per message
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.config.kinds import AccountKind, Advice, KindOption, KindOptions
from orchestrator.limits import DEFAULT_ATTACHMENT_MAX_BYTES
from orchestrator.units import plural
from orchestrator.validate import MappingReader

URL_PATTERN = r"https?://[^\s/]+(/\S*)?"


@dataclass(frozen=True)
class TelegramOptions(KindOptions):
    api_url: str | None = None  # None: https://api.telegram.org
    attachments_max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES


def parse(item: MappingReader) -> TelegramOptions:
    from orchestrator.units import parse_size

    api_url = (
        item.text("api_url", pattern=URL_PATTERN, max_chars=512).rstrip("/")
        if "api_url" in item.data
        else None
    )
    size = parse_size(item.raw("attachments_max_bytes", DEFAULT_ATTACHMENT_MAX_BYTES))
    if size is None or not 0 <= size <= 2 * 1024**3:
        raise item.fail(
            "attachments_max_bytes",
            f"got {item.data.get('attachments_max_bytes')!r}; expected a size up to 2g "
            "(such as 10m; 0 refuses every file)",
        )
    return TelegramOptions(api_url, size)


def _handle(bot: object) -> str:
    return f"@{bot}" if bot else "the bot"


def advice(health: Mapping[str, Any], chats: Sequence[str]) -> Advice | None:
    """Privacy mode on, with group chats bound: the bot sees only part of them."""
    in_groups = [c for c in chats if c.startswith("-")]  # group chat ids are negative
    if health.get("can_read_all_group_messages") is not False or not in_groups:
        return None
    return Advice(
        f"{_handle(health.get('bot'))} has Telegram's privacy mode on: in the "
        f"{plural(len(in_groups), 'group chat')} bound it is sent only commands (/...), replies to "
        "its own messages and service messages, not the rest of the conversation",
        "to let it see every message: @BotFather, /setprivacy, Disable, then remove the "
        "bot from those groups and add it again (or make it a group admin)",
    )


KIND = AccountKind(
    name="telegram",
    title="Telegram",
    summary="Telegram: a bot token from @BotFather.",
    options=(
        KindOption(
            "api_url",
            "URL",
            "The app's API base URL, for a self-hosted Telegram Bot API server or a test "
            "server (default: the app's own).",
        ),
        KindOption(
            "attachments_max_bytes",
            "SIZE",
            "The largest file stored per message (default 10m; 0 refuses files).",
            cli_flag="--attachments-max",
        ),
    ),
    parse=parse,
    adapter="orchestrator.channels.telegram.adapter:TelegramAdapter",
    loggers=("telegram", "httpx", "httpcore"),
    advice=advice,
    example="orchestrator channel add telegram familybot --token-env TELEGRAM_FAMILY_TOKEN",
)
