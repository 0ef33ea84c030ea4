"""``orchestrator.yaml``: the settings of one home, every key optional (see README,
Configuration). ``load_config`` reads the file and validates each section."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.config.accounts import (
    ChannelAccount,
    HttpToken,
    parse_channel_accounts,
    parse_http_tokens,
)
from orchestrator.config.mcp import RemoteServerDef, parse_mcp_servers
from orchestrator.config.metrics import MetricsConfig, parse_metrics
from orchestrator.config.providers import ProviderDef, parse_providers
from orchestrator.config.runtime import RuntimeSettings, parse_runtime
from orchestrator.config.transcription import TranscriberDef, parse_transcription
from orchestrator.config.websearch import SearchBackendDef, parse_web_search
from orchestrator.errors import InvalidConfig
from orchestrator.home import Home
from orchestrator.limits import (
    DEFAULT_HTTP_LISTEN,
    DEFAULT_UNPRIVILEGED_GID,
    DEFAULT_UNPRIVILEGED_UID,
    HISTORY_FILE_MAX_BYTES,
)
from orchestrator.money import DEFAULT_CURRENCY, Prices
from orchestrator.validate import MappingReader
from orchestrator.versions import CONFIG_FILE_VERSION
from orchestrator.yamldoc import load_yaml_file, parse_yaml_text

PROJECT_ENV = "ORCHESTRATOR_PROJECT"
HTTP_TOKEN_ENV = "ORCHESTRATOR_HTTP_TOKEN"
# Where the engine sees this home, when the daemon runs in a container of its own (the
# sources of group containers' bind mounts are the engine's paths, not ours).
HOST_HOME_ENV = "ORCHESTRATOR_HOST_HOME"
# The HTTP API's address, over http.listen: compose.yaml listens on every interface of the
# daemon's own container (and publishes the port on the host's loopback only).
HTTP_LISTEN_ENV = "ORCHESTRATOR_HTTP_LISTEN"
DEFAULT_PROJECT = "orchestrator"
# No '.': container names are <project>.<folder>, and neither part may hold the dot.
PROJECT_PATTERN = r"[a-z0-9][a-z0-9_-]{0,39}"
DEFAULT_IMAGE_REPOSITORY = "orchestrator-agent"  # also orchestrator.image.noop's
DEFAULT_ALLOWLIST = Path("~/.config/orchestrator/mount-allowlist.yaml")


@dataclass(frozen=True)
class OrchestratorConfig:
    """Settings from orchestrator.yaml; every key is optional (see README, Configuration)."""

    project: str = DEFAULT_PROJECT
    image: str = DEFAULT_IMAGE_REPOSITORY
    unprivileged_uid: int = DEFAULT_UNPRIVILEGED_UID
    unprivileged_gid: int = DEFAULT_UNPRIVILEGED_GID
    mount_allowlist: Path = field(default_factory=lambda: DEFAULT_ALLOWLIST.expanduser())
    debian_mirror: str | None = None
    http_listen: str = DEFAULT_HTTP_LISTEN
    http_token: str | None = None
    http_allow_remote: bool = False  # may http.listen be on a non-loopback address
    concurrency: int | None = None  # turns at once across groups; None: limits.default_concurrency
    per_group_concurrency: int | None = None  # turns one group may run; None: half
    providers: Mapping[str, ProviderDef] = field(default_factory=dict)
    secrets_file: Path | None = None
    search_embedder: str | None = None  # memory_search.embedder; None: BM25 alone
    search_vector_weight: float = 0.5  # memory_search.vector_weight
    history_max_file_bytes: int = HISTORY_FILE_MAX_BYTES  # history.max_file_bytes
    host_home: Path | None = None  # env ORCHESTRATOR_HOST_HOME: the home as the engine sees it
    channel_accounts: Mapping[str, ChannelAccount] = field(default_factory=dict)  # channels
    http_tokens: Mapping[str, HttpToken] = field(default_factory=dict)  # http.tokens
    http_dashboard: bool = False  # http.dashboard: the operators' pages under /ui/
    mcp_servers: Mapping[str, RemoteServerDef] = field(default_factory=dict)  # remote MCP
    web_search: Mapping[str, SearchBackendDef] = field(default_factory=dict)  # web_search
    currency: str = DEFAULT_CURRENCY  # the currency of every price and money cap
    metrics: MetricsConfig = field(default_factory=MetricsConfig)  # metrics
    # transcription: the transcribers of voice notes (group.yaml media.transcribe)
    transcription: Mapping[str, TranscriberDef] = field(default_factory=dict)
    runtime: RuntimeSettings = field(default_factory=RuntimeSettings)  # the container backend

    def prices_of(self, provider: str, model: str) -> Prices | None:
        """The prices of ``model`` at ``provider`` (None: not priced, or not defined)."""
        definition = self.providers.get(provider)
        return definition.info(model).prices if definition is not None else None


# What a listener on another address lacks, and what to do first: by section.
_REMOTE_ADVICE = {
    "http": "the API has no TLS of its own: put it behind a TLS reverse proxy",
    "metrics": "the metrics listener has no TLS and no token: let only Prometheus reach it",
}


def listen_problem(listen: str, allow_remote: bool, section: str = "http") -> str | None:
    """Why ``HOST:PORT`` cannot be the address of ``section``'s listener (the HTTP API's,
    the metrics listener's), or None. A host other than loopback (127.0.0.0/8, ::1,
    localhost) needs ``<section>.allow_remote: true``."""
    import ipaddress

    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"got {listen!r}; expected HOST:PORT, such as 127.0.0.1:8787"
    host = host.strip("[]")
    if not host or not re.fullmatch(r"[A-Za-z0-9.:-]+", host):
        return f"got {listen!r}; the host must be an address or a name, such as 127.0.0.1"
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        return (
            f"{host} is not a loopback address; {_REMOTE_ADVICE[section]}, and set "
            f"{section}.allow_remote: true to listen there"
        )
    return None


# Each top-level key of orchestrator.yaml is read by its own function: (the file's root
# mapping, the configuration so far, the home) -> the configuration with that section.
Section = Callable[[MappingReader, OrchestratorConfig, Home], OrchestratorConfig]


def _project(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    return replace(config, project=reader.text("project", pattern=PROJECT_PATTERN))


def _image(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    image = reader.text("image", pattern=r"[a-z0-9][a-z0-9._/-]{0,127}", max_chars=128)
    return replace(config, image=image)


def _unprivileged_user(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    raw = str(reader.raw("unprivileged_user"))
    match = re.fullmatch(r"(\d{1,10}):(\d{1,10})", raw)
    if not match or int(match[1]) == 0 or int(match[2]) == 0:
        raise reader.fail("unprivileged_user", f"got {raw!r}; expected UID:GID, both non-zero")
    return replace(config, unprivileged_uid=int(match[1]), unprivileged_gid=int(match[2]))


def _mount_allowlist(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    path = Path(reader.text("mount_allowlist", max_chars=4096)).expanduser()
    return replace(config, mount_allowlist=path)


def _debian_mirror(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    mirror = reader.text("debian_mirror", pattern=r"https?://\S+", max_chars=512)
    return replace(config, debian_mirror=mirror)


def _concurrency(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    return replace(config, concurrency=reader.whole_number("concurrency", None, 1, 256, "1 to 256"))


def _per_group_concurrency(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    share = reader.whole_number("per_group_concurrency", None, 1, 256, "1 to 256")
    return replace(config, per_group_concurrency=share)


def _state_dir(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    reader.text("state_dir", max_chars=4096)  # validated here; Home reads it
    return config


def _providers(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    return replace(config, providers=parse_providers(reader.child("providers")))


def _currency(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    return replace(config, currency=reader.text("currency", pattern=r"[A-Za-z]{1,10}"))


def _secrets_file(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    path = Path(reader.text("secrets_file", max_chars=4096)).expanduser()
    return replace(config, secrets_file=path if path.is_absolute() else home.root / path)


def _memory_search(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    search = reader.child("memory_search")
    search.reject_unknown(["embedder", "vector_weight"])
    embedder = search.choice("embedder", ("none", "wordllama"), "none")
    weight = search.raw("vector_weight", 0.5)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 1:
        raise search.fail("vector_weight", f"got {weight!r}; expected a number from 0 to 1")
    return replace(
        config,
        search_embedder=None if embedder == "none" else embedder,
        search_vector_weight=float(weight),
    )


def _history(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    from orchestrator.units import parse_size

    history = reader.child("history")
    history.reject_unknown(["max_file_bytes"])
    size = parse_size(history.raw("max_file_bytes", HISTORY_FILE_MAX_BYTES))
    if size is None or not 1024 <= size <= 1024**3:
        raise history.fail(
            "max_file_bytes",
            f"got {history.data.get('max_file_bytes')!r}; expected a size from 1k to 1g "
            "(such as 4m)",
        )
    return replace(config, history_max_file_bytes=size)


def _mcp_servers(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    return replace(config, mcp_servers=parse_mcp_servers(reader.child("mcp_servers")))


def _web_search(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    return replace(config, web_search=parse_web_search(reader.child("web_search")))


def _transcription(
    reader: MappingReader, config: OrchestratorConfig, home: Home
) -> OrchestratorConfig:
    return replace(config, transcription=parse_transcription(reader.child("transcription")))


def _channels(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    return replace(config, channel_accounts=parse_channel_accounts(reader.child("channels")))


def _metrics(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    return replace(config, metrics=parse_metrics(reader.child("metrics")))


def _runtime(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    return replace(config, runtime=parse_runtime(reader.child("runtime")))


def _http(reader: MappingReader, config: OrchestratorConfig, home: Home) -> OrchestratorConfig:
    http = reader.child("http")
    http.reject_unknown(["listen", "token", "allow_remote", "tokens", "dashboard"])
    allow_remote = http.boolean("allow_remote", False)
    config = replace(
        config,
        http_dashboard=http.boolean("dashboard", False),
        http_allow_remote=allow_remote,
        http_tokens=parse_http_tokens(http.child("tokens")) if "tokens" in http.data else {},
    )
    if "listen" in http.data:
        listen = http.text("listen", max_chars=100)
        problem = listen_problem(listen, allow_remote)
        if problem:
            raise http.fail("listen", problem)
        config = replace(config, http_listen=listen)
    if "token" in http.data:
        token = http.text("token", max_chars=512)
        if len(token) < 16:
            raise http.fail("token", "is shorter than 16 characters; use a long random token")
        config = replace(config, http_token=token)
    return config


SECTIONS: dict[str, Section] = {
    "project": _project,
    "image": _image,
    "unprivileged_user": _unprivileged_user,
    "mount_allowlist": _mount_allowlist,
    "debian_mirror": _debian_mirror,
    "http": _http,
    "concurrency": _concurrency,
    "per_group_concurrency": _per_group_concurrency,
    "state_dir": _state_dir,
    "providers": _providers,
    "secrets_file": _secrets_file,
    "memory_search": _memory_search,
    "history": _history,
    "channels": _channels,
    "mcp_servers": _mcp_servers,
    "web_search": _web_search,
    "currency": _currency,
    "metrics": _metrics,
    "transcription": _transcription,
    "runtime": _runtime,
}


def load_config(home: Home, text: str | None = None) -> OrchestratorConfig:
    """Read the home's orchestrator.yaml (defaults when absent), each section by its own
    reader; then the environment (ORCHESTRATOR_PROJECT, ORCHESTRATOR_HTTP_TOKEN, ...),
    which wins.

    With ``text``, validate that instead of the file (an edit about to be written).
    """
    config = OrchestratorConfig(project=home.default_project())
    doc = None
    if text is not None:
        doc = parse_yaml_text(text, home.config_file)
    elif home.config_file.exists():
        doc = load_yaml_file(home.config_file)
    if doc is not None:
        reader = MappingReader(doc, doc.data)
        reader.file_version(CONFIG_FILE_VERSION)  # a newer release's file: refused, alone
        reader.reject_unknown(["version", *SECTIONS])
        for key, section in SECTIONS.items():
            if key in reader.data:
                config = section(reader, config, home)
    return _environment(config)


def _environment(config: OrchestratorConfig) -> OrchestratorConfig:
    """The settings the environment gives, over the file's."""
    if os.environ.get(HTTP_TOKEN_ENV):
        token = os.environ[HTTP_TOKEN_ENV]
        if len(token) < 16:
            raise InvalidConfig(
                f"{HTTP_TOKEN_ENV} is {len(token)} characters; the HTTP API needs a token "
                "of 16 or more",
                hint="use a long random token, such as: openssl rand -hex 24",
            )
        config = replace(config, http_token=token)
    env_listen = os.environ.get(HTTP_LISTEN_ENV)
    if env_listen:
        allow = config.http_allow_remote or bool(os.environ.get(HOST_HOME_ENV))
        problem = listen_problem(env_listen, allow)
        if problem:
            raise InvalidConfig(f"{HTTP_LISTEN_ENV}: {problem}")
        config = replace(config, http_listen=env_listen, http_allow_remote=allow)
    host_home = os.environ.get(HOST_HOME_ENV)
    if host_home:
        if not os.path.isabs(host_home):
            raise InvalidConfig(
                f"{HOST_HOME_ENV}={host_home!r}: not an absolute path",
                hint="give the home's path on the host, as the engine sees it",
            )
        config = replace(config, host_home=Path(host_home))
    env_project = os.environ.get(PROJECT_ENV)
    if env_project:
        if not re.fullmatch(PROJECT_PATTERN, env_project):
            raise InvalidConfig(
                f"{PROJECT_ENV}={env_project!r}: not a valid project name; "
                f"expected lowercase letters, digits, '_' or '-' (at most 40)"
            )
        config = replace(config, project=env_project)
    return config
