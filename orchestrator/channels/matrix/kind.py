"""Matrix accounts in orchestrator.yaml:

channels:
  helper:
    kind: matrix
    token_env: MATRIX_TOKEN              # an access token of the bot's user
    homeserver: https://matrix.example.org
    user_id: "@helper:example.org"
    allow_inviters: ["@me:example.org"]  # whose invites it accepts
    attachments_max_bytes: 10m           # images, files and audio stored per message
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from orchestrator.config.kinds import AccountKind, KindOption, KindOptions
from orchestrator.limits import DEFAULT_ATTACHMENT_MAX_BYTES
from orchestrator.validate import MappingReader

MATRIX_USER_PATTERN = r"@[a-z0-9._=/+-]+:[A-Za-z0-9.:\[\]-]+"
URL_PATTERN = r"https?://[^\s/]+(/\S*)?"


@dataclass(frozen=True)
class MatrixOptions(KindOptions):
    homeserver: str = ""  # the homeserver's base URL
    user_id: str = ""  # the bot's user id (@bot:example.org)
    allow_inviters: tuple[str, ...] = ()  # whose invites the bot accepts
    attachments_max_bytes: int = DEFAULT_ATTACHMENT_MAX_BYTES  # a file stored per message


def parse(item: MappingReader) -> MatrixOptions:
    homeserver = item.text("homeserver", pattern=URL_PATTERN, max_chars=512).rstrip("/")
    user_id = item.text("user_id", pattern=MATRIX_USER_PATTERN, max_chars=255)
    inviters = item.id_list("allow_inviters", max_chars=255)
    for inviter in inviters:
        if not re.fullmatch(MATRIX_USER_PATTERN, inviter):
            raise item.fail("allow_inviters", f"{inviter!r} is not a Matrix user id (@name:server)")
    from orchestrator.units import parse_size

    size = parse_size(item.raw("attachments_max_bytes", DEFAULT_ATTACHMENT_MAX_BYTES))
    if size is None or not 0 <= size <= 2 * 1024**3:
        raise item.fail(
            "attachments_max_bytes",
            f"got {item.data.get('attachments_max_bytes')!r}; expected a size up to 2g "
            "(such as 10m; 0 refuses every file)",
        )
    return MatrixOptions(homeserver, user_id, inviters, size)


KIND = AccountKind(
    name="matrix",
    title="Matrix",
    summary="Matrix: the bot's user, an access token of it (from logging it in once), its "
    "homeserver; --allow-inviter names whose invites it accepts.",
    options=(
        KindOption("homeserver", "URL", "Matrix: the homeserver's base URL.", required=True),
        KindOption("user_id", "ID", "Matrix: the bot's user id (@bot:example.org).", required=True),
        KindOption(
            "allow_inviters",
            "ID",
            "Matrix: a user whose invites the bot accepts (repeatable); "
            "other invites get a pairing code.",
            multiple=True,
            cli_flag="--allow-inviter",
        ),
        KindOption(
            "attachments_max_bytes",
            "SIZE",
            "Matrix: the largest image, file or audio stored per message (default 10m; 0 "
            "refuses files).",
            cli_flag="--attachments-max",
        ),
    ),
    parse=parse,
    adapter="orchestrator.channels.matrix.adapter:MatrixAdapter",
    loggers=("nio", "aiohttp.client"),
    example="orchestrator channel add matrix helper --homeserver https://matrix.example.org \\\n"
    "      --user-id @helper:example.org --token-env MATRIX_TOKEN --allow-inviter @me:example.org",
)
