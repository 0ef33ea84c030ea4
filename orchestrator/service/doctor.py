"""``orchestrator doctor``: checks of what the orchestrator needs, one finding each."""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import load_config
from orchestrator.errors import OrchestratorError
from orchestrator.home import Home
from orchestrator.units import plural
from orchestrator.validate import escape_not_utf8

if TYPE_CHECKING:
    import docker

OK, WARN, FAIL = "ok", "warn", "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    hint: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def check_home(home: Home) -> Check:
    try:
        home.ensure_writable()
        with tempfile.NamedTemporaryFile(dir=home.state_dir, prefix=".doctor-"):
            pass
    except OrchestratorError as exc:
        return Check("home", FAIL, exc.message, exc.hint or "")
    except OSError as exc:
        return Check(
            "home",
            FAIL,
            f"cannot write in {home.state_dir}: {exc.strerror}",
            "pass --home DIR to a writable folder",
        )
    return Check("home", OK, f"{home.root} is writable")


def check_engine() -> tuple[Check, docker.DockerClient | None]:
    from orchestrator.runtime.engine import connect

    try:
        client = connect(timeout=10)
    except OrchestratorError as exc:
        return Check("engine", FAIL, exc.message, exc.hint or ""), None
    version = client.version()
    detail = (
        f"Docker {version.get('Version', '?')}, API {version.get('ApiVersion', '?')} "
        f"({os.environ.get('DOCKER_HOST', 'default socket')})"
    )
    return Check("engine", OK, detail), client


def check_image(client: docker.DockerClient | None, repository: str) -> Check:
    if client is None:
        return Check(
            "agent image", FAIL, "cannot check: the engine is unreachable", "fix the engine first"
        )
    from orchestrator.image.agent import current_agent_image

    try:
        tag, base = current_agent_image(client, repository)
    except OrchestratorError as exc:
        return Check("agent image", FAIL, exc.message, exc.hint or "")
    if tag:
        return Check("agent image", OK, f"{tag} is current (base {base})")
    if base is None:
        return Check(
            "agent image", FAIL, "no base image and no agent image", "run: orchestrator image build"
        )
    return Check(
        "agent image",
        FAIL,
        f"no image matches the current sources (base {base})",
        "run: orchestrator image build",
    )


def check_containers(home: Home, client: docker.DockerClient | None) -> list[Check]:
    """Config drift and orphans among this project's containers; rootless or Podman."""
    if client is None:
        return [
            Check(
                "containers",
                FAIL,
                "cannot check: the engine is unreachable",
                "fix the engine first",
            )
        ]
    from orchestrator.image.agent import agent_image_ref
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.lifecycle import GroupRuntime, default_skills_root
    from orchestrator.runtime.reconcile import KEEP_IDLE, RECREATE, REMOVE, REMOVE_ORPHAN

    config = load_config(home)
    backend = open_backend(config, client=client, home=home)
    facts = backend.engine_facts()
    checks: list[Check] = []
    if facts.get("rootless"):
        checks.append(
            Check(
                "engine mode",
                WARN,
                "rootless engine: containers run as 0:0 "
                "inside, which the engine maps to the unprivileged user running it",
            )
        )
    elif facts.get("podman"):
        checks.append(
            Check("engine mode", WARN, "Podman's Docker API: supported on a best-effort basis")
        )
    else:
        checks.append(
            Check(
                "engine mode",
                OK,
                "rootful Docker: containers run as the group "
                f"folder's owner, or {config.unprivileged_uid}:"
                f"{config.unprivileged_gid} for root-owned folders",
            )
        )
    runtime = GroupRuntime(
        home,
        config,
        backend,
        lambda: agent_image_ref(client, config.image),
        skills_root=default_skills_root(),
        rootless=bool(facts.get("rootless")),
    )
    foreign = []
    for group in runtime.store.groups():
        info = backend.inspect(runtime.container_name(group))
        if info is not None and not runtime.owned(info) and not runtime.is_legacy(info):
            foreign.append(f"{info.name} (home id {info.home or 'unknown'})")
    if foreign:
        checks.append(
            Check(
                "container names",
                FAIL,
                "containers with this home's names belong to another home: " + ", ".join(foreign),
                "give this home its own `project:` in orchestrator.yaml",
            )
        )
    plan = runtime.plan()
    drifted = [a.container for a in plan if a.kind == RECREATE]
    orphans = [a.container for a in plan if a.kind == REMOVE_ORPHAN]
    exited = [a.container for a in plan if a.kind == REMOVE]
    if drifted or orphans:
        parts = []
        if drifted:
            parts.append(f"config drift: {', '.join(drifted)}")
        if orphans:
            parts.append(f"orphans: {', '.join(orphans)}")
        checks.append(Check("containers", WARN, "; ".join(parts), "run: orchestrator reconcile"))
    else:
        running = sum(1 for a in plan if a.kind not in (REMOVE, REMOVE_ORPHAN, KEEP_IDLE))
        idle = sum(1 for a in plan if a.kind == KEEP_IDLE)
        extra = f", {len(exited)} exited (removed at reconcile)" if exited else ""
        extra += f", {idle} scaled to zero" if idle else ""
        checks.append(Check("containers", OK, f"{running} running, none drifted{extra}"))
    return checks


