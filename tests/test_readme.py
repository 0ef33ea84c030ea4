"""The README's promises, checked: every row of its limits table against the constant
the code enforces (a changed constant or a changed row fails here), and the quick start
is exactly two commands."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator import limits as L
from orchestrator import wire
from orchestrator.agent.providers.relay import RelayProvider  # noqa: F401 (importable)

README = Path(__file__).parent.parent / "README.md"
TIMES = "\u00d7"  # the multiplication sign the README uses


def _size(n: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} bytes"


def _s(seconds: float) -> str:
    return f"{seconds:g} s"


# README row label -> its value, rendered from the constants.
EXPECTED: dict[str, Callable[[], str]] = {
    "memory file injected at a fresh context (each of `index.md`, `system/definition.md`)": (
        lambda: f"{L.MEMORY_FILE_BUDGET_CHARS:,} characters"
    ),
    "operator's instructions / learned behaviors injected at a fresh context (each)": (
        lambda: f"{L.STANDING_TEXT_BUDGET_CHARS:,} characters"
    ),
    "learned behaviors a write may hold (default of `learned_max_chars`; its ceiling)": (
        lambda: f"{L.DEFAULT_LEARNED_MAX_CHARS:,} characters; {L.MAX_LEARNED_MAX_CHARS:,}"
    ),
    "a held request's life; a piece of its notice; the longest text a chat is shown (longer: "
    "the operator approves)": lambda: (
        f"{_s(L.HELD_REQUEST_TTL_SECONDS)}; {L.HELD_NOTICE_PIECE_CHARS:,} characters; "
        f"{L.HELD_NOTICE_MAX_CHARS:,} characters"
    ),
    "group display name": lambda: f"{L.GROUP_NAME_MAX_CHARS} characters",
    "sender id": lambda: f"{L.SENDER_ID_MAX_CHARS} characters",
    "config file size": lambda: _size(L.CONFIG_FILE_MAX_BYTES),
    "registry pull attempt during an image build": lambda: _s(L.BASE_PULL_TIMEOUT_SECONDS),
    "transient engine errors": lambda: (
        f"retried {L.ENGINE_RETRY_ATTEMPTS} times, exponential backoff up to "
        f"{_s(L.ENGINE_RETRY_MAX_WAIT_SECONDS)}"
    ),
    "container ready after start (runner answers); a running container's runner answers (else "
    "it is made again)": lambda: (
        f"{_s(L.CONTAINER_READY_TIMEOUT_SECONDS)}; {_s(L.RUNNER_DEAD_SOCKET_SECONDS)}"
    ),
    "SessionStart hook timeout / output kept": lambda: (
        f"{_s(L.DEFAULT_HOOK_TIMEOUT_SECONDS)} / {L.HOOK_OUTPUT_MAX_CHARS:,} characters"
    ),
    "tool steps in one turn": lambda: str(L.MAX_TOOL_STEPS_PER_TURN),
    "appended by one memory flush": lambda: f"{L.FLUSH_MAX_CHARS:,} characters",
    "an early memory flush, once per compaction cycle, at": lambda: (
        f"{L.FLUSH_SOFT_SHARE:.0%} of the context budget"
    ),
    "the room a context budget must leave beside a fresh context": lambda: (
        f"{L.CONTEXT_WORKING_MARGIN_CHARS:,} characters"
    ),
    "recent daily-note lines given to a fresh context": lambda: (
        f"{L.RECENT_NOTES_MAX_CHARS:,} characters, and at most "
        f"{L.FRESH_EXTRA_SHARE:.0%} of the context budget"
    ),
    "messages kept verbatim at compaction": lambda: str(L.COMPACTION_KEEP_MESSAGES),
    "frame on the runner and CLI sockets": lambda: _size(wire.MAX_FRAME_BYTES),
    "delivery attempts before a dead letter": lambda: (
        f"{L.MAX_DELIVERY_ATTEMPTS} (backoff {_s(L.DELIVERY_BACKOFF_FIRST_SECONDS)} doubling, "
        f"at most {_s(L.DELIVERY_BACKOFF_MAX_SECONDS)})"
    ),
    "wait between tries while the engine is away (attempts not counted)": lambda: _s(
        L.ENGINE_AWAY_RETRY_SECONDS
    ),
    "one turn, from delivery to replies (default of `turn_timeout`)": lambda: _s(
        L.DEFAULT_TURN_TIMEOUT_SECONDS
    ),
    "inbound message text": lambda: f"{L.INBOUND_TEXT_MAX_CHARS:,} characters",
    "HTTP request body / long poll": lambda: (
        f"{_size(L.HTTP_BODY_MAX_BYTES)} / {_s(L.HTTP_LONG_POLL_MAX_SECONDS)}"
    ),
    "HTTP request head / body arrival; open HTTP connections; connections waiting to be "
    "accepted": lambda: (
        f"{_s(L.HTTP_HEADER_TIMEOUT_SECONDS)} / {_s(L.HTTP_BODY_TIMEOUT_SECONDS)}; "
        f"{L.HTTP_MAX_CONNECTIONS}; {L.HTTP_LISTEN_BACKLOG}"
    ),
    "open CLI-socket connections / idle time of one": lambda: (
        f"{L.CONTROL_MAX_CONNECTIONS} / {_s(L.CONTROL_IDLE_TIMEOUT_SECONDS)}"
    ),
    "drain at SIGTERM; `down`'s waits for the second SIGTERM and SIGKILL": lambda: (
        f"{_s(L.DRAIN_TIMEOUT_SECONDS)}; {_s(L.DOWN_TERM_WAIT_SECONDS)} and "
        f"{_s(L.DOWN_KILL_WAIT_SECONDS)}"
    ),
    "a pause waiting for the group's turns (migrate-memory, revert): its `turn_timeout` plus": (
        lambda: _s(L.PAUSE_SLACK_SECONDS)
    ),
    "reconcile (idle stop, drift) in the daemon": lambda: (
        f"every {_s(L.RECONCILE_INTERVAL_SECONDS)}"
    ),
    "housekeeping (stale in-flight rows, disk reserve, disk of groups that ran a turn) / disk "
    "of every group": lambda: (
        f"every {_s(L.HOUSEKEEPING_INTERVAL_SECONDS)} / every {_s(L.DISK_CHECK_INTERVAL_SECONDS)}"
    ),
    "default disk limit of a group (`container.disk`: its `memory/`, `sessions/`, `files/` "
    "and history; images are not counted)": lambda: _size(L.DEFAULT_GROUP_DISK_BYTES),
    "a shell call: default timeout (and at most ten times it, within the turn); output kept "
    "(head / tail); a command; a file its processes write (or `container.disk` when "
    "smaller); the disk watcher's check": lambda: (
        f"{_s(L.SHELL_TIMEOUT_SECONDS)} ({L.SHELL_TIMEOUT_MAX_SECONDS:,} s); "
        f"{_size(L.SHELL_OUTPUT_HEAD_BYTES)} / {_size(L.SHELL_OUTPUT_TAIL_BYTES)}; "
        f"{L.SHELL_COMMAND_MAX_CHARS:,} characters; {_size(L.SHELL_FILE_MAX_BYTES)}; "
        f"every {_s(L.SHELL_DISK_CHECK_SECONDS)}"
    ),
    "MCP: servers per group; tools of one server considered; a server's start and listing; a "
    "call (within the turn); a result the model sees; items of a result described, not "
    "shown; a tool's description; a tool's schema; restarts of a server while its container "
    "lives": lambda: (
        f"{L.MCP_SERVERS_MAX}; {L.MCP_TOOLS_MAX}; {_s(L.MCP_LIST_TIMEOUT_SECONDS)}; "
        f"{_s(L.MCP_CALL_TIMEOUT_SECONDS)}; {L.MCP_RESULT_MAX_CHARS:,} characters; "
        f"{L.MCP_RESULT_NOTES_MAX}; "
        f"{L.MCP_DESCRIPTION_MAX_CHARS:,} characters; {_size(L.MCP_SCHEMA_MAX_BYTES)}; "
        f"{L.MCP_RESTARTS_MAX}"
    ),
    "web: a page downloaded (and again decompressed); its text the model sees; one fetch; "
    "redirects; the shell's gate: connections of a group at once": lambda: (
        f"{_size(L.WEB_FETCH_MAX_BYTES)}; {L.WEB_FETCH_MAX_CHARS:,} characters; "
        f"{_s(L.WEB_FETCH_TIMEOUT_SECONDS)}; {L.WEB_REDIRECTS_MAX}; {L.EGRESS_CONNECTIONS_MAX}"
    ),
    "reserve file in `state/`, released on a full disk": lambda: _size(L.STATE_RESERVE_BYTES),
    "a memory file the host reads (lint, search)": lambda: _size(L.MEMORY_FILE_READ_MAX_BYTES),
    "a search-index chunk: lines / characters": lambda: (
        f"{L.SEARCH_CHUNK_MAX_LINES} / {L.SEARCH_CHUNK_MAX_CHARS:,}"
    ),
    "files indexed per group; results of one search (default 6); lines of one `memory_get` "
    "(default 60)": lambda: (
        f"{L.SEARCH_MAX_FILES:,}; {L.SEARCH_MAX_RESULTS}; {L.MEMORY_GET_MAX_LINES}"
    ),
    "a transcript before it rotates; archives kept; turn ids kept": lambda: (
        f"{_size(L.TRANSCRIPT_ROTATE_BYTES)}; {L.TRANSCRIPT_ARCHIVES_KEPT}; "
        f"{L.TRANSCRIPT_TURNS_KEPT:,}"
    ),
    "log lines of one kind": lambda: (
        f"{L.LOG_KIND_BURST} a minute" if L.LOG_KIND_WINDOW_SECONDS == 60 else "?"
    ),
    "relay requests in one turn; a reply request; other small requests": lambda: (
        f"{L.RELAY_OPS_PER_TURN}; {_size(L.RELAY_REPLY_REQUEST_BYTES)}; "
        f"{_size(L.RELAY_SMALL_REQUEST_BYTES)}"
    ),
    "a model request (`model.complete`)": lambda: (
        f"4 {TIMES} ({L.CHARS_PER_TOKEN_ESTIMATE} {TIMES} the context window in tokens + "
        f"{L.MAX_TOOL_STEPS_PER_TURN} {TIMES} {L.TOOL_READ_MAX_CHARS:,}) "
        f"bytes + {_size(L.RELAY_MODEL_REQUEST_SLACK_BYTES)}"
    ),
    "provider attempts per message, over all its deliveries (408, 409, 429, 5xx, "
    "connection faults, broken streams)": lambda: (
        f"{L.RELAY_PROVIDER_ATTEMPTS} attempts, `Retry-After` or 0.5 s doubling, at most "
        f"{_s(L.RELAY_RETRY_MAX_WAIT_SECONDS)} a wait"
    ),
    "a model's context window when nobody says (the offline provider; a server that "
    "reports none; Anthropic's and OpenAI's APIs)": lambda: (
        f"{L.OFFLINE_CONTEXT_TOKENS:,}; {L.SERVER_DEFAULT_CONTEXT_TOKENS:,}; "
        f"{L.VENDOR_CONTEXT_TOKENS['anthropic']:,}; {L.VENDOR_CONTEXT_TOKENS['openai']:,} tokens"
    ),
    "what a server reported of its window is believed for": lambda: (
        f"{_s(L.CONTEXT_WINDOW_CACHE_SECONDS)}"
    ),
    "an answer's length (default of `limits.max_tokens`)": lambda: (
        f"{L.DEFAULT_GROUP_MAX_TOKENS:,} tokens"
    ),
    "a compaction's summary: its cap; shorter than this is empty; else the older "
    "messages kept cut to": lambda: (
        f"{L.SUMMARY_MAX_TOKENS} tokens; {L.SUMMARY_MIN_CHARS} characters; "
        f"{L.SUMMARY_FALLBACK_CHARS:,} characters"
    ),
    "a streamed answer's pieces (at a paragraph after; at a space before; or after waiting)": (
        lambda: (
            f"{L.STREAM_PIECE_MIN_CHARS} characters; {L.STREAM_PIECE_MAX_CHARS:,} "
            f"characters; {_s(L.STREAM_PIECE_SECONDS)}"
        )
    ),
    "tmpfs for `/tmp` and `$HOME` in a container": lambda: f"{_size(L.CONTAINER_TMPFS_BYTES)} each",
    "Swarm: connections a runner keeps open unused; a group's unused connections the daemon "
    "keeps": lambda: f"{L.RUNNER_SPARE_CONNECTIONS}; {L.RUNNER_IDLE_PER_GROUP}",
    "Swarm: a runner's wait before dialling the daemon again (first; doubling to); one dial": (
        lambda: (
            f"{_s(L.RUNNER_DIAL_BACKOFF_FIRST_SECONDS)}; "
            f"{_s(L.RUNNER_DIAL_BACKOFF_MAX_SECONDS)}; {_s(L.RUNNER_DIAL_TIMEOUT_SECONDS)}"
        )
    ),
    "Swarm: what the runner port believes of a group's runner (its credential, its task's "
    "address); asked again on a mismatch at most every": lambda: (
        f"{_s(L.RUNNER_FACTS_SECONDS)}; {_s(L.RUNNER_RECHECK_SECONDS)}"
    ),
    "Swarm: runner connections relayed to the home's other processes at once; asking for "
    "one": lambda: f"{L.RUNNER_RELAYS_AT_ONCE}; {_s(L.RUNNER_RELAY_REQUEST_SECONDS)}",
    "Swarm: the storage check on every node": lambda: _s(L.STORAGE_PROBE_TIMEOUT_SECONDS),
    "Swarm: TLS handshakes at the runner port at once; one handshake": lambda: (
        f"{L.RUNNER_HANDSHAKES_AT_ONCE}; {_s(L.RUNNER_HANDSHAKE_TIMEOUT_SECONDS)}"
    ),
    "Swarm: a turn's wait for one of its runner's connections (else the container is started "
    "or waited for)": lambda: _s(L.RUNNER_CONNECTION_WAIT_SECONDS),
    "Swarm: TCP keepalive of a runner connection (idle; between probes; probes)": lambda: (
        f"{_s(L.RUNNER_KEEPALIVE_IDLE_SECONDS)}; {_s(L.RUNNER_KEEPALIVE_INTERVAL_SECONDS)}; "
        f"{L.RUNNER_KEEPALIVE_PROBES}"
    ),
    "Swarm: a group's credential is valid (the daemon admits only the one its service was "
    "given)": lambda: f"{L.RUNNER_CREDENTIAL_DAYS} days",
    "scheduled tasks per group (default of `tasks.max`; its ceiling)": lambda: (
        f"{L.DEFAULT_TASKS_PER_GROUP}; {L.MAX_TASKS_PER_GROUP:,}"
    ),
    "a task's shortest interval (default of `tasks.min_interval`) / grace (`tasks.grace`)": (
        lambda: f"{_s(L.DEFAULT_TASK_MIN_INTERVAL_SECONDS)} / {_s(L.DEFAULT_TASK_GRACE_SECONDS)}"
    ),
    "the scheduler looks for due tasks": lambda: f"every {_s(L.SCHEDULER_TICK_SECONDS)}",
    "a task's text": lambda: f"{L.TASK_TEXT_MAX_CHARS:,} characters",
    "runs of a group's tasks in one hour, at least (the floor of `tasks.max_runs_per_hour`'s "
    "default; its ceiling)": lambda: f"{L.TASK_RUNS_PER_HOUR_FLOOR}; {L.MAX_TASK_RUNS_PER_HOUR:,}",
    "a file the memory history records whole (larger: by hash only)": lambda: _size(
        L.HISTORY_FILE_MAX_BYTES
    ),
    "messages one `GET .../chats/{chat}/messages` returns (the newest)": lambda: str(
        L.HTTP_CHAT_MESSAGES_MAX
    ),
    "a pairing code's life; codes waiting per channel account": lambda: (
        f"{_s(L.PAIRING_CODE_TTL_SECONDS)}; {L.PAIRINGS_PENDING_MAX}"
    ),
    "a chat app's long poll; its longest wait between failed polls": lambda: (
        f"{_s(L.CHANNEL_POLL_TIMEOUT_SECONDS)}; {_s(L.CHANNEL_BACKOFF_MAX_SECONDS)}"
    ),
    "a 429's `retry_after` honored per call (at most)": lambda: _s(
        L.CHANNEL_RETRY_AFTER_MAX_SECONDS
    ),
    "unsent replies looked for (besides events); typing indicator refreshed": lambda: (
        f"every {_s(L.CHANNEL_SWEEP_SECONDS)}; every {_s(L.CHANNEL_TYPING_SECONDS)}"
    ),
    "Telegram message text (UTF-16 code units; longer replies are split)": lambda: str(
        L.TELEGRAM_TEXT_MAX
    ),
    "a Matrix reply piece (UTF-16 code units)": lambda: str(L.MATRIX_TEXT_MAX),
    "email: an IMAP IDLE renewed every; a server without IDLE asked every (default of "
    "`poll_interval`); one IMAP or SMTP exchange": lambda: (
        f"{_s(L.EMAIL_IDLE_SECONDS)}; {_s(L.EMAIL_POLL_SECONDS)}; {_s(L.EMAIL_TIMEOUT_SECONDS)}"
    ),
    "email: a mail downloaded (larger: its sender is told); files stored from one mail; a "
    "reply mail (longer: in pieces); ids in a reply's References": lambda: (
        f"{_size(L.EMAIL_FETCH_MAX_BYTES)}; {L.EMAIL_ATTACHMENTS_MAX}; "
        f"{L.EMAIL_TEXT_MAX:,} characters; {L.EMAIL_REFERENCES_MAX}"
    ),
    "email: pairing-code mails an account sends in an hour; to one address, at most one per": (
        lambda: f"{L.EMAIL_PAIRING_PER_HOUR}; {_s(L.EMAIL_PAIRING_ADDRESS_SECONDS)}"
    ),
    "a Slack reply piece (characters of mrkdwn)": lambda: str(L.SLACK_TEXT_MAX),
    "a Discord reply piece (characters)": lambda: str(L.DISCORD_TEXT_MAX),
    "a Discord reply claimed when the daemon stopped is sent again (with its nonce) if claimed "
    "less than this before the next start": lambda: _s(L.DISCORD_NONCE_WINDOW_SECONDS),
    "a dashboard login": lambda: _s(L.DASHBOARD_SESSION_SECONDS),
    "media: messages prepared at once (beside the turn workers); tries of one message's "
    "preparation": lambda: f"{L.MEDIA_WORKERS}; {L.MEDIA_ATTEMPTS}",
    "transcription: audio per file (default of `transcription.NAME.max_seconds`; its "
    "ceiling); one transcription; a transcript in the turn's text": lambda: (
        f"{_s(L.DEFAULT_TRANSCRIBE_MAX_SECONDS)}; {_s(L.MAX_TRANSCRIBE_SECONDS)}; "
        f"{_s(L.TRANSCRIBE_TIMEOUT_SECONDS)}; {L.TRANSCRIPT_MAX_CHARS:,} characters"
    ),
    "a PDF: pages read; text kept; CPU of its parse; memory of its parse (a child "
    "process)": lambda: (
        f"{L.PDF_MAX_PAGES}; {L.PDF_TEXT_MAX_CHARS:,} characters; {_s(L.PDF_PARSE_SECONDS)}; "
        f"{_size(L.PARSER_MEMORY_BYTES)}"
    ),
    "an image for a model: the file read; its pixels; the longest side shown; JPEG quality; "
    "images in one request (the newest); re-encoded images kept": lambda: (
        f"{_size(L.IMAGE_SOURCE_MAX_BYTES)}; {L.IMAGE_SOURCE_MAX_PIXELS:,}; "
        f"{L.IMAGE_MAX_SIDE} pixels; {L.IMAGE_JPEG_QUALITY}; {L.IMAGES_PER_REQUEST_MAX}; "
        f"{L.IMAGE_CACHE_ITEMS}"
    ),
    "send_file: a file (less where an app says); files in one turn; a caption; kept in the "
    "outbox": lambda: (
        f"{_size(L.FILE_SEND_MAX_BYTES)}; {L.FILES_SENT_PER_TURN_MAX}; "
        f"{L.FILE_CAPTION_MAX_CHARS:,} characters; {_s(L.OUTBOX_KEEP_SECONDS)}"
    ),
    "Telegram: an image sent as a photo (larger: as a document); a caption": lambda: (
        f"{_size(L.TELEGRAM_PHOTO_MAX_BYTES)}; {L.TELEGRAM_CAPTION_MAX}"
    ),
    "a file sent to an app, at most (the smaller of this and send_file's applies): Slack; "
    "Discord; email": lambda: (
        f"{_size(L.SLACK_FILE_MAX_BYTES)}; {_size(L.DISCORD_FILE_MAX_BYTES)}; "
        f"{_size(L.EMAIL_FILE_MAX_BYTES)}"
    ),
    "one file's upload to an app (Slack's upload URL, a mail's data)": lambda: _s(
        L.FILE_UPLOAD_TIMEOUT_SECONDS
    ),
    "a backup's head / manifest; a file held in memory while archived (larger: on disk); "
    "progress lines (at most)": lambda: (
        f"{_size(L.BACKUP_HEAD_MAX_BYTES)} / {_size(L.BACKUP_MANIFEST_MAX_BYTES)}; "
        f"{_size(L.BACKUP_SPOOL_BYTES)}; every {_s(L.BACKUP_PROGRESS_SECONDS)}"
    ),
}


def limits_table() -> dict[str, str]:
    text = README.read_text()
    section = text[text.index("## Limits") : text.index("## Exit codes")]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("limit", "---"):
            rows[cells[0]] = cells[1]
    return rows


def test_every_row_of_the_limits_table_is_checked() -> None:
    assert sorted(limits_table()) == sorted(EXPECTED)


@pytest.mark.parametrize("row", sorted(EXPECTED))
def test_the_documented_value_is_the_enforced_value(row: str) -> None:
    assert limits_table()[row] == EXPECTED[row]()


def test_the_model_request_formula_matches_its_row() -> None:
    assert L.model_request_cap(100_000) == 4 * (3 * 100_000 + 12 * 100_000) + 256 * 1024


def test_the_quick_start_is_exactly_two_commands() -> None:
    text = README.read_text()
    quick = text[text.index("## Quick start") :]
    block = re.search(r"```sh\n(.*?)```", quick, re.DOTALL)
    assert block is not None
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert [c for c in commands if c] == ["scripts/demo", "scripts/test"]
    assert all((README.parent / c).is_file() for c in ("scripts/demo", "scripts/test"))
