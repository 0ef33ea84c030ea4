"""Every limit and default the product enforces, named in one place (documented in README)."""

from __future__ import annotations

# Memory injected at each fresh context window: each file is capped independently.
MEMORY_FILE_BUDGET_CHARS = 16_000
# The most the host reads of one memory file (lint, search); larger files are reported.
MEMORY_FILE_READ_MAX_BYTES = 4 * 1024 * 1024

# Group folder names: lowercase ASCII, digits, '-' and '_', 1..63 characters.
FOLDER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
FOLDER_NAME_MAX = 63
# Names that would collide with the home's own folders or with CLI keywords.
RESERVED_FOLDER_NAMES = frozenset({"all", "global", "shared", "skills", "state", "templates"})

GROUP_NAME_MAX_CHARS = 100
SENDER_ID_MAX_CHARS = 200

# Container defaults (group.yaml `container:`), and the bounds a value must stay within.
DEFAULT_CONTAINER_MEMORY_BYTES = 512 * 1024**2
MIN_CONTAINER_MEMORY_BYTES = 64 * 1024**2
DEFAULT_CONTAINER_CPUS = 1.0
MAX_CONTAINER_CPUS = 64.0
DEFAULT_CONTAINER_PIDS = 256
MIN_CONTAINER_PIDS = 16
MAX_CONTAINER_PIDS = 32_768
DEFAULT_IDLE_TIMEOUT_SECONDS = 30 * 60
MIN_IDLE_TIMEOUT_SECONDS = 10
DEFAULT_NETWORK = "none"
# Disk a group's folders may use (memory, sessions, files): group.yaml `container.disk`.
DEFAULT_GROUP_DISK_BYTES = 1024**3
MIN_GROUP_DISK_BYTES = 1024**2

# The uid:gid a container runs as when the group folder is owned by root.
DEFAULT_UNPRIVILEGED_UID = 10001
DEFAULT_UNPRIVILEGED_GID = 10001

# Size of the tmpfs mounts for /tmp and $HOME inside a group container.
CONTAINER_TMPFS_BYTES = 64 * 1024**2

# Image builds: how long one attempt to pull the registry base image may take.
BASE_PULL_TIMEOUT_SECONDS = 20

# Engine calls: transient faults are retried this many times with exponential backoff.
ENGINE_RETRY_ATTEMPTS = 5
ENGINE_RETRY_MAX_WAIT_SECONDS = 8.0

# How long ensure-running waits for a started container to be up; a container running
# longer than that whose runner does not answer within RUNNER_DEAD_SOCKET_SECONDS is
# made again (its socket is dead).
CONTAINER_READY_TIMEOUT_SECONDS = 30.0
RUNNER_DEAD_SOCKET_SECONDS = 3.0

# Runners that dial the daemon (the Swarm backend). A runner keeps this many connections
# open and unused for the daemon to take (one per turn; it opens another in its place);
# the daemon keeps at most RUNNER_IDLE_PER_GROUP of one group's (more close the oldest).
RUNNER_SPARE_CONNECTIONS = 2
RUNNER_IDLE_PER_GROUP = 8
# A runner that cannot reach the daemon tries again after the first wait, doubling to
# the last; one dial (its TCP connection, then its TLS handshake) may take this long.
RUNNER_DIAL_BACKOFF_FIRST_SECONDS = 0.1
RUNNER_DIAL_BACKOFF_MAX_SECONDS = 5.0
RUNNER_DIAL_TIMEOUT_SECONDS = 10.0
# The daemon's runner port: TLS handshakes under way at once (more are closed at once),
# and how long one may take.
RUNNER_HANDSHAKES_AT_ONCE = 32
RUNNER_HANDSHAKE_TIMEOUT_SECONDS = 5.0
# How long a turn waits for one of its runner's connections before the runner counts as
# not there (the container is then started or waited for, as with a missing socket).
RUNNER_CONNECTION_WAIT_SECONDS = 0.5
# An unused connection whose peer went away unseen (a node lost) is found dead by TCP
# keepalive after about idle + probes x interval seconds.
RUNNER_KEEPALIVE_IDLE_SECONDS = 15
RUNNER_KEEPALIVE_INTERVAL_SECONDS = 5
RUNNER_KEEPALIVE_PROBES = 3
# What the runner port believes of a group's runner (the credential its service was
# given, its task's address) before asking the engine again, and how soon it may ask
# again when a connection does not match it (a task made again has a new address).
RUNNER_FACTS_SECONDS = 30.0
RUNNER_RECHECK_SECONDS = 0.5
# The home's other processes reach runners through the daemon (runners.sock): at once,
# and the time to ask for one.
RUNNER_RELAYS_AT_ONCE = 16
RUNNER_RELAY_REQUEST_SECONDS = 5.0
# The check that every node sees the groups' storage: how long its probe may take.
STORAGE_PROBE_TIMEOUT_SECONDS = 90.0
# A runner's credential is valid this long; the daemon's record of the one it issued
# each group is what revokes it (a service made again gets a new one).
RUNNER_CREDENTIAL_DAYS = 3650

