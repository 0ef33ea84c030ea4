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

# How long ensure-running waits for a started container to be up.
CONTAINER_READY_TIMEOUT_SECONDS = 30.0

# Largest group.yaml / orchestrator.yaml accepted.
CONFIG_FILE_MAX_BYTES = 256 * 1024

# Runner (inside the container).
# A session's context is compacted when it passes this many characters (config:
# group.yaml `context_budget`); about a quarter as many tokens.
DEFAULT_CONTEXT_BUDGET_CHARS = 400_000
MIN_CONTEXT_BUDGET_CHARS = 2_000
# Messages kept verbatim after a compaction; older ones are summarized.
COMPACTION_KEEP_MESSAGES = 4
# A SessionStart hook is stopped after this long unless its config says otherwise.
DEFAULT_HOOK_TIMEOUT_SECONDS = 10.0
HOOK_OUTPUT_MAX_CHARS = 64_000
# Tool calls one turn may make before the runner stops the loop.
MAX_TOOL_STEPS_PER_TURN = 12
# What one memory flush may append to the daily note.
FLUSH_MAX_CHARS = 8_000
# Tool limits.
TOOL_READ_MAX_CHARS = 100_000
TOOL_WRITE_MAX_CHARS = 200_000
TOOL_GREP_MAX_MATCHES = 200
MESSAGE_MAX_CHARS = 32_000

# The message path (daemon).
MAX_DELIVERY_ATTEMPTS = 5  # then the message is dead-lettered
DELIVERY_BACKOFF_MAX_SECONDS = 30.0
TURN_TIMEOUT_SECONDS = 300.0  # one turn in a container, from delivery to replies
INBOUND_TEXT_MAX_CHARS = 32_000
HTTP_BODY_MAX_BYTES = 64 * 1024
HTTP_LONG_POLL_MAX_SECONDS = 60.0
DRAIN_TIMEOUT_SECONDS = 30.0  # how long SIGTERM waits for turns in flight
RECONCILE_INTERVAL_SECONDS = 60.0
DEFAULT_HTTP_LISTEN = "127.0.0.1:8787"
