"""Slack accounts in orchestrator.yaml:

channels:
  team:
    kind: slack
    bot_token_env: SLACK_BOT_TOKEN     # the bot token (xoxb-...), for the Web API: the
                                       # account's credential
    app_token_env: SLACK_APP_TOKEN     # an app-level token (xapp-...) with connections:write
    attachments_max_bytes: 10m         # files stored per message
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.kinds import AccountKind, KindOption, KindOptions
from orchestrator.limits import DEFAULT_ATTACHMENT_MAX_BYTES, SLACK_FILE_MAX_BYTES
from orchestrator.secrets import SecretRef, parse_secret_ref
from orchestrator.validate import MappingReader

URL_PATTERN = r"https?://[^\s/]+(/\S*)?"
DEFAULT_API_URL = "https://slack.com/api/"


@dataclass(frozen=True)
class SlackOptions(KindOptions):
    api_url: str | None = None  # None: https://slack.com/api/
    attachments_max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES
    # the app-level token (Socket Mode), beside the account's credential (the bot token)
    app_token: SecretRef = field(
        default_factory=lambda: SecretRef(None, None, "app_token_env", "app_token_secret")
    )

    def secrets(self) -> tuple[SecretRef, ...]:
        return (self.app_token,)

    def to_dict(self) -> dict[str, Any]:
        """For people and JSON: where the app token comes from, never the token."""
        return {
            "api_url": self.api_url,
            "attachments_max_bytes": self.attachments_max_bytes,
            "app_token": self.app_token.describe(),
        }


def parse(item: MappingReader) -> SlackOptions:
    from orchestrator.units import parse_size

    api_url = (
        item.text("api_url", pattern=URL_PATTERN, max_chars=512).rstrip("/") + "/"
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
    app_token = parse_secret_ref(item, "app_token_env", "app_token_secret", required=True)
    return SlackOptions(api_url, size, app_token)


KIND = AccountKind(
    name="slack",
    title="Slack",
    summary="Slack: an app in Socket Mode: its bot token (xoxb-...) and an app-level token "
    "(xapp-..., scope connections:write).",
    options=(
        KindOption(
            "app_token_env",
            "VAR",
            "Slack: read the app-level token (xapp-...) from $VAR.",
        ),
        KindOption(
            "app_token_secret",
            "NAME",
            "Slack: read the app-level token (xapp-...) from entry NAME of the secrets file.",
        ),
        KindOption(
            "api_url",
            "URL",
            "The Web API's base URL, for a proxy or a test server (default: Slack's own).",
        ),
        KindOption(
            "attachments_max_bytes",
            "SIZE",
            "The largest file stored per message (default 10m; 0 refuses files).",
            cli_flag="--attachments-max",
        ),
    ),
    parse=parse,
    adapter="orchestrator.channels.slack.adapter:SlackAdapter",
    loggers=("slack_sdk",),
    example="orchestrator channel add slack team --bot-token-env SLACK_BOT_TOKEN \\\n"
    "      --app-token-env SLACK_APP_TOKEN",
    credential="bot_token",
    files_out_max_bytes=SLACK_FILE_MAX_BYTES,
)
