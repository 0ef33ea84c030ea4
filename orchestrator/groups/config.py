"""``group.yaml``: the schema of one agent group, its defaults, and its validation.

The defaults below are the only place group defaults live; the README documents them.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.config.providers import ProviderDef, model_problem
from orchestrator.limits import (
    CHARS_PER_TOKEN_ESTIMATE,
    CONTEXT_WORKING_MARGIN_CHARS,
    DEFAULT_CONTAINER_CPUS,
    DEFAULT_CONTAINER_MEMORY_BYTES,
    DEFAULT_CONTAINER_PIDS,
    DEFAULT_CONTEXT_SHARE,
    DEFAULT_GROUP_DISK_BYTES,
    DEFAULT_GROUP_MAX_TOKENS,
    DEFAULT_IDLE_TIMEOUT_SECONDS,
    DEFAULT_LEARNED_MAX_CHARS,
    DEFAULT_NETWORK,
    DEFAULT_REQUESTS_PER_MINUTE,
    DEFAULT_TASK_GRACE_SECONDS,
    DEFAULT_TASK_MIN_INTERVAL_SECONDS,
    DEFAULT_TASKS_PER_GROUP,
    DEFAULT_TOKENS_PER_DAY,
    DEFAULT_TOKENS_PER_TURN,
    DEFAULT_TURN_TIMEOUT_SECONDS,
    FRESH_CONTEXT_FLOOR_CHARS,
    GROUP_NAME_MAX_CHARS,
    MAX_CONTAINER_CPUS,
    MAX_CONTAINER_PIDS,
    MAX_CONTEXT_SHARE,
    MAX_LEARNED_MAX_CHARS,
    MAX_TASK_RUNS_PER_HOUR,
    MAX_TASKS_PER_GROUP,
    MAX_TURN_TIMEOUT_SECONDS,
    MIN_CONTAINER_MEMORY_BYTES,
    MIN_CONTAINER_PIDS,
    MIN_CONTEXT_BUDGET_CHARS,
    MIN_CONTEXT_SHARE,
    MIN_GROUP_DISK_BYTES,
    MIN_IDLE_TIMEOUT_SECONDS,
    MIN_TURN_TIMEOUT_SECONDS,
    SENDER_ID_MAX_CHARS,
    TASK_RUNS_PER_HOUR_FLOOR,
)
from orchestrator.protocol import SESSION_MODES
from orchestrator.units import parse_duration, parse_size
from orchestrator.validate import MappingReader, Problems
from orchestrator.versions import GROUP_FILE_VERSION
from orchestrator.yamldoc import YamlDocument, load_yaml_file, parse_yaml_text

GROUP_FILE = "group.yaml"
DEFAULT_PROVIDER = "offline"
DEFAULT_MODEL = "offline-rules"
UNKNOWN_SENDER_POLICIES = ("drop", "allow")
NETWORK_MODES = ("none", "bridge")
PROVIDER_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"
MOUNT_NAME_PATTERN = r"[a-z0-9][a-z0-9_-]{0,62}"

ALL_SKILLS: str | tuple[str, ...] = "all"
GROUP_KEYS = (
    "version",
    "name",
    "provider",
    "model",
    "creators",
    "members",
    "unknown_senders",
    "session_mode",
    "container",
    "mounts",
    "skills",
    "context_budget",
    "turn_timeout",
    "limits",
    "learned_max_chars",
    "tasks",
    "tools",
    "packages",
    "mcp",
    "web",
    "timezone",
    "models",
    "memory",
    "media",
)
CREATOR, MEMBER, GUEST = "creator", "member", "guest"  # trust levels, most trusted first
TASK_SCHEDULERS = (CREATOR, MEMBER)  # guests never schedule
# the shell: creators by default (everyone in a bound chat is a member); guests never
SHELL_USERS = (CREATOR,)


@dataclass(frozen=True)
class ContainerSettings:
    memory_bytes: int = DEFAULT_CONTAINER_MEMORY_BYTES
    cpus: float = DEFAULT_CONTAINER_CPUS
    pids: int = DEFAULT_CONTAINER_PIDS
    network: str = DEFAULT_NETWORK
    idle_timeout_seconds: int = DEFAULT_IDLE_TIMEOUT_SECONDS
    disk_bytes: int = DEFAULT_GROUP_DISK_BYTES


@dataclass(frozen=True)
class MountRequest:
    """An extra host folder the group asks for; honored only through the mount allowlist."""

    host_path: str
    name: str
    writable: bool = False


@dataclass(frozen=True)
class ModelLimits:
    """Limits on the group's model use, enforced on the host by the relay."""

    models: tuple[str, ...] = ()  # allowed models, intersected with the provider's
    requests_per_minute: int = DEFAULT_REQUESTS_PER_MINUTE
    tokens_per_turn: int = DEFAULT_TOKENS_PER_TURN
    tokens_per_day: int = DEFAULT_TOKENS_PER_DAY
    # the longest answer one model call may give (the provider's max_tokens may lower it)
    max_tokens: int = DEFAULT_GROUP_MAX_TOKENS
    # money caps, in orchestrator.yaml's currency, per day and month of the group's zone
    cost_per_day: float | None = None
    cost_per_month: float | None = None

    @property
    def capped(self) -> bool:
        return self.cost_per_day is not None or self.cost_per_month is not None