def check_daemon(home: Home) -> Check:
    from orchestrator.service.client import control_request

    try:
        answer = control_request(home, {"op": "status"}, timeout=3)
    except OrchestratorError:
        return Check(
            "daemon",
            WARN,
            "not running: messages are not delivered",
            "start it with: orchestrator up",
        )
    counts = answer.get("counts") or {}
    dead = counts.get("dead", 0)
    detail = (
        f"running; {counts.get('queued', 0)} queued, {answer.get('inflight', 0)} in "
        f"flight, {dead} dead-lettered"
    )
    if dead:
        return Check("daemon", WARN, detail, "see: orchestrator status")
    return Check("daemon", OK, detail)


def listen_is_remote(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def check_queue(home: Home) -> Check:
    from orchestrator.store.messages import QUEUE_FILE, check_queue

    problem = check_queue(home)
    path = home.state_dir / QUEUE_FILE
    if problem is not None:
        return Check(
            "queue",
            FAIL,
            f"{path} is corrupt ({problem}); the daemon cannot start with it",
            "stop the daemon, then: orchestrator doctor --repair-queue (moves it aside, "
            "keeps the pending messages that can be read)",
        )
    return Check("queue", OK, f"{path}" if path.exists() else "no queue yet")


def check_disk(home: Home) -> list[Check]:
    from orchestrator.groups.disk import free_space, limit_mode
    from orchestrator.limits import STATE_RESERVE_BYTES
    from orchestrator.store.db import RESERVE_FILE
    from orchestrator.units import human_bytes

    checks = []
    by_device: dict[int, list[tuple[str, Path]]] = {}
    for label, path in (("groups", home.groups_dir), ("state", home.state_dir)):
        try:
            device = os.stat(path).st_dev
        except OSError:
            continue
        by_device.setdefault(device, []).append((label, path))
    for places in by_device.values():
        label = " and ".join(name for name, _ in places)
        path = places[0][1]
        space = free_space(path)
        if space is None:
            continue
        detail = f"{human_bytes(space.free_bytes)} free of {human_bytes(space.total_bytes)}"
        low = space.free_bytes < 4 * STATE_RESERVE_BYTES
        checks.append(
            Check(
                f"disk ({label})",
                WARN if low else OK,
                f"{path}: {detail}",
                "free some space: a full disk refuses new messages" if low else "",
            )
        )
    reserve = home.state_dir / RESERVE_FILE
    if (home.state_dir / "queue.db").exists() and not reserve.exists():
        checks.append(
            Check(
                "disk reserve",
                WARN,
                f"{reserve} is missing (released on a full disk, or not enough room to make "
                "it); the daemon makes it again when there is room",
            )
        )
    checks.append(Check("disk limits", OK, limit_mode(home.groups_dir)))
    return checks


def check_groups(home: Home) -> list[Check]:
    """Every folder under groups/ holds a valid group.yaml (its provider defined, its
    model allowed); each invalid one fails with every error it has."""
    from orchestrator.groups import GroupStore

    listing = GroupStore(home).listing()
    bad = [item for item in listing if item.group is None]
    checks = [
        Check(f"group {item.folder}", FAIL, item.problem or "invalid", "fix its group.yaml")
        for item in bad
    ]
    if not bad:
        checks.append(Check("groups", OK, f"{len(listing)} valid"))
    return checks


def check_histories(home: Home) -> list[Check]:
    """A group whose memory history cannot record: since when, and why (what changes in
    the meantime is recorded as unattributed once it records again)."""
    from orchestrator.groups import GroupStore
    from orchestrator.memory.history import History

    checks = []
    for item in GroupStore(home).listing():
        gap = History(home.groups_dir, item.folder).gap()
        if gap is not None:
            checks.append(
                Check(
                    f"history {item.folder}",
                    WARN,
                    escape_not_utf8(gap.describe()),
                    "changes found once it records again are unattributed; see "
                    "orchestrator logs --daemon",
                )
            )
    return checks


def check_providers(home: Home) -> list[Check]:
    """Each defined provider's credential can be found (the key itself is never shown);
    groups that name a provider or model that is not allowed are reported by the group
    checks."""
    from orchestrator.config.providers import resolve_key
    from orchestrator.secrets import MissingSecret

    config = load_config(home)
    checks = []
    for definition in sorted(config.providers.values(), key=lambda d: d.name):
        name = f"provider {definition.name}"
        try:
            key = resolve_key(definition, config.secrets_file)
        except MissingSecret as exc:
            checks.append(Check(name, FAIL, exc.message, exc.hint or ""))
            continue
        except OrchestratorError as exc:
            checks.append(Check(name, FAIL, exc.message, exc.hint or ""))
            continue
        where = definition.key_reference() if key else "no key needed"
        checks.append(Check(name, OK, f"{definition.kind} at {definition.url}; key: {where}"))
    return checks


def check_transcription(home: Home) -> list[Check]:
    """Each transcriber can run (an endpoint's key can be found; a local model's folder
    holds its files and faster-whisper is installed), and each group's
    ``media.transcribe`` names one that is defined."""
    import importlib.util

    from orchestrator.config.transcription import OFF
    from orchestrator.groups import GroupStore
    from orchestrator.media.transcribe import LOCAL_MODEL_FILES

    config = load_config(home)
    checks = []
    for definition in sorted(config.transcription.values(), key=lambda d: d.name):
        name = f"transcription {definition.name}"
        if definition.kind == "openai":
            try:
                key = definition.resolve_key(config.secrets_file)
            except OrchestratorError as exc:
                checks.append(Check(name, FAIL, exc.message, exc.hint or ""))
                continue
            where = definition.key.describe() if key else "no key needed"
            checks.append(Check(name, OK, f"{definition.base_url}; key: {where}"))
            continue
        folder = definition.model_dir
        assert folder is not None
        missing = [f for f in LOCAL_MODEL_FILES if not (folder / f).is_file()]
        if missing:
            hint = "model_dir must be a CTranslate2 Whisper model folder"
            checks.append(Check(name, FAIL, f"{folder} lacks {', '.join(missing)}", hint))
        elif importlib.util.find_spec("faster_whisper") is None:
            checks.append(Check(name, FAIL, "faster-whisper is not installed",
                                "pip install 'orchestrator[transcribe-local]'"))  # fmt: skip
        else:
            checks.append(Check(name, OK, f"a local model in {folder}"))
    for item in GroupStore(home).listing():
        chosen = item.group.config.media.transcribe if item.group else OFF
        if chosen != OFF and chosen not in config.transcription:
            checks.append(
                Check(
                    f"group {item.folder}",
                    FAIL,
                    f"media.transcribe names {chosen!r}, which orchestrator.yaml does not define",
                    "define it under transcription, or set media.transcribe: off",
                )
            )
    return checks


def _handle(bot: object) -> str:
    """A bot as people write it: @name on Telegram; a Matrix user id and an email
    address have their @ already."""
    text = str(bot or "?")
    return text if "@" in text else f"@{text}"


def check_channels(home: Home) -> list[Check]:
    """Each channel account: its secrets can be found (never shown), the daemon's last
    word on its connection, and its kind's advice (Telegram's privacy mode where it hides
    group messages, Discord's Message Content intent)."""
    from orchestrator.config.accounts import account_token
    from orchestrator.config.kinds import account_kinds
    from orchestrator.store.chats import ChatStore
    from orchestrator.store.messages import open_queue_if_any

    config = load_config(home)
    if not config.channel_accounts:
        return []
    queue = open_queue_if_any(home)
    chats = ChatStore(queue) if queue is not None else None
    checks = []
    try:
        for account in sorted(config.channel_accounts.values(), key=lambda a: a.name):
            name = f"channel {account.name}"
            try:
                account_token(account, config.secrets_file)
                for ref in account.options.secrets():  # the kind's other secrets
                    ref.require(f"channel account {account.name!r}", config.secrets_file)
            except OrchestratorError as exc:
                checks.append(Check(name, FAIL, exc.message, exc.hint or ""))
                continue
            health = chats.health(account.name) if chats else None
            bound = chats.bindings(account=account.name) if chats else []
            if not health:
                checks.append(
                    Check(
                        name,
                        OK,
                        f"{account.kind}; {account.credential}: {account.token_reference()}; "
                        "not started yet",
                    )
                )
                continue
            if health.get("state") == "error":
                checks.append(
                    Check(
                        name,
                        FAIL,
                        f"cannot reach {account.kind}: "
                        f"{health.get('last_error') or 'no reason recorded'}",
                        f"check the {account.credential} and the network (the daemon keeps "
                        "retrying)",
                    )
                )
                continue
            kind = account_kinds().get(account.kind)
            advice = kind.advice(health, [b.chat for b in bound]) if kind and kind.advice else None
            if advice is not None:
                checks.append(Check(name, WARN, advice.text, advice.hint))
                continue
            checks.append(
                Check(
                    name,
                    OK,
                    f"{account.kind} {_handle(health.get('bot'))} {health.get('state')}; "
                    f"{plural(len(bound), 'chat')} bound; "
                    f"{health.get('messages_in', 0)} in, "
                    f"{health.get('messages_out', 0)} out",
                )
            )
    finally:
        if queue is not None:
            queue.close()
    return checks


def check_web(home: Home) -> list[Check]:
    """Groups with the web enabled (what they reach), groups with a network of their own
    (they bypass every web policy), and whether each search backend answers."""
    from orchestrator.groups import GroupStore
    from orchestrator.web.search import SearchFailed, search

    checks: list[Check] = []
    for group in GroupStore(home).groups():
        web = group.config.web
        if group.config.container.network == "bridge":
            checks.append(
                Check(
                    f"group {group.folder}",
                    WARN,
                    "container.network: bridge: the container has a network of its own, "
                    "outside every web policy, and can reach this host's private addresses",
                    "use container.network: none and the group's web policy instead",
                )
            )
        if web.enabled:
            reach = ", ".join(web.allow) or "any public name (web_fetch); nothing (the shell)"
            checks.append(
                Check(
                    f"web {group.folder}",
                    OK,
                    f"web on for {', '.join(web.trust)}: {reach}"
                    + (
                        f"; opened: {', '.join(web.allow_addresses)}" if web.allow_addresses else ""
                    ),
                )
            )
    config = load_config(home)
    for name, backend in config.web_search.items():
        try:
            key = backend.resolve_key(config.secrets_file)
            search(backend, "orchestrator doctor", key, max_results=1)
        except (SearchFailed, OrchestratorError) as exc:
            checks.append(Check(f"web_search {name}", FAIL, exc.message, exc.hint or ""))
        else:
            checks.append(
                Check(f"web_search {name}", OK, f"{backend.kind} at {backend.url} answers")
            )
    return checks


def check_budgets(home: Home) -> list[Check]:
    """Groups with money caps: what they spent of them today and this month (their own
    days), and a warning for each one paused because a cap was reached."""
    from orchestrator.groups import GroupStore
    from orchestrator.money import day_start, format_money, local_time, month_start
    from orchestrator.relay.ops.model import BUDGET_HOLDER
    from orchestrator.store.messages import MessageQueue
    from orchestrator.store.usage import UsageStore

    capped = [g for g in GroupStore(home).groups() if g.config.limits.capped]
    path = home.state_dir / "queue.db"
    if not capped or not path.exists():
        return []
    currency = load_config(home).currency
    checks: list[Check] = []
    try:
        queue = MessageQueue(path, migrate=False)
    except OrchestratorError:
        return []  # the queue's own check says why
    usage = UsageStore(path)
    try:
        now = time.time()
        for group in capped:
            limits, zone = group.config.limits, group.config.timezone
            spent = [
                f"{format_money(usage.cost_since(group.folder, start(now, zone)), currency)} "
                f"of {cap:g} {currency} {label}"
                for cap, start, label in (
                    (limits.cost_per_day, day_start, "today"),
                    (limits.cost_per_month, month_start, "this month"),
                )
                if cap is not None
            ]
            lease = next((p for p in queue.pauses(group.folder) if p.holder == BUDGET_HOLDER), None)
            if lease is not None:
                until = local_time(lease.expires, zone) if lease.expires else "resumed"
                checks.append(
                    Check(
                        f"budget {group.folder}",
                        WARN,
                        f"paused until {until}: {lease.reason}; spent {', '.join(spent)}",
                        f"its messages wait; to lift the cap until then: orchestrator group "
                        f"resume {group.folder} --budget",
                    )
                )
            else:
                checks.append(Check(f"budget {group.folder}", OK, f"spent {', '.join(spent)}"))
    finally:
        usage.close()
        queue.close()
    return checks


def run_checks(home: Home) -> list[Check]:
    checks = [check_home(home)]
    try:
        config = load_config(home)
    except OrchestratorError as exc:
        checks.append(Check("config", FAIL, exc.message, exc.hint or ""))
        return checks
    checks.append(
        Check(
            "config",
            OK,
            str(home.config_file)
            if home.config_file.exists()
            else "no orchestrator.yaml; using defaults",
        )
    )
    if config.http_token and config.http_allow_remote:
        host = config.http_listen.rpartition(":")[0].strip("[]")
        if listen_is_remote(host):
            checks.append(
                Check(
                    "http",
                    WARN,
                    f"the API listens on {config.http_listen} without TLS",
                    "serve it to others only through a TLS reverse proxy (see the README)",
                )
            )
    checks.append(check_queue(home))
    checks.extend(check_disk(home))
    checks.extend(check_providers(home))
    checks.extend(check_channels(home))
    checks.extend(check_transcription(home))
    checks.extend(check_groups(home))
    checks.extend(check_web(home))
    checks.extend(check_budgets(home))
    checks.extend(check_histories(home))
    engine, client = check_engine()
    checks.append(engine)
    image_check = check_image(client, config.image)
    checks.append(image_check)
    if client is not None and config.runtime.backend == "swarm":
        from orchestrator.service.swarmcheck import check_swarm

        checks.extend(check_swarm(home, config, client))
    if image_check.status == OK:
        checks.extend(check_containers(home, client))
    checks.append(check_daemon(home))
    return checks
