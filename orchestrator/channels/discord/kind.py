"""Discord accounts in orchestrator.yaml:

channels:
  server:
    kind: discord
    token_env: DISCORD_TOKEN           # the bot's token (Developer Portal, Bot)
    attachments_max_bytes: 10m         # files stored per message
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.config.kinds import AccountKind, Advice, KindOption, KindOptions
from orchestrator.limits import DEFAULT_ATTACHMENT_MAX_BYTES, DISCORD_FILE_MAX_BYTES
from orchestrator.validate import MappingReader

URL_PATTERN = r"https?://[^\s/]+(/\S*)?"


@dataclass(frozen=True)
class DiscordOptions(KindOptions):
    # None: https://discord.com (discord.py keeps one for the process: every Discord
    # account of a daemon uses the same)
    api_url: str | None = None
    attachments_max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES


def parse(item: MappingReader) -> DiscordOptions:
    from orchestrator.units import parse_size

    api_url = (
        item.text("api_url", pattern=URL_PATTERN, max_chars=512).rstrip("/")
        if "api_url" in item.data
        else None
    )
    size = parse_size(item.raw("attachments_max_bytes", DEFAULT_ATTACHMENT_MAX_BYTES))
    if size is None or not 0 <= size <= 1024**3:
        raise item.fail(
            "attachments_max_bytes",
            f"got {item.data.get('attachments_max_bytes')!r}; expected a size up to 1g "
            "(such as 10m; 0 refuses every file)",
        )
    return DiscordOptions(api_url, size)


def advice(health: Mapping[str, Any], chats: Sequence[str]) -> Advice | None:
    """The Message Content intent off: in servers the bot reads only what mentions it."""
    if health.get("can_read_all_group_messages") is not False:
        return None
    bot = health.get("bot") or "the bot"
    return Advice(
        f"{bot} does not have Discord's Message Content intent: in servers it is sent the "
        "text only of messages that mention it or reply to it (and of direct messages), so "
        "a channel bound with activation always gets nothing else, and files in other "
        "messages are not seen",
        "to let it read every message: Discord Developer Portal, your application, Bot, "
        "Privileged Gateway Intents, turn on Message Content Intent; then orchestrator "
        "reload (the daemon asks for the intent when the application has it)",
    )


KIND = AccountKind(
    name="discord",
    title="Discord",
    summary="Discord: a bot's token (Developer Portal, Bot); turn on the Message Content "
    "intent there for channels bound with activation always.",
    options=(
        KindOption(
            "api_url",
            "URL",
            "The API base URL, for a proxy or a test server (default: Discord's own).",
        ),
        KindOption(
            "attachments_max_bytes",
            "SIZE",
            "The largest file stored per message (default 10m; 0 refuses files).",
            cli_flag="--attachments-max",
        ),
    ),
    parse=parse,
    adapter="orchestrator.channels.discord.adapter:DiscordAdapter",
    loggers=("discord",),
    advice=advice,
    example="orchestrator channel add discord server --token-env DISCORD_TOKEN",
    files_out_max_bytes=DISCORD_FILE_MAX_BYTES,
)
