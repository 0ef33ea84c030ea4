"""``orchestrator.yaml``: the settings of one home, every key optional (see README,
Configuration). ``load_config`` reads the file and validates each section."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.config.accounts import (
    ChannelAccount,
    HttpToken,
    parse_channel_accounts,
    parse_http_tokens,
)
from orchestrator.config.providers import ProviderDef, parse_providers
from orchestrator.errors import InvalidConfig
from orchestrator.home import Home
from orchestrator.limits import (
    DEFAULT_HTTP_LISTEN,
    DEFAULT_UNPRIVILEGED_GID,
    DEFAULT_UNPRIVILEGED_UID,
    HISTORY_FILE_MAX_BYTES,
)
from orchestrator.validate import MappingReader
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
DEFAULT_IMAGE_REPOSITORY = "orchestrator-agent"
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
    concurrency: int | None = None  # turns at once across groups; None: the CPU count
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


def listen_problem(listen: str, allow_remote: bool) -> str | None:
    """Why ``HOST:PORT`` cannot be the HTTP API's address, or None. A host other than
    loopback (127.0.0.0/8, ::1, localhost) needs ``http.allow_remote: true``."""
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
            f"{host} is not a loopback address; the API has no TLS of its own: put it "
            "behind a TLS reverse proxy and set http.allow_remote: true to listen there"
        )
    return None


def load_config(home: Home, text: str | None = None) -> OrchestratorConfig:
    """Read the home's orchestrator.yaml (defaults when absent); env ORCHESTRATOR_PROJECT
    wins.

    With ``text``, validate that instead of the file (an edit about to be written).
    """
    values: dict[str, object] = {}
    doc = None
    if text is not None:
        doc = parse_yaml_text(text, home.config_file)
    elif home.config_file.exists():
        doc = load_yaml_file(home.config_file)
    if doc is not None:
        reader = MappingReader(doc, doc.data)
        reader.reject_unknown(
            [
                "project",
                "image",
                "unprivileged_user",
                "mount_allowlist",
                "debian_mirror",
                "http",
                "concurrency",
                "per_group_concurrency",
                "state_dir",
                "providers",
                "secrets_file",
                "memory_search",
                "history",
                "channels",
            ]
        )
        if "channels" in reader.data:
            values["channel_accounts"] = parse_channel_accounts(reader.child("channels"))
        if "history" in reader.data:
            from orchestrator.units import parse_size

            history = reader.child("history")
            history.reject_unknown(["max_file_bytes"])
            size = parse_size(history.raw("max_file_bytes", HISTORY_FILE_MAX_BYTES))
            if size is None or not 1024 <= size <= 1024**3:
                raise history.fail(
                    "max_file_bytes",
                    f"got {history.data.get('max_file_bytes')!r}; expected a size from 1k "
                    "to 1g (such as 4m)",
                )
            values["history_max_file_bytes"] = size
        if "memory_search" in reader.data:
            search = reader.child("memory_search")
            search.reject_unknown(["embedder", "vector_weight"])
            embedder = search.choice("embedder", ("none", "wordllama"), "none")
            values["search_embedder"] = None if embedder == "none" else embedder
            weight = search.raw("vector_weight", 0.5)
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not 0 <= weight <= 1
            ):
                raise search.fail("vector_weight", f"got {weight!r}; expected a number from 0 to 1")
            values["search_vector_weight"] = float(weight)
        if "providers" in reader.data:
            values["providers"] = parse_providers(reader.child("providers"))
        if "secrets_file" in reader.data:
            path = Path(reader.text("secrets_file", max_chars=4096)).expanduser()
            values["secrets_file"] = path if path.is_absolute() else home.root / path
        if "state_dir" in reader.data:
            reader.text("state_dir", max_chars=4096)
        if "project" in reader.data:
            values["project"] = reader.text("project", pattern=PROJECT_PATTERN)
        if "image" in reader.data:
            values["image"] = reader.text(
                "image", pattern=r"[a-z0-9][a-z0-9._/-]{0,127}", max_chars=128
            )
        if "unprivileged_user" in reader.data:
            raw = str(reader.raw("unprivileged_user"))
            match = re.fullmatch(r"(\d{1,10}):(\d{1,10})", raw)
            if not match or int(match[1]) == 0 or int(match[2]) == 0:
                raise reader.fail(
                    "unprivileged_user", f"got {raw!r}; expected UID:GID, both non-zero"
                )
            values["unprivileged_uid"] = int(match[1])
            values["unprivileged_gid"] = int(match[2])
        if "mount_allowlist" in reader.data:
            values["mount_allowlist"] = Path(
                reader.text("mount_allowlist", max_chars=4096)
            ).expanduser()
        if "debian_mirror" in reader.data:
            values["debian_mirror"] = reader.text(
                "debian_mirror", pattern=r"https?://\S+", max_chars=512
            )
        if "concurrency" in reader.data:
            values["concurrency"] = reader.whole_number("concurrency", None, 1, 256, "1 to 256")
        if "per_group_concurrency" in reader.data:
            values["per_group_concurrency"] = reader.whole_number(
                "per_group_concurrency", None, 1, 256, "1 to 256"
            )
        if "http" in reader.data:
            http = reader.child("http")
            http.reject_unknown(["listen", "token", "allow_remote", "tokens", "dashboard"])
            values["http_dashboard"] = http.boolean("dashboard", False)
            if "tokens" in http.data:
                values["http_tokens"] = parse_http_tokens(http.child("tokens"))
            allow_remote = http.boolean("allow_remote", False)
            values["http_allow_remote"] = allow_remote
            if "listen" in http.data:
                listen = http.text("listen", max_chars=100)
                problem = listen_problem(listen, allow_remote)
                if problem:
                    raise http.fail("listen", problem)
                values["http_listen"] = listen
            if "token" in http.data:
                token = http.text("token", max_chars=512)
                if len(token) < 16:
                    raise http.fail(
                        "token", "is shorter than 16 characters; use a long random token"
                    )
                values["http_token"] = token
    if os.environ.get(HTTP_TOKEN_ENV):
        token = os.environ[HTTP_TOKEN_ENV]
        if len(token) < 16:
            raise InvalidConfig(
                f"{HTTP_TOKEN_ENV} is {len(token)} characters; the HTTP API needs a token "
                "of 16 or more",
                hint="use a long random token, such as: openssl rand -hex 24",
            )
        values["http_token"] = token
    env_listen = os.environ.get(HTTP_LISTEN_ENV)
    if env_listen:
        allow = bool(values.get("http_allow_remote")) or bool(os.environ.get(HOST_HOME_ENV))
        problem = listen_problem(env_listen, allow)
        if problem:
            raise InvalidConfig(f"{HTTP_LISTEN_ENV}: {problem}")
        values["http_listen"] = env_listen
        values["http_allow_remote"] = allow
    host_home = os.environ.get(HOST_HOME_ENV)
    if host_home:
        if not os.path.isabs(host_home):
            raise InvalidConfig(
                f"{HOST_HOME_ENV}={host_home!r}: not an absolute path",
                hint="give the home's path on the host, as the engine sees it",
            )
        values["host_home"] = Path(host_home)
    env_project = os.environ.get(PROJECT_ENV)
    if env_project:
        if not re.fullmatch(PROJECT_PATTERN, env_project):
            raise InvalidConfig(
                f"{PROJECT_ENV}={env_project!r}: not a valid project name; "
                f"expected lowercase letters, digits, '_' or '-' (at most 40)"
            )
        values["project"] = env_project
    values.setdefault("project", home.default_project())
    return OrchestratorConfig(**values)  # type: ignore[arg-type]