# Largest group.yaml / orchestrator.yaml accepted.
CONFIG_FILE_MAX_BYTES = 256 * 1024

# Runner (inside the container).
# A session's context is compacted when it would fill more than this share of the
# model's context window, with room kept for the answer and the tools (group.yaml
# `context_budget`: a share; an older whole number of characters caps it too, and must
# be at least MIN_CONTEXT_BUDGET_CHARS).
DEFAULT_CONTEXT_SHARE = 0.8
MIN_CONTEXT_SHARE, MAX_CONTEXT_SHARE = 0.2, 0.95
MIN_CONTEXT_BUDGET_CHARS = 2_000
# Tokens are estimated at this many characters each where the provider has not counted
# them (a low figure: the estimate errs towards compacting early).
CHARS_PER_TOKEN_ESTIMATE = 3
# The window of a model whose size nobody says: the embedded offline provider's, and a
# self-hosted server that reports none (orchestrator.yaml model_info sets it).
OFFLINE_CONTEXT_TOKENS = 100_000
SERVER_DEFAULT_CONTEXT_TOKENS = 8_192
# The vendors' APIs, when model_info does not say: their current models' windows.
VENDOR_CONTEXT_TOKENS = {"anthropic": 200_000, "openai": 128_000}
# How long what a server reported of its window is believed before it is asked again.
CONTEXT_WINDOW_CACHE_SECONDS = 600.0
CONTEXT_WINDOW_PROBE_TIMEOUT_SECONDS = 3.0
# After a compaction the newest messages are kept verbatim, as many as fit this share
# of the budget (at least the last one, cut to fit); older ones are summarized.
COMPACTION_KEEP_SHARE = 0.25
COMPACTION_KEEP_MESSAGES = 4  # at most this many
# The summary of a compaction: its own cap on tokens; one shorter than this many
# characters is taken as empty, one that hits the cap as runaway (tried once again, then
# the older messages are kept cut to SUMMARY_FALLBACK_CHARS instead).
SUMMARY_MAX_TOKENS = 600
SUMMARY_MIN_CHARS = 20
SUMMARY_FALLBACK_CHARS = 4_000
SUMMARY_MAX_CHARS = 4 * SUMMARY_MAX_TOKENS * 2  # a summary kept is cut here, whatever it says
# A memory flush runs before compaction too: once per compaction cycle, when the context
# passes this share of its budget (the compaction point), so facts are saved early.
FLUSH_SOFT_SHARE = 0.6
# A context compacts only when what came after its summary and kept messages is at least
# this share of its budget: compacting a context that is mostly fresh cannot shrink it
# (a budget smaller than the fresh context would compact every turn).
COMPACTION_MIN_NEW_SHARE = 0.25
# A context's budget must hold a fresh context (its memory, instructions and summary)
# and this much room to work in (one exchange); a smaller one is refused with what it
# would need.
CONTEXT_WORKING_MARGIN_CHARS = 1_000
# The least a fresh context holds: the runner's own instructions with an empty memory
# (about 1,800 characters), before any tool; a model window known when group.yaml loads
# that cannot hold this and the working margin is refused there.
FRESH_CONTEXT_FLOOR_CHARS = 2_000
# A fresh context is given today's and yesterday's daily-note lines, at most this much.
RECENT_NOTES_MAX_CHARS = 4_000
# A group with memory.consolidate: daily is consolidated once a local day, from this hour
# of its night on (the first housekeeping round after it).
CONSOLIDATE_LOCAL_HOUR = 3
# ... and each of those notes and the summary at most this share of the context budget,
# so a fresh context never grows past its memory, instructions and a bounded extra.
FRESH_EXTRA_SHARE = 0.15
# The runner ends a turn this long before the host's deadline (at most a tenth of the
# turn), so its answer gets there; the host cuts a model's stream as long before its own.
RUNNER_DEADLINE_MARGIN_SECONDS = 2.0
# A streamed answer reaches the chat in pieces (relay/streaming.py).
STREAM_PIECE_MIN_CHARS = 200
STREAM_PIECE_MAX_CHARS = 1_500
STREAM_PIECE_SECONDS = 5.0
TURN_CUT_MARGIN_SECONDS = 1.0
# A SessionStart hook is stopped after this long unless its config says otherwise.
DEFAULT_HOOK_TIMEOUT_SECONDS = 10.0
# and a configured timeout is at most a turn's longest (an hour); a larger one, NaN or
# Infinity would fail each fresh context's turn when the hook ran
HOOK_TIMEOUT_MAX_SECONDS = 3600
HOOK_OUTPUT_MAX_CHARS = 64_000
# Tool calls one turn may make before the runner stops the loop.
MAX_TOOL_STEPS_PER_TURN = 12
# What one memory flush may append to the daily note.
FLUSH_MAX_CHARS = 8_000
# A session transcript past this size starts afresh from its live context; the old one is
# kept gzip-compressed (the newest few only), with the ids of the most recent turns.
TRANSCRIPT_ROTATE_BYTES = 8 * 1024**2
TRANSCRIPT_ARCHIVES_KEPT = 4
TRANSCRIPT_TURNS_KEPT = 1000
# Tool limits.
TOOL_READ_MAX_CHARS = 100_000
TOOL_WRITE_MAX_CHARS = 200_000
TOOL_GREP_MAX_MATCHES = 200
# the shell tool: a call's default timeout (also capped by the turn's deadline), the
# output kept of a call (its head and tail), a command's size, and the largest file the
# shell's processes may write (RLIMIT_FSIZE; the group's disk limit when smaller)
SHELL_TIMEOUT_SECONDS = 120
SHELL_TIMEOUT_MAX_SECONDS = 1200
SHELL_DISK_CHECK_SECONDS = 1.0  # how often a running call measures the group's disk
SHELL_OUTPUT_HEAD_BYTES = 8 * 1024
SHELL_OUTPUT_TAIL_BYTES = 8 * 1024
SHELL_COMMAND_MAX_CHARS = 100_000
SHELL_FILE_MAX_BYTES = 1024**3
MESSAGE_MAX_CHARS = 32_000