@dataclass(frozen=True)
class ContextBudget:
    """How much of the model's context window a session's context may fill before it
    is compacted (group.yaml ``context_budget``): a share, such as 80%; an older whole
    number of characters also caps it at that many characters."""

    share: float = DEFAULT_CONTEXT_SHARE
    max_chars: int | None = None

    def __str__(self) -> str:
        return str(self.max_chars) if self.max_chars is not None else f"{self.share:.0%}"


@dataclass(frozen=True)
class TaskSettings:
    """Scheduled tasks of the group (group.yaml ``tasks``)."""

    allowed: tuple[str, ...] = TASK_SCHEDULERS  # trust levels that may schedule
    max_tasks: int = DEFAULT_TASKS_PER_GROUP
    min_interval_seconds: int = DEFAULT_TASK_MIN_INTERVAL_SECONDS
    grace_seconds: int = DEFAULT_TASK_GRACE_SECONDS
    timezone: str = "UTC"
    max_runs_per_hour_set: int | None = None  # None: derived from min_interval

    @property
    def max_runs_per_hour(self) -> int:
        """Runs of the group's tasks one hour may hold (``tasks.max_runs_per_hour``):
        by default room for a task at the shortest interval twice over, and at least
        TASK_RUNS_PER_HOUR_FLOOR."""
        if self.max_runs_per_hour_set is not None:
            return self.max_runs_per_hour_set
        return max(TASK_RUNS_PER_HOUR_FLOOR, 2 * math.ceil(3600 / self.min_interval_seconds))


from orchestrator.groups.mcpconfig import McpSettings, parse_mcp  # noqa: E402
from orchestrator.groups.modelsconfig import ModelChoice, PurposeModels, parse_models  # noqa: E402
from orchestrator.groups.packages import PackageSettings  # noqa: E402  (no import cycle)
from orchestrator.groups.webconfig import WebSettings, parse_web  # noqa: E402

CONSOLIDATE_CHOICES = ("off", "daily")


@dataclass(frozen=True)
class MemorySettings:
    """Memory housekeeping of the group (group.yaml ``memory``)."""

    # daily: once a day (the group's night), recent daily notes are consolidated into
    # core memory on the ``background`` model (orchestrator memory consolidate)
    consolidate: str = "off"


@dataclass(frozen=True)
class MediaSettings:
    """What the host does with files people send (group.yaml ``media``)."""

    # the transcriber (orchestrator.yaml transcription.NAME) voice notes and audio files
    # go through before the turn; "off": they are stored and named, not transcribed
    transcribe: str = "off"


@dataclass(frozen=True)
class ToolSettings:
    """Who may use the tools that act (group.yaml ``tools``)."""

    shell: tuple[str, ...] = SHELL_USERS  # trust levels whose turns have the shell