# The message path (daemon).
MAX_DELIVERY_ATTEMPTS = 5  # then the message is dead-lettered
DELIVERY_BACKOFF_FIRST_SECONDS = 0.5  # doubling after each failed delivery
DELIVERY_BACKOFF_MAX_SECONDS = 30.0
# Kept in state/ and released when its disk fills, so the queue can still commit.
STATE_RESERVE_BYTES = 16 * 1024**2
# Turns running at once across groups when `concurrency` is not set: a turn spends most
# of its time waiting (on its container, on a model's answer over the network, seconds a
# call), not on the host's CPU, so the default is a few per CPU and never fewer than
# DEFAULT_CONCURRENCY_MIN: with one worker per CPU, two slow model calls on a 2-core host
# made every other group wait.
DEFAULT_CONCURRENCY_PER_CPU = 4
DEFAULT_CONCURRENCY_MIN = 8


def default_concurrency(cpus: int | None) -> int:
    """Turns at once when none is configured, for a host of ``cpus`` CPUs (None:
    unknown, counted as one)."""
    return max(DEFAULT_CONCURRENCY_MIN, DEFAULT_CONCURRENCY_PER_CPU * (cpus or 1))


# One turn in a container, from delivery to replies (group.yaml `turn_timeout`): the
# daemon's deadline for the whole turn, however the runner paces its bytes.
DEFAULT_TURN_TIMEOUT_SECONDS = 300
MIN_TURN_TIMEOUT_SECONDS = 1
MAX_TURN_TIMEOUT_SECONDS = 3600
TURN_TIMEOUT_SECONDS = float(DEFAULT_TURN_TIMEOUT_SECONDS)
INBOUND_TEXT_MAX_CHARS = 32_000
HTTP_BODY_MAX_BYTES = 64 * 1024
HTTP_LONG_POLL_MAX_SECONDS = 60.0
# A connection must send a whole request head this soon after it opens (or after its
# last answer), and a body this soon after its head; at most this many are open at once,
# and at most HTTP_LISTEN_BACKLOG wait to be accepted (the kernel drops the rest).
HTTP_HEADER_TIMEOUT_SECONDS = 10.0
HTTP_BODY_TIMEOUT_SECONDS = 10.0
HTTP_MAX_CONNECTIONS = 256
HTTP_LISTEN_BACKLOG = 128
# The CLI socket: connections open at once, and how long one may sit idle between frames.
CONTROL_MAX_CONNECTIONS = 64
CONTROL_IDLE_TIMEOUT_SECONDS = 60.0
DRAIN_TIMEOUT_SECONDS = 30.0  # how long SIGTERM waits for turns in flight
# A pause that needs the group's turns finished (migrate-memory, memory revert) waits
# for them at most the group's turn_timeout plus this.
PAUSE_SLACK_SECONDS = 10
# `orchestrator down` escalates: after the drain (plus this) a second SIGTERM, after
# this again SIGKILL, then it waits at most DOWN_KILL_WAIT_SECONDS for the process to go.
DOWN_TERM_WAIT_SECONDS = 5.0
DOWN_KILL_WAIT_SECONDS = 10.0
RECONCILE_INTERVAL_SECONDS = 60.0
# Housekeeping in the daemon: stale in-flight rows, the disk reserve, disk use of groups
# that ran a turn; every group's disk use is measured every DISK_CHECK_INTERVAL_SECONDS.
HOUSEKEEPING_INTERVAL_SECONDS = 2.0
DISK_CHECK_INTERVAL_SECONDS = 60.0
DEFAULT_HTTP_LISTEN = "127.0.0.1:8787"
# Log lines of one kind (logger + message template) passed per window; the rest are
# counted and reported once the window ends.
LOG_KIND_BURST = 20
LOG_KIND_WINDOW_SECONDS = 60.0

# Model budgets of a group (group.yaml `limits`), enforced by the relay on the host.
DEFAULT_REQUESTS_PER_MINUTE = 30
DEFAULT_TOKENS_PER_TURN = 400_000
DEFAULT_TOKENS_PER_DAY = 4_000_000
# The longest answer of one model call (group.yaml `limits.max_tokens`; a provider's
# own `max_tokens` may lower it further): long enough for a chat answer, short enough
# that a rambling one ends within seconds on a small server.
DEFAULT_GROUP_MAX_TOKENS = 1024
# A provider's transient failures (408, 409, 429, 5xx, a connection or a stream cut)
# are retried within the turn's deadline: Retry-After when the server gives one, else
# exponential from 0.5 s, at most RELAY_RETRY_MAX_WAIT_SECONDS a wait. Every call a
# message's deliveries make counts against one budget of attempts (a redelivered turn
# does not start afresh): when it is spent, the message is dead-lettered at once.
RELAY_PROVIDER_ATTEMPTS = 6
RELAY_RETRY_MAX_WAIT_SECONDS = 20.0
# Requests from the runner to the host during a turn (the relay).
RELAY_OPS_PER_TURN = 200  # requests one turn may make; past it the turn fails
RELAY_SMALL_REQUEST_BYTES = 16 * 1024  # ops that carry no model context
RELAY_REPLY_REQUEST_BYTES = 4 * MESSAGE_MAX_CHARS + 16 * 1024  # a reply, in any script
# A model request carries a whole context (see model_request_cap).
RELAY_MODEL_REQUEST_SLACK_BYTES = 256 * 1024


def model_request_cap(window_tokens: int) -> int:
    """Largest model.complete request accepted for a model with this context window:
    a context compacted at CHARS_PER_TOKEN_ESTIMATE characters a token, the tool results
    one turn can add before an overflow compacts it, four bytes a character at most."""
    tools = MAX_TOOL_STEPS_PER_TURN * TOOL_READ_MAX_CHARS
    chars = CHARS_PER_TOKEN_ESTIMATE * window_tokens
    return 4 * (chars + tools) + RELAY_MODEL_REQUEST_SLACK_BYTES