@dataclass(frozen=True)
class GroupConfig:
    name: str
    provider: str = DEFAULT_PROVIDER
    model: str = DEFAULT_MODEL
    creators: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    unknown_senders: str = "drop"
    session_mode: str = "per-chat"
    container: ContainerSettings = field(default_factory=ContainerSettings)
    mounts: tuple[MountRequest, ...] = ()
    skills: str | tuple[str, ...] = "all"
    context_budget: ContextBudget = field(default_factory=ContextBudget)
    turn_timeout_seconds: int = DEFAULT_TURN_TIMEOUT_SECONDS
    limits: ModelLimits = field(default_factory=ModelLimits)
    learned_max_chars: int = DEFAULT_LEARNED_MAX_CHARS
    tasks: TaskSettings = field(default_factory=TaskSettings)
    tools: ToolSettings = field(default_factory=ToolSettings)
    packages: PackageSettings = field(default_factory=PackageSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    web: WebSettings = field(default_factory=WebSettings)
    timezone: str = "UTC"  # IANA: the group's days and months (costs, tasks by default)
    models: PurposeModels = field(default_factory=PurposeModels)
    memory: MemorySettings = field(default_factory=MemorySettings)
    media: MediaSettings = field(default_factory=MediaSettings)

    def model_for(self, purpose: str) -> ModelChoice:
        """The (provider, model) of a purpose (``turn``, ``tasks``, ``flush``,
        ``background``): its own pair when group.yaml gives one, else the chat's."""
        choice = getattr(self.models, purpose, None) if purpose != "turn" else None
        return choice if choice is not None else ModelChoice(self.provider, self.model)

    def model_pairs(self) -> list[ModelChoice]:
        """Every (provider, model) the group's calls may use, the chat's first."""
        pairs = [ModelChoice(self.provider, self.model)]
        pairs += [c for _, c in self.models.pairs() if c not in pairs]
        return pairs

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["creators"] = list(self.creators)
        data["members"] = list(self.members)
        data["mounts"] = [asdict(m) for m in self.mounts]
        data["skills"] = self.skills if isinstance(self.skills, str) else list(self.skills)
        data["limits"]["models"] = list(self.limits.models)
        data["tasks"]["allowed"] = list(self.tasks.allowed)
        data["tools"]["shell"] = list(self.tools.shell)
        data["packages"]["debian"] = list(self.packages.debian)
        data["packages"]["python"] = list(self.packages.python)
        data["tasks"]["max_runs_per_hour"] = self.tasks.max_runs_per_hour
        del data["tasks"]["max_runs_per_hour_set"]
        data["context_budget"] = str(self.context_budget)
        data["mcp"] = self.mcp.to_dict()
        data["web"] = self.web.to_dict()
        data["models"] = self.models.to_dict()
        return data


def _container(reader: MappingReader) -> ContainerSettings:
    reader.reject_unknown(["memory", "cpus", "pids", "network", "idle_timeout", "disk"])
    memory = parse_size(reader.raw("memory", DEFAULT_CONTAINER_MEMORY_BYTES))
    if memory is None or memory < MIN_CONTAINER_MEMORY_BYTES:
        raise reader.fail(
            "memory",
            f"got {reader.data.get('memory')!r}; expected a size of at least "
            f"{MIN_CONTAINER_MEMORY_BYTES // 1024**2}m, such as 512m or 1g",
        )
    cpus = reader.raw("cpus", DEFAULT_CONTAINER_CPUS)
    if (
        isinstance(cpus, bool)
        or not isinstance(cpus, int | float)
        or not (0.01 <= cpus <= MAX_CONTAINER_CPUS)
    ):
        raise reader.fail(
            "cpus", f"got {cpus!r}; expected a number from 0.01 to {MAX_CONTAINER_CPUS:g}"
        )
    pids = reader.whole_number(
        "pids",
        DEFAULT_CONTAINER_PIDS,
        MIN_CONTAINER_PIDS,
        MAX_CONTAINER_PIDS,
        f"a whole number from {MIN_CONTAINER_PIDS} to {MAX_CONTAINER_PIDS}",
    )
    idle = parse_duration(reader.raw("idle_timeout", DEFAULT_IDLE_TIMEOUT_SECONDS))
    if idle is None or idle < MIN_IDLE_TIMEOUT_SECONDS:
        raise reader.fail(
            "idle_timeout",
            f"got {reader.data.get('idle_timeout')!r}; expected a duration of at least "
            f"{MIN_IDLE_TIMEOUT_SECONDS}s, such as 30m, 2h or 600",
        )
    disk = parse_size(reader.raw("disk", DEFAULT_GROUP_DISK_BYTES))
    if disk is None or disk < MIN_GROUP_DISK_BYTES:
        raise reader.fail(
            "disk",
            f"got {reader.data.get('disk')!r}; expected a size of at least "
            f"{MIN_GROUP_DISK_BYTES // 1024**2}m, such as 1g or 500m",
        )
    return ContainerSettings(
        disk_bytes=disk,
        memory_bytes=memory,
        cpus=float(cpus),
        pids=pids,
        network=reader.choice("network", NETWORK_MODES, DEFAULT_NETWORK),
        idle_timeout_seconds=idle,
    )


def _mounts(reader: MappingReader) -> tuple[MountRequest, ...]:
    value = reader.raw("mounts", [])
    if not isinstance(value, list):
        raise reader.fail("mounts", "must be a list of {host, name, writable} mappings")
    out: list[MountRequest] = []
    names: set[str] = set()
    for index in range(len(value)):
        item = MappingReader(reader.doc, value[index], (*reader.prefix, "mounts", index))
        item.reject_unknown(["host", "name", "writable"])
        host = item.text("host", max_chars=4096)
        if not host.startswith(("/", "~")):
            raise item.fail("host", f"got {host!r}; expected an absolute path (or ~/...)")
        default_name = re.sub(r"[^a-z0-9_-]+", "-", Path(host).name.lower()).strip("-_")
        name = item.text("name", default_name or None, pattern=MOUNT_NAME_PATTERN)
        if name in names:
            raise item.fail("name", f"{name!r} is used by another mount; names must differ")
        names.add(name)
        out.append(MountRequest(host, name, item.boolean("writable", False)))
    return tuple(out)


def _skills(reader: MappingReader) -> str | tuple[str, ...]:
    value = reader.raw("skills", "all")
    if value == "all":
        return "all"
    if not isinstance(value, list) or not all(
        isinstance(s, str) and re.fullmatch(MOUNT_NAME_PATTERN, s) for s in value
    ):
        raise reader.fail(
            "skills", f"got {value!r}; expected 'all' or a list of skill names such as [search]"
        )
    return tuple(value)


def _context_budget(reader: MappingReader) -> ContextBudget:
    """``context_budget``: a share of the window ("80%", 0.8), or (as older releases
    wrote it) a whole number of characters, which keeps the default share and caps the
    context at that many characters."""
    value = reader.raw("context_budget", None)
    if value is None:
        return ContextBudget()
    expected = (
        f"a share of the model's context window from {MIN_CONTEXT_SHARE:.0%} to "
        f"{MAX_CONTEXT_SHARE:.0%} (such as 80%), or a whole number of characters of at least "
        f"{MIN_CONTEXT_BUDGET_CHARS}"
    )
    if isinstance(value, bool):
        raise reader.fail("context_budget", f"got {value!r}; expected {expected}")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and value > 1:
        if value < MIN_CONTEXT_BUDGET_CHARS:
            raise reader.fail("context_budget", f"got {value!r}; expected {expected}")
        return ContextBudget(max_chars=value)
    share: float | None = None
    if isinstance(value, int | float):
        share = float(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*\d{1,3}(\.\d+)?\s*%\s*", value):
        share = float(value.strip().rstrip("%")) / 100
    if share is None or not MIN_CONTEXT_SHARE <= share <= MAX_CONTEXT_SHARE:
        raise reader.fail("context_budget", f"got {value!r}; expected {expected}")
    return ContextBudget(share=share)


def _limits(reader: MappingReader) -> ModelLimits:
    reader.reject_unknown(
        [
            "models",
            "requests_per_minute",
            "tokens_per_turn",
            "tokens_per_day",
            "max_tokens",
            "cost_per_day",
            "cost_per_month",
        ]
    )

    def money(key: str) -> float | None:
        value = reader.raw(key, None)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise reader.fail(
                key,
                f"got {value!r}; expected an amount from 0 in orchestrator.yaml's currency, "
                "such as 5 or 0.5",
            )
        return float(value)

    return ModelLimits(
        cost_per_day=money("cost_per_day"),
        cost_per_month=money("cost_per_month"),
        models=reader.id_list("models", max_chars=200),
        requests_per_minute=reader.whole_number(
            "requests_per_minute", DEFAULT_REQUESTS_PER_MINUTE, 1, 100_000, "1 to 100000"
        ),
        tokens_per_turn=reader.whole_number(
            "tokens_per_turn", DEFAULT_TOKENS_PER_TURN, 1, None, "a whole number from 1"
        ),
        tokens_per_day=reader.whole_number(
            "tokens_per_day", DEFAULT_TOKENS_PER_DAY, 1, None, "a whole number from 1"
        ),
        max_tokens=reader.whole_number(
            "max_tokens", DEFAULT_GROUP_MAX_TOKENS, 16, 1_000_000, "16 to 1000000"
        ),
    )


def _creators(reader: MappingReader) -> tuple[str, ...]:
    """``creators``: sender ids, none of a kind that cannot prove who sent a message."""
    from orchestrator.config.kinds import unproven_sender

    creators = reader.id_list("creators", max_chars=SENDER_ID_MAX_CHARS)
    for index, sender in enumerate(creators):
        kind = unproven_sender(sender)
        if kind is not None:
            raise reader.child_fail(
                "creators",
                index,
                f"{sender!r}: {kind.title} senders cannot be creators ({kind.title} does not "
                "prove who sent a message, and a creator may run the shell and approve "
                "requests); name them under members, or be a creator through another channel",
            )
    return creators


def classify_sender(config: GroupConfig, sender: str, bound: str | None = None) -> str | None:
    """The trust level of ``sender`` in a group, or None when the sender is refused.
    ``bound``: the trust a chat binding gives everyone in the chat the message came from
    (creators are still named one by one; never a sender of a kind that cannot prove
    who sent a message)."""
    from orchestrator.config.kinds import unproven_sender

    if sender in config.creators and unproven_sender(sender) is None:
        return CREATOR
    if sender in config.members:
        return MEMBER
    if bound is not None:
        return bound
    return GUEST if config.unknown_senders == "allow" else None


def _packages(reader: MappingReader) -> PackageSettings:
    from orchestrator.groups.packages import MAX_PACKAGES, debian_problem, python_problem

    reader.reject_unknown(["debian", "python", "from_chat"])
    lists: dict[str, tuple[str, ...]] = {}
    for key, problem_of in (("debian", debian_problem), ("python", python_problem)):
        items = reader.id_list(key, max_chars=200)
        if len(items) > MAX_PACKAGES:
            raise reader.fail(key, f"{len(items)} entries; at most {MAX_PACKAGES}")
        for index, item in enumerate(items):
            if problem := problem_of(item):
                raise reader.child_fail(key, index, problem)
        lists[key] = tuple(dict.fromkeys(items))
    return PackageSettings(
        debian=lists["debian"],
        python=lists["python"],
        from_chat=reader.boolean("from_chat", False),
    )


def _tools(reader: MappingReader) -> ToolSettings:
    reader.reject_unknown(["shell"])
    if "shell" not in reader.data:
        return ToolSettings()
    levels = reader.id_list("shell", max_chars=20)
    for index, level in enumerate(levels):
        if level not in TASK_SCHEDULERS:
            raise reader.child_fail(
                "shell",
                index,
                f"got {level!r}; expected creator or member (guests never), or [] for nobody",
            )
    return ToolSettings(shell=tuple(dict.fromkeys(levels)))


def _memory(reader: MappingReader) -> MemorySettings:
    reader.reject_unknown(["consolidate"])
    if reader.data.get("consolidate") is False:  # YAML reads a bare off as false
        return MemorySettings(consolidate="off")
    return MemorySettings(
        consolidate=reader.choice("consolidate", CONSOLIDATE_CHOICES, "off"),
    )


def _media(reader: MappingReader) -> MediaSettings:
    reader.reject_unknown(["transcribe"])
    if reader.data.get("transcribe") is False:  # YAML reads a bare off as false
        return MediaSettings(transcribe="off")
    transcribe = reader.text("transcribe", "off", pattern=r"[a-z0-9][a-z0-9_-]{0,39}")
    return MediaSettings(transcribe=transcribe)


def _zone(reader: MappingReader, default: str) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    zone = reader.text("timezone", default, max_chars=64)
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise reader.fail(
            "timezone", f"got {zone!r}; expected an IANA time zone such as Europe/Lisbon"
        ) from None
    return zone


def _tasks(reader: MappingReader, zone: str) -> TaskSettings:
    reader.reject_unknown(
        ["allowed", "max", "min_interval", "grace", "timezone", "max_runs_per_hour"]
    )
    allowed = reader.id_list("allowed", max_chars=20) if "allowed" in reader.data else None
    if allowed is not None:
        for index, level in enumerate(allowed):
            if level not in TASK_SCHEDULERS:
                raise reader.child_fail(
                    "allowed", index, f"got {level!r}; expected creator or member (guests never)"
                )

    def duration(key: str, default: int, minimum: int) -> int:
        value = parse_duration(reader.raw(key, default))
        if value is None or value < minimum:
            raise reader.fail(
                key, f"got {reader.data.get(key)!r}; expected a duration of at least {minimum}s"
            )
        return value

    zone = _zone(reader, zone)  # the group's unless the tasks have their own
    return TaskSettings(
        allowed=tuple(dict.fromkeys(allowed)) if allowed is not None else TASK_SCHEDULERS,
        max_tasks=reader.whole_number(
            "max", DEFAULT_TASKS_PER_GROUP, 0, MAX_TASKS_PER_GROUP, f"0 to {MAX_TASKS_PER_GROUP}"
        ),
        min_interval_seconds=duration("min_interval", DEFAULT_TASK_MIN_INTERVAL_SECONDS, 1),
        grace_seconds=duration("grace", DEFAULT_TASK_GRACE_SECONDS, 0),
        timezone=zone,
        max_runs_per_hour_set=(
            reader.whole_number(
                "max_runs_per_hour", 0, 1, MAX_TASK_RUNS_PER_HOUR, f"1 to {MAX_TASK_RUNS_PER_HOUR}"
            )
            if "max_runs_per_hour" in reader.data
            else None
        ),
    )


def group_config_from_doc(
    doc: YamlDocument, providers: Mapping[str, ProviderDef] | None = None
) -> GroupConfig:
    """Validate a parsed group.yaml; raises InvalidConfig naming file:line, key and value.

    With ``providers`` (orchestrator.yaml's), the provider must be defined there and the
    model allowed by it and by the group's limits."""
    reader = MappingReader(doc, doc.data)
    reader.file_version(GROUP_FILE_VERSION)  # a newer release's file: refused, alone
    problems = Problems()
    problems.check(lambda: reader.reject_unknown(GROUP_KEYS), None)

    def turn_timeout() -> int:
        value = parse_duration(reader.raw("turn_timeout", DEFAULT_TURN_TIMEOUT_SECONDS))
        if value is None or not MIN_TURN_TIMEOUT_SECONDS <= value <= MAX_TURN_TIMEOUT_SECONDS:
            raise reader.fail(
                "turn_timeout",
                f"got {reader.data.get('turn_timeout')!r}; expected a duration from "
                f"{MIN_TURN_TIMEOUT_SECONDS}s to {MAX_TURN_TIMEOUT_SECONDS // 60}m, such as 5m",
            )
        return value

    defaults = GroupConfig(name="-")
    name = problems.check(lambda: reader.text("name", max_chars=GROUP_NAME_MAX_CHARS), "-")
    provider = problems.check(
        lambda: reader.text("provider", DEFAULT_PROVIDER, pattern=PROVIDER_PATTERN),
        DEFAULT_PROVIDER,
    )
    model = problems.check(lambda: reader.text("model", DEFAULT_MODEL, max_chars=200), "")
    limits = problems.check(lambda: _limits(reader.child("limits")), defaults.limits)
    if providers is not None and model:
        problem = model_problem(providers, provider, model, limits.models)
        if problem is not None:
            problems.add(reader.fail("model" if provider in providers else "provider", problem))
    zone = problems.check(lambda: _zone(reader, "UTC"), "UTC")
    config = GroupConfig(
        timezone=zone,
        models=problems.check(
            lambda: parse_models(reader.child("models"), provider, limits.models, providers),
            defaults.models,
        ),
        name=name,
        provider=provider,
        model=model,
        limits=limits,
        creators=problems.check(lambda: _creators(reader), ()),
        members=problems.check(
            lambda: reader.id_list("members", max_chars=SENDER_ID_MAX_CHARS), ()
        ),
        unknown_senders=problems.check(
            lambda: reader.choice("unknown_senders", UNKNOWN_SENDER_POLICIES, "drop"), "drop"
        ),
        session_mode=problems.check(
            lambda: reader.choice("session_mode", SESSION_MODES, "per-chat"), "per-chat"
        ),
        container=problems.check(lambda: _container(reader.child("container")), defaults.container),
        mounts=problems.check(lambda: _mounts(reader), ()),
        skills=problems.check(lambda: _skills(reader), ALL_SKILLS),
        context_budget=problems.check(lambda: _context_budget(reader), ContextBudget()),
        turn_timeout_seconds=problems.check(turn_timeout, DEFAULT_TURN_TIMEOUT_SECONDS),
        learned_max_chars=problems.check(
            lambda: reader.whole_number(
                "learned_max_chars",
                DEFAULT_LEARNED_MAX_CHARS,
                1,
                MAX_LEARNED_MAX_CHARS,
                f"a whole number of characters from 1 to {MAX_LEARNED_MAX_CHARS}",
            ),
            DEFAULT_LEARNED_MAX_CHARS,
        ),
        tasks=problems.check(lambda: _tasks(reader.child("tasks"), zone), defaults.tasks),
        tools=problems.check(lambda: _tools(reader.child("tools")), defaults.tools),
        packages=problems.check(lambda: _packages(reader.child("packages")), defaults.packages),
        mcp=problems.check(lambda: parse_mcp(reader.child("mcp")), defaults.mcp),
        web=problems.check(lambda: parse_web(reader.child("web")), defaults.web),
        memory=problems.check(lambda: _memory(reader.child("memory")), defaults.memory),
        media=problems.check(lambda: _media(reader.child("media")), defaults.media),
    )
    if config.web.enabled and config.container.network == "bridge":
        problems.add(
            reader.child("web").fail(
                "enabled",
                "a group with container.network: bridge has a network of its own and would "
                "bypass the web policy; set container.network: none to use web",
            )
        )
    if providers is not None:
        problem = _window_problem(config, providers)
        if problem is not None:
            problems.add(reader.fail("context_budget", problem))
    if providers is not None and config.limits.capped:
        problem = _unpriced(config, providers)
        if problem is not None:
            key = "cost_per_day" if config.limits.cost_per_day is not None else "cost_per_month"
            problems.add(reader.child("limits").fail(key, problem))
    problems.raise_if_any()
    return config


def _window_problem(config: GroupConfig, providers: Mapping[str, ProviderDef]) -> str | None:
    """Why a model window orchestrator.yaml names cannot hold the group's fresh context
    and room to work below its compaction point, or None (an unknown window is checked
    by the runner at the first turn, with the context's real size)."""
    for pair in config.model_pairs():
        definition = providers.get(pair.provider)
        window = definition.info(pair.model).context_tokens if definition else None
        if definition is None or window is None:
            continue
        answer = min(config.limits.max_tokens, definition.max_tokens)
        room = (int(window * config.context_budget.share) - answer) * CHARS_PER_TOKEN_ESTIMATE
        needed = FRESH_CONTEXT_FLOOR_CHARS + CONTEXT_WORKING_MARGIN_CHARS
        if room < needed:
            return (
                f"{config.context_budget} of {pair.provider}/{pair.model}'s {window:,}-token "
                f"window, less {answer:,} tokens for the answer, leaves about {max(room, 0):,} "
                f"characters: a fresh context needs at least {needed:,} (instructions and "
                "room for one exchange) and every turn would compact; raise context_budget, "
                "lower limits.max_tokens, or use a model with a larger window"
            )
    return None


def _unpriced(config: GroupConfig, providers: Mapping[str, ProviderDef]) -> str | None:
    """Why the group's money caps cannot be kept (a model it uses has no prices), or None."""
    for pair in config.model_pairs():
        if pair.provider == "offline":
            return (
                "the offline provider runs inside the container and costs nothing; a money "
                "cap needs a group whose models are priced host models"
            )
        definition = providers.get(pair.provider)
        if definition is None or definition.info(pair.model).prices is None:
            return (
                "a money cap needs prices for every model the group uses, and "
                f"{pair.provider}/{pair.model} has none; set providers.{pair.provider}"
                f".model_info.{pair.model}.prices in orchestrator.yaml"
            )
    return None


def load_group_config(
    path: Path, providers: Mapping[str, ProviderDef] | None = None
) -> GroupConfig:
    return group_config_from_doc(load_yaml_file(path), providers)


def parse_group_config(
    text: str, path: Path, providers: Mapping[str, ProviderDef] | None = None
) -> GroupConfig:
    return group_config_from_doc(parse_yaml_text(text, path), providers)


def set_option(path: Path, key: str, value: str) -> None:
    """Set ``key`` (``turn_timeout``, or ``container.disk`` for a nested key) in a
    group.yaml written from our template, keeping every other line and comment; the
    result is validated before it replaces the file."""
    from orchestrator.errors import InvalidConfig
    from orchestrator.fsatomic import write_atomic

    parent, _, name = key.rpartition(".")
    indent = "  " if parent else ""
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(rf"(?m)^{indent}{re.escape(name)}:.*$")
    line = f"{indent}{name}: {value}"
    if pattern.search(text):
        text = pattern.sub(lambda _: line, text, count=1)  # the value as written, no \1
    elif parent:
        header = re.compile(rf"(?m)^{re.escape(parent)}:\s*$")
        if not header.search(text):
            raise InvalidConfig(f"{path}: no {parent}: section to put {key} in")
        text = header.sub(lambda _: f"{parent}:\n{line}", text, count=1)
    else:
        text = text.rstrip("\n") + f"\n{line}\n"
    parse_group_config(text, path)
    write_atomic(path, text)


@contextlib.contextmanager
def config_lock(path: Path) -> Iterator[None]:
    """Held while group.yaml is read, changed and replaced (the CLI's edits and the
    host's, such as an approved package request), so that no edit loses another's."""
    import fcntl

    with open(path.with_name(".group.yaml.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


PACKAGES_SECTION = """
# Packages for this group's own image, built offline on top of the agent image
# (orchestrator group packages NAME): Debian packages by name, Python packages as wheels
# only, resolved to exact versions and hashes in packages.lock. from_chat: creators may
# ask for packages from the chat (each request approved with /approve ID).
packages:
"""


def set_packages(path: Path, debian: tuple[str, ...], python: tuple[str, ...]) -> None:
    """Set ``packages.debian`` and ``packages.python`` in group.yaml (the section made
    when missing), keeping every other line and comment, in whatever style the section
    is written (a round-trip YAML parser); validated, then written at once. The caller
    holds ``config_lock``."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    from orchestrator.errors import InvalidConfig
    from orchestrator.fsatomic import write_atomic

    text = path.read_text(encoding="utf-8")
    yaml = _round_trip()
    data = yaml.load(text)
    if not isinstance(data, dict):
        raise InvalidConfig(f"{path}: the document must be a mapping")
    if "packages" not in data:
        edited = (
            text.rstrip("\n")
            + "\n"
            + PACKAGES_SECTION
            + f"  debian: {_flow(debian)}\n  python: {_flow(python)}\n"
        )
    else:
        packages = data["packages"]
        if packages is None:
            packages = data["packages"] = CommentedMap()
        if not isinstance(packages, dict):
            raise InvalidConfig(
                f"{path}: packages: must be a mapping (debian:, python:, from_chat:), "
                f"not {type(packages).__name__}"
            )
        for key, items in (("debian", debian), ("python", python)):
            listed = CommentedSeq(items)
            listed.fa.set_flow_style()
            packages[key] = listed
        out = io.StringIO()
        yaml.dump(data, out)
        edited = out.getvalue()
    parse_group_config(edited, path)
    write_atomic(path, edited)


def _round_trip() -> Any:
    """A YAML parser that writes back what it read, comments and quotes kept."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    return yaml


def _flow(items: tuple[str, ...]) -> str:
    import json

    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def check_mcp_server(path: Path, name: str, entry: dict[str, Any]) -> None:
    """Refuse (InvalidConfig, naming the key) a server ``entry`` that group.yaml at
    ``path`` would not take as ``mcp.servers.NAME``; nothing is written."""
    _mcp_edited(path, name, entry)


def set_mcp_server(path: Path, name: str, server: dict[str, Any] | None) -> None:
    """Set (or, with None, remove) ``mcp.servers.NAME`` in group.yaml, keeping every
    other line and comment (a round-trip YAML parser); the result is validated before
    it replaces the file, which an invalid result leaves as it was. The caller holds
    ``config_lock``."""
    from orchestrator.fsatomic import write_atomic

    write_atomic(path, _mcp_edited(path, name, server))


def _mcp_edited(path: Path, name: str, server: dict[str, Any] | None) -> str:
    """group.yaml's text with ``mcp.servers.NAME`` set (or removed), validated."""
    from ruamel.yaml.comments import CommentedMap

    from orchestrator.errors import InvalidConfig

    yaml = _round_trip()
    text = path.read_text(encoding="utf-8")
    data = yaml.load(text)
    if not isinstance(data, dict):
        raise InvalidConfig(f"{path}: the document must be a mapping")
    mcp = data.get("mcp")
    if mcp is None:
        if server is None:
            raise InvalidConfig(f"{path}: no MCP server {name!r} (the file has no mcp:)")
        mcp = data["mcp"] = CommentedMap()
    servers = mcp.get("servers")
    if servers is None:
        servers = mcp["servers"] = CommentedMap()
    if server is None:
        if name not in servers:
            raise InvalidConfig(f"{path}: no MCP server {name!r}")
        del servers[name]
    else:
        entry = CommentedMap()
        for key, value in server.items():
            entry[key] = value
        servers[name] = entry
    out = io.StringIO()
    yaml.dump(data, out)
    parse_group_config(out.getvalue(), path)
    return out.getvalue()