# Learned behaviors (groups/<folder>/learned-behaviors.md): a write's size limit (group.yaml
# learned_max_chars), and what is injected at a fresh context (the same budget as a
# memory file). A hand-edited file is read up to LEARNED_READ_MAX_BYTES.
DEFAULT_LEARNED_MAX_CHARS = 16_000
MAX_LEARNED_MAX_CHARS = 100_000
STANDING_TEXT_BUDGET_CHARS = MEMORY_FILE_BUDGET_CHARS
LEARNED_READ_MAX_BYTES = 1024 * 1024
# Replies the host adds to a message itself (such as a pending-confirmation notice) are
# numbered from here, after every reply a turn can make; each notice gets a number of
# its own, never one used before for that message.
HOST_NOTICE_SEQ = 1_000_000
# Requests a creator must approve (held learned-behaviors writes): each waits this long.
# The host's notice shows the whole content in pieces of HELD_NOTICE_PIECE_CHARS; one
# longer than HELD_NOTICE_MAX_CHARS is not shown in the chat, and only the operator may
# approve it (from the CLI, after reading it).
HELD_REQUEST_TTL_SECONDS = 24 * 3600
HELD_NOTICE_PIECE_CHARS = 3_500
HELD_NOTICE_MAX_CHARS = 16_000

# Memory search (the host's index of each group's memory tree).
SEARCH_CHUNK_MAX_LINES = 40  # a chunk of a file: at most this many lines ...
SEARCH_CHUNK_MAX_CHARS = 2_000  # ... and about this many characters
SEARCH_MAX_FILES = 100_000  # files indexed per group; more are reported, not indexed
SEARCH_MAX_RESULTS = 50  # the most results one search returns (default 6)
MEMORY_GET_MAX_LINES = 400  # the most lines one memory_get returns (default 60)

# Scheduled tasks (group.yaml `tasks`).
DEFAULT_TASKS_PER_GROUP = 50
MAX_TASKS_PER_GROUP = 10_000
DEFAULT_TASK_MIN_INTERVAL_SECONDS = 60
DEFAULT_TASK_GRACE_SECONDS = 3600  # a task due while the daemon was down runs if this late
# Runs of one group's tasks an hour may hold (group.yaml `tasks.max_runs_per_hour`); a
# task due past it is paused. By default twice what a task at `tasks.min_interval` needs,
# and at least this floor.
TASK_RUNS_PER_HOUR_FLOOR = 120
MAX_TASK_RUNS_PER_HOUR = 100_000
SCHEDULER_TICK_SECONDS = 1.0  # the most a due task waits for the scheduler
TASK_TEXT_MAX_CHARS = 4_000
HTTP_CHAT_MESSAGES_MAX = 100  # messages one GET of a chat's messages returns (the newest)

# While the engine is away, a message waits this long between tries, its attempts not
# counted (an engine restart never dead-letters a message).
ENGINE_AWAY_RETRY_SECONDS = 5.0

# Memory history (groups/<folder>/.history/).
HISTORY_FILE_MAX_BYTES = 4 * 1024 * 1024  # a larger file is recorded by its hash only

# Chat apps (channel accounts in orchestrator.yaml `channels`).
PAIRING_CODE_TTL_SECONDS = 3600  # a pairing code is good for an hour, once
PAIRINGS_PENDING_MAX = 20  # codes waiting per channel account; more chats get none
DEFAULT_ATTACHMENT_MAX_BYTES = 10 * 1024 * 1024  # photos and documents stored per message
DEFAULT_SENDER_RATE_MESSAGES = 20  # a sender's messages to one group per window ...
DEFAULT_SENDER_RATE_SECONDS = 600  # ... of this many seconds
CHANNEL_POLL_TIMEOUT_SECONDS = 25  # long poll of getUpdates
CHANNEL_BACKOFF_MAX_SECONDS = 60.0  # a failing poll loop waits at most this between tries
CHANNEL_RETRY_AFTER_MAX_SECONDS = 600.0  # the longest 429 retry_after honored per call
CHANNEL_SWEEP_SECONDS = 5.0  # how often unsent replies are looked for (events come first)
CHANNEL_TYPING_SECONDS = 4.0  # a typing indicator is sent again this often during a turn
CHANNEL_KEEP_SECONDS = 7 * 86400  # inbound update ids and sent-reply records are kept
TELEGRAM_TEXT_MAX = 4096  # Telegram's limit on one message's text (UTF-16 code units)
# A Matrix event is at most 64 KiB with its HTML rendering beside the text: a reply is
# sent in pieces of at most this many UTF-16 code units.
MATRIX_TEXT_MAX = 6000
# Slack cuts a message's text past 40,000 characters and asks for at most 4,000: a reply
# is sent in pieces of at most this many characters of mrkdwn.
SLACK_TEXT_MAX = 4000
DISCORD_TEXT_MAX = 2000  # Discord's limit on one message's content (longer replies are split)
# Discord drops a message whose nonce it saw "in the past few minutes" (enforce_nonce);
# a reply claimed at a crash is sent again with its nonce only within this much of its claim.
DISCORD_NONCE_WINDOW_SECONDS = 60.0

# Email accounts (kind: email): IMAP in, SMTP out.
EMAIL_IDLE_SECONDS = 300  # an IMAP IDLE is ended and begun again this often (RFC 2177: < 29 min)
EMAIL_POLL_SECONDS = 60  # default of poll_interval: a server without IDLE is asked this often
EMAIL_TIMEOUT_SECONDS = 30  # one IMAP or SMTP exchange
EMAIL_FETCH_MAX_BYTES = 32 * 1024 * 1024  # a larger mail is not downloaded (its sender is told)
EMAIL_ATTACHMENTS_MAX = 10  # files stored from one mail (each up to attachments_max_bytes)
EMAIL_TEXT_MAX = 50_000  # characters of one reply mail; a longer reply is sent in pieces
EMAIL_REFERENCES_MAX = 20  # ids a reply's References holds (the root and the newest)
EMAIL_PAIRING_PER_HOUR = 10  # pairing-code mails one account sends in an hour ...
EMAIL_PAIRING_ADDRESS_SECONDS = 86_400  # ... and to one address in this many seconds

# The operators' dashboard (http.dashboard).
DASHBOARD_SESSION_SECONDS = 12 * 3600  # a login lasts this long (sessions live in memory)

# MCP servers (a group's stdio servers in its container; remote ones called by the host)
MCP_SERVERS_MAX = 16  # per group
MCP_TOOLS_MAX = 128  # tools of one server offered to the model; a longer listing is cut
MCP_LIST_TIMEOUT_SECONDS = 30  # a server's start and its tool listing
MCP_CALL_TIMEOUT_SECONDS = 60  # one tool call (at most what is left of the turn)
MCP_RESULT_MAX_CHARS = 20_000  # of one call's result the model sees
MCP_RESULT_NOTES_MAX = 20  # lines describing what a result holds that is not shown
MCP_RESTARTS_MAX = 3  # starts of one server after its first, while its container lives
MCP_DESCRIPTION_MAX_CHARS = 2_000  # of one tool's description the model sees
MCP_SCHEMA_MAX_BYTES = 32 * 1024  # one tool's input schema, as JSON

# Web search backends (orchestrator.yaml `web_search`), called by the host.
WEB_SEARCH_DEFAULT_RESULTS = 8  # results of one search, unless the backend says otherwise
WEB_SEARCH_MAX_RESULTS = 20  # the most a backend may be set to (Brave's own ceiling)
WEB_SEARCH_DEFAULT_TIMEOUT_SECONDS = 10
WEB_SEARCH_MAX_TIMEOUT_SECONDS = 120
WEB_SEARCH_QUERY_MAX_CHARS = 400  # Brave's limit on a query, kept for every backend
WEB_SEARCH_RESPONSE_MAX_BYTES = 2 * 1024 * 1024  # of one answer, decoded
WEB_SEARCH_TITLE_MAX_CHARS = 300
WEB_SEARCH_SNIPPET_MAX_CHARS = 1_000
WEB_SEARCH_URL_MAX_CHARS = 2_000  # a longer result URL is dropped, not cut

# The web, through the host (group.yaml web)
WEB_FETCH_MAX_BYTES = 5 * 1024**2  # of a page downloaded, and again decompressed
WEB_FETCH_MAX_CHARS = 40_000  # of a page's text the model sees
WEB_FETCH_TIMEOUT_SECONDS = 20  # one fetch, redirects included
WEB_REDIRECTS_MAX = 5
DEFAULT_WEB_FETCHES_PER_HOUR = 60  # fetches and searches of one group (web.max_fetches_per_hour)
EGRESS_CONNECTIONS_MAX = 16  # the shell's gate: connections one group may hold open at once
EGRESS_HEAD_MAX_BYTES = 16 * 1024  # a proxy request's head
EGRESS_PORT = 3128  # the forwarder in the container, on 127.0.0.1

# Media: voice notes, images and documents in; files out (orchestrator.media)
MEDIA_WORKERS = 1  # files prepared at once (transcribed, PDF text), beside the turn workers
MEDIA_ATTEMPTS = 3  # tries of one message's preparation before its lines say it failed
# audio transcribed per file (transcription.NAME.max_seconds), and its ceiling
DEFAULT_TRANSCRIBE_MAX_SECONDS = 30 * 60
MAX_TRANSCRIBE_SECONDS = 6 * 3600
TRANSCRIBE_TIMEOUT_SECONDS = 600  # one transcription (an endpoint's answer, a local model's run)
TRANSCRIPT_MAX_CHARS = 20_000  # of one transcript the turn's text carries
PDF_MAX_PAGES = 200  # pages whose text is extracted; the rest are named, not read
PDF_TEXT_MAX_CHARS = 400_000  # of a PDF's text saved beside it
PDF_PARSE_SECONDS = 30  # CPU seconds of one PDF's parse (a child process; killed past it)
PARSER_MEMORY_BYTES = 1024**3  # address space of a child process that parses a file
IMAGE_SOURCE_MAX_BYTES = 20 * 1024 * 1024  # an image file the host reads for a model
IMAGE_SOURCE_MAX_PIXELS = 50_000_000  # larger images (and decompression bombs) are refused
IMAGE_MAX_SIDE = 1568  # the longest side of an image a model is shown, in pixels
IMAGE_JPEG_QUALITY = 85  # images are shown to models as JPEG, metadata stripped
IMAGES_PER_REQUEST_MAX = 8  # images attached to one model request (the newest)
IMAGE_CACHE_ITEMS = 64  # re-encoded images kept by the host (by content hash)
FILE_SEND_MAX_BYTES = 50 * 1024 * 1024  # a file sent by send_file (less where an app says)
FILES_SENT_PER_TURN_MAX = 10  # send_file calls stored in one turn
FILE_CAPTION_MAX_CHARS = 1_000  # of a sent file's caption
TELEGRAM_PHOTO_MAX_BYTES = 10 * 1024 * 1024  # larger images are sent as documents
TELEGRAM_CAPTION_MAX = 1024  # Telegram's caption limit; a longer caption follows as text
OUTBOX_KEEP_SECONDS = CHANNEL_KEEP_SECONDS  # files sent are kept in the outbox this long
FILE_UPLOAD_TIMEOUT_SECONDS = 300  # one file's upload to an app (Slack's upload URL, a mail's data)
# The largest file each app takes from a bot (its kind's files_out_max_bytes; the host's
# outbox copy is capped by the smaller of it and FILE_SEND_MAX_BYTES):
# Slack: 1 GB a file (files.getUploadURLExternal; slack_sdk's MAX_V2_FILE_SIZE).
SLACK_FILE_MAX_BYTES = 1024**3
# Discord: 10 MiB a file for a bot in a server without boosts, the default of Discord's
# API reference, "Uploading Files" (since 16 January 2025; discord.py's
# DEFAULT_FILE_SIZE_LIMIT_BYTES); a larger file is refused with 413 (code 40005).
DISCORD_FILE_MAX_BYTES = 10 * 1024 * 1024
# Email: a mail grows a file by a third in base64 (RFC 2045), so 10 MiB makes a mail of
# about 14 MB, under what the large providers take (Gmail 25 MB, Outlook.com 20 MB); a
# server that announces a smaller SIZE (RFC 1870) refuses it before the data is sent.
EMAIL_FILE_MAX_BYTES = 10 * 1024 * 1024

# Memory consolidation: the daily notes it reads by default (today's and the six before
# it), and at most.
CONSOLIDATE_DEFAULT_DAYS = 7
CONSOLIDATE_MAX_DAYS = 31
# Backups (orchestrator backup, restore)
BACKUP_HEAD_MAX_BYTES = 1024 * 1024  # the archive's first member (format and versions)
BACKUP_MANIFEST_MAX_BYTES = 512 * 1024**2  # its last (every member's size and checksum)
BACKUP_SPOOL_BYTES = 8 * 1024**2  # of a file held in memory while archived (larger: on disk)
BACKUP_PROGRESS_SECONDS = 2  # a progress line at most this often during long work
