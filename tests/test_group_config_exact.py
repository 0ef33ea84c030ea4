"""group.yaml, exactly: every key's bounds, its error text (file, line, key, value and
what is valid), the defaults, and the edits that rewrite the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config.providers import ModelInfo, ProviderDef
from orchestrator.errors import InvalidConfig
from orchestrator.groups.config import (
    GroupConfig,
    ModelLimits,
    TaskSettings,
    classify_sender,
    config_lock,
    load_group_config,
    parse_group_config,
    set_mcp_server,
    set_option,
    set_packages,
)
from orchestrator.groups.modelsconfig import ModelChoice, PurposeModels
from orchestrator.money import Prices
from tests.asciilocale import run_in_ascii_locale

P = Path("/g/group.yaml")
BUDGET = (
    "expected a share of the model's context window from 20% to 95% (such as 80%), "
    "or a whole number of characters of at least 2000"
)


def parse(text: str, providers: dict[str, ProviderDef] | None = None) -> GroupConfig:
    return parse_group_config(text, P, providers)


def error(text: str, providers: dict[str, ProviderDef] | None = None) -> str:
    with pytest.raises(InvalidConfig) as info:
        parse(text, providers)
    return info.value.message


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (
            "container: {memory: 63m}",
            "container.memory: got '63m'; expected a size of at least 64m, such as 512m or 1g",
        ),
        (
            "container: {memory: lots}",
            "container.memory: got 'lots'; expected a size of at least 64m, such as 512m or 1g",
        ),
        (
            "container: {cpus: 0.009}",
            "container.cpus: got 0.009; expected a number from 0.01 to 64",
        ),
        ("container: {cpus: 64.5}", "container.cpus: got 64.5; expected a number from 0.01 to 64"),
        ("container: {cpus: true}", "container.cpus: got True; expected a number from 0.01 to 64"),
        ("container: {cpus: '1'}", "container.cpus: got '1'; expected a number from 0.01 to 64"),
        (
            "container: {pids: 15}",
            "container.pids: got 15; expected a whole number from 16 to 32768",
        ),
        (
            "container: {pids: 32769}",
            "container.pids: got 32769; expected a whole number from 16 to 32768",
        ),
        (
            "container: {idle_timeout: 9}",
            "container.idle_timeout: got 9; expected a duration of at least 10s, "
            "such as 30m, 2h or 600",
        ),
        (
            "container: {idle_timeout: soon}",
            "container.idle_timeout: got 'soon'; expected a duration of at least 10s, "
            "such as 30m, 2h or 600",
        ),
        (
            "container: {disk: 1023k}",
            "container.disk: got '1023k'; expected a size of at least 1m, such as 1g or 500m",
        ),
        (
            "container: {disk: huge}",
            "container.disk: got 'huge'; expected a size of at least 1m, such as 1g or 500m",
        ),
        (
            "container: {network: host}",
            "container.network: got 'host'; valid values: none, bridge",
        ),
        (
            "container: {swap: 1g}",
            "container.swap: unknown key; valid keys here: cpus, disk, idle_timeout, memory, "
            "network, pids",
        ),
        ("mounts: {host: /x}", "mounts: must be a list of {host, name, writable} mappings"),
        (
            "mounts: [{host: /srv/a}, {host: /other/a}]",
            "mounts[1].name: 'a' is used by another mount; names must differ",
        ),
        ("mounts: [{host: /}]", "mounts[0].name: must be a non-empty string, got None"),
        (
            "mounts: [{host: ~/x, name: Bad}]",
            "mounts[0].name: 'Bad' does not match [a-z0-9][a-z0-9_-]{0,62}",
        ),
        (
            "mounts: [{host: /x, extra: 1}]",
            "mounts[0].extra: unknown key; valid keys here: host, name, writable",
        ),
        (
            "mounts: [{host: x/y}]",
            "mounts[0].host: got 'x/y'; expected an absolute path (or ~/...)",
        ),
        (
            f"mounts: [{{host: /{'x' * 4096}}}]",
            "mounts[0].host: is 4097 characters; at most 4096 allowed",
        ),
        (
            "mounts: [{host: /x, writable: yes please}]",
            "mounts[0].writable: must be true or false, got 'yes please'",
        ),
        (
            "skills: [Bad]",
            "skills: got ['Bad']; expected 'all' or a list of skill names such as [search]",
        ),
        (
            "skills: [a, 1]",
            "skills: got ['a', 1]; expected 'all' or a list of skill names such as [search]",
        ),
        (
            "skills: some",
            "skills: got 'some'; expected 'all' or a list of skill names such as [search]",
        ),
        ("context_budget: true", f"context_budget: got True; {BUDGET}"),
        ("context_budget: 1999", f"context_budget: got 1999; {BUDGET}"),
        ("context_budget: '1999'", f"context_budget: got 1999; {BUDGET}"),
        ("context_budget: 1", f"context_budget: got 1; {BUDGET}"),
        ("context_budget: 0.19", f"context_budget: got 0.19; {BUDGET}"),
        ("context_budget: 0.96", f"context_budget: got 0.96; {BUDGET}"),
        ("context_budget: '96%'", f"context_budget: got '96%'; {BUDGET}"),
        ("context_budget: '1000%'", f"context_budget: got '1000%'; {BUDGET}"),
        ("context_budget: '80 percent'", f"context_budget: got '80 percent'; {BUDGET}"),
        ("context_budget: lots", f"context_budget: got 'lots'; {BUDGET}"),
        (
            "limits: {cost_per_day: -1}",
            "limits.cost_per_day: got -1; expected an amount from 0 in orchestrator.yaml's "
            "currency, such as 5 or 0.5",
        ),
        (
            "limits: {cost_per_day: true}",
            "limits.cost_per_day: got True; expected an amount from 0 in orchestrator.yaml's "
            "currency, such as 5 or 0.5",
        ),
        (
            "limits: {cost_per_month: '5'}",
            "limits.cost_per_month: got '5'; expected an amount from 0 in orchestrator.yaml's "
            "currency, such as 5 or 0.5",
        ),
        (
            "limits: {requests_per_minute: 0}",
            "limits.requests_per_minute: got 0; expected 1 to 100000",
        ),
        (
            "limits: {requests_per_minute: 100001}",
            "limits.requests_per_minute: got 100001; expected 1 to 100000",
        ),
        (
            "limits: {tokens_per_turn: 0}",
            "limits.tokens_per_turn: got 0; expected a whole number from 1",
        ),
        (
            "limits: {tokens_per_day: 0}",
            "limits.tokens_per_day: got 0; expected a whole number from 1",
        ),
        ("limits: {max_tokens: 15}", "limits.max_tokens: got 15; expected 16 to 1000000"),
        ("limits: {max_tokens: 1000001}", "limits.max_tokens: got 1000001; expected 16 to 1000000"),
        (
            f"limits: {{models: ['{'m' * 201}']}}",
            "limits.models[0]: must be 1..200 characters, got",
        ),
        (
            "limits: {bogus: 1}",
            "limits.bogus: unknown key; valid keys here: cost_per_day, cost_per_month, "
            "max_tokens, models, requests_per_minute, tokens_per_day, tokens_per_turn",
        ),
        ("turn_timeout: 0", "turn_timeout: got 0; expected a duration from 1s to 60m, such as 5m"),
        (
            "turn_timeout: 3601",
            "turn_timeout: got 3601; expected a duration from 1s to 60m, such as 5m",
        ),
        (
            "learned_max_chars: 0",
            "learned_max_chars: got 0; expected a whole number of characters from 1 to 100000",
        ),
        (
            "learned_max_chars: 100001",
            "learned_max_chars: got 100001; expected a whole number of characters from 1 to 100000",
        ),
        (
            "timezone: Mars/Olympus",
            "timezone: got 'Mars/Olympus'; expected an IANA time zone such as Europe/Lisbon",
        ),
        (
            "timezone: '../x'",
            "timezone: got '../x'; expected an IANA time zone such as Europe/Lisbon",
        ),
        (f"timezone: {'A' * 65}", "timezone: is 65 characters; at most 64 allowed"),
        (
            "tasks: {allowed: [guest]}",
            "tasks.allowed[0]: got 'guest'; expected creator or member (guests never)",
        ),
        (
            "tasks: {allowed: [member, guests]}",
            "tasks.allowed[1]: got 'guests'; expected creator or member (guests never)",
        ),
        (f"tasks: {{allowed: [{'c' * 21}]}}", "tasks.allowed[0]: must be 1..20 characters, got"),
        ("tasks: {max: -1}", "tasks.max: got -1; expected 0 to 10000"),
        ("tasks: {max: 10001}", "tasks.max: got 10001; expected 0 to 10000"),
        (
            "tasks: {min_interval: 0}",
            "tasks.min_interval: got 0; expected a duration of at least 1s",
        ),
        ("tasks: {grace: -1}", "tasks.grace: got -1; expected a duration of at least 0s"),
        ("tasks: {grace: soon}", "tasks.grace: got 'soon'; expected a duration of at least 0s"),
        ("tasks: {max_runs_per_hour: 0}", "tasks.max_runs_per_hour: got 0; expected 1 to 100000"),
        (
            "tasks: {max_runs_per_hour: 100001}",
            "tasks.max_runs_per_hour: got 100001; expected 1 to 100000",
        ),
        (
            "tasks: {timezone: Nowhere/X}",
            "tasks.timezone: got 'Nowhere/X'; expected an IANA time zone such as Europe/Lisbon",
        ),
        (
            "tasks: {every: 1}",
            "tasks.every: unknown key; valid keys here: allowed, grace, max, max_runs_per_hour, "
            "min_interval, timezone",
        ),
        (
            "tools: {shell: [guest]}",
            "tools.shell[0]: got 'guest'; expected creator or member (guests never), "
            "or [] for nobody",
        ),
        (
            "tools: {shell: [creator, admin]}",
            "tools.shell[1]: got 'admin'; expected creator or member (guests never), "
            "or [] for nobody",
        ),
        (f"tools: {{shell: [{'c' * 21}]}}", "tools.shell[0]: must be 1..20 characters, got"),
        ("tools: {other: 1}", "tools.other: unknown key; valid keys here: shell"),
        (
            "memory: {consolidate: weekly}",
            "memory.consolidate: got 'weekly'; valid values: off, daily",
        ),
        ("memory: {often: 1}", "memory.often: unknown key; valid keys here: consolidate"),
        (
            "media: {transcribe: Bad}",
            "media.transcribe: 'Bad' does not match [a-z0-9][a-z0-9_-]{0,39}",
        ),
        ("media: {images: 1}", "media.images: unknown key; valid keys here: transcribe"),
        (
            "media: {transcribe: yes}",
            "media.transcribe: must be a non-empty string, got True (YAML reads an unquoted "
            "yes, no, on, off, true or false as true or false: put the value in quotes)",
        ),
        (
            "packages: {debian: ['Bad Name']}",
            "packages.debian[0]: got 'Bad Name'; expected a Debian package name: lowercase "
            "letters, digits, '+', '-' and '.', at least two characters, starting with a letter "
            "or digit",
        ),
        (
            "packages: {python: [ok, '../x']}",
            "packages.python[1]: got '../x': no options, paths, URLs or markers; expected a "
            "name with an optional version, such as requests or rich==13.7.1",
        ),
        (
            f"packages: {{debian: ['{'a' * 201}']}}",
            "packages.debian[0]: must be 1..200 characters, got",
        ),
        (
            "packages: {from_chat: maybe}",
            "packages.from_chat: must be true or false, got 'maybe'",
        ),
        (
            "packages: {pip: [x]}",
            "packages.pip: unknown key; valid keys here: debian, from_chat, python",
        ),
        (
            "creators: [telegram:1, 'email:a@b.c']",
            "creators[1]: 'email:a@b.c': Email senders cannot be creators (Email does not prove "
            "who sent a message, and a creator may run the shell and approve requests); name "
            "them under members, or be a creator through another channel",
        ),
        (f"creators: ['{'c' * 201}']", "creators[0]: must be 1..200 characters, got"),
        (f"members: ['{'m' * 201}']", "members[0]: must be 1..200 characters, got"),
        ("unknown_senders: maybe", "unknown_senders: got 'maybe'; valid values: drop, allow"),
        ("provider: Big", "provider: 'Big' does not match [a-z0-9][a-z0-9_-]{0,39}"),
        (f"model: {'m' * 201}", "model: is 201 characters; at most 200 allowed"),
        (
            "models: {tasks: {provider: offline, model: x}}",
            "models.tasks: the offline provider runs inside the container, so purposes can only "
            "pick providers the host calls, and only for a group whose own provider is one "
            "(this group's provider is 'offline')",
        ),
        ("mcp: {servers: {Bad: {command: x}}}", "mcp.servers.Bad: got 'Bad'; expected a server"),
        ("web: {enabled: sometimes}", "web.enabled: must be true or false, got 'sometimes'"),
        ("memory: [daily]", "memory must be a mapping of keys to values, got a list"),
    ],
)
def test_each_bad_value_is_named_with_its_line_and_what_is_valid(
    snippet: str, message: str
) -> None:
    got = error(f"name: A\n{snippet}\n")
    assert got.startswith(f"/g/group.yaml:2: {message}"), got


@pytest.mark.parametrize(
    ("snippet", "attribute", "value"),
    [
        ("container: {memory: 64m}", "container.memory_bytes", 64 * 1024**2),
        ("container: {cpus: 0.01}", "container.cpus", 0.01),
        ("container: {cpus: 64}", "container.cpus", 64.0),
        ("container: {pids: 16}", "container.pids", 16),
        ("container: {pids: 32768}", "container.pids", 32768),
        ("container: {idle_timeout: 10}", "container.idle_timeout_seconds", 10),
        ("container: {disk: 1m}", "container.disk_bytes", 1024**2),
        ("container: {disk: 2g}", "container.disk_bytes", 2 * 1024**3),
        ("container: {network: bridge}", "container.network", "bridge"),
        ("context_budget: 2000", "context_budget.max_chars", 2000),
        ("context_budget: ' 2500 '", "context_budget.max_chars", 2500),
        ("context_budget: 0.2", "context_budget.share", 0.2),
        ("context_budget: 0.95", "context_budget.share", 0.95),
        ("context_budget: '95%'", "context_budget.share", 0.95),
        ("context_budget: ' 50.5 % '", "context_budget.share", 0.505),
        ("turn_timeout: 1", "turn_timeout_seconds", 1),
        ("turn_timeout: 60m", "turn_timeout_seconds", 3600),
        ("learned_max_chars: 1", "learned_max_chars", 1),
        ("learned_max_chars: 100000", "learned_max_chars", 100000),
        ("limits: {requests_per_minute: 1}", "limits.requests_per_minute", 1),
        ("limits: {requests_per_minute: 100000}", "limits.requests_per_minute", 100000),
        ("limits: {tokens_per_turn: 1}", "limits.tokens_per_turn", 1),
        ("limits: {tokens_per_day: 1}", "limits.tokens_per_day", 1),
        ("limits: {max_tokens: 16}", "limits.max_tokens", 16),
        ("limits: {max_tokens: 1000000}", "limits.max_tokens", 1000000),
        ("limits: {cost_per_day: 0}", "limits.cost_per_day", 0.0),
        ("limits: {cost_per_month: 2}", "limits.cost_per_month", 2.0),
        ("tasks: {max: 0}", "tasks.max_tasks", 0),
        ("tasks: {max: 10000}", "tasks.max_tasks", 10000),
        ("tasks: {min_interval: 1}", "tasks.min_interval_seconds", 1),
        ("tasks: {grace: 0}", "tasks.grace_seconds", 0),
        ("tasks: {max_runs_per_hour: 1}", "tasks.max_runs_per_hour", 1),
        ("tasks: {max_runs_per_hour: 100000}", "tasks.max_runs_per_hour", 100000),
        ("tasks: {allowed: [member, member]}", "tasks.allowed", ("member",)),
        ("tasks: {allowed: []}", "tasks.allowed", ()),
        ("tools: {shell: []}", "tools.shell", ()),
        ("tools: {shell: [member, creator, member]}", "tools.shell", ("member", "creator")),
        ("memory: {consolidate: daily}", "memory.consolidate", "daily"),
        ("memory: {consolidate: off}", "memory.consolidate", "off"),
        ("media: {transcribe: whisper-1}", "media.transcribe", "whisper-1"),
        ("media: {transcribe: off}", "media.transcribe", "off"),
        ("media: {transcribe: no}", "media.transcribe", "off"),
        ("timezone: Europe/Lisbon", "tasks.timezone", "Europe/Lisbon"),
        ("skills: []", "skills", ()),
        ("skills: [a, b-2]", "skills", ("a", "b-2")),
        ("packages: {debian: [jq, jq, curl]}", "packages.debian", ("jq", "curl")),
        ("packages: {python: [rich, rich]}", "packages.python", ("rich",)),
        ("packages: {from_chat: true}", "packages.from_chat", True),
        ("packages: {debian: [jq]}", "packages.from_chat", False),
        ("members: [bob, 7]", "members", ("bob", "7")),
        ("unknown_senders: allow", "unknown_senders", "allow"),
        ("session_mode: shared", "session_mode", "shared"),
        ("model: m", "model", "m"),
        ("provider: p-1", "provider", "p-1"),
    ],
)
def test_each_boundary_value_is_taken(snippet: str, attribute: str, value: object) -> None:
    got: object = parse(f"name: A\n{snippet}\n")
    for part in attribute.split("."):
        got = getattr(got, part)
    assert got == value


def test_the_defaults_of_every_section() -> None:
    config = parse("name: A\n")
    assert config.container.cpus == 1.0 and config.container.pids == 256
    assert config.container.disk_bytes == 1024**3
    assert config.context_budget.share == 0.8 and config.context_budget.max_chars is None
    assert config.turn_timeout_seconds == 300 and config.learned_max_chars == 16000
    assert config.limits == ModelLimits(
        models=(),
        requests_per_minute=30,
        tokens_per_turn=400_000,
        tokens_per_day=4_000_000,
        max_tokens=1024,
        cost_per_day=None,
        cost_per_month=None,
    )
    assert config.tasks == TaskSettings(
        allowed=("creator", "member"),
        max_tasks=50,
        min_interval_seconds=60,
        grace_seconds=3600,
        timezone="UTC",
        max_runs_per_hour_set=None,
    )
    assert config.tools.shell == ("creator",)
    assert config.memory.consolidate == "off" and config.media.transcribe == "off"
    assert config.timezone == "UTC" and config.mounts == () and config.creators == ()
    assert config.models == PurposeModels()
    # empty sections are the defaults too
    assert parse("name: A\ncontainer:\nlimits:\ntasks:\ntools:\nmemory:\nmedia:\n") == config


def test_mounts_are_named_from_their_folder_unless_named() -> None:
    config = parse(
        "name: A\nmounts:\n  - {host: '/srv/My Docs!'}\n  - {host: ~/notes, name: n_1}\n"
        "  - {host: /data/__x__, writable: true}\n"
    )
    assert [(m.host_path, m.name, m.writable) for m in config.mounts] == [
        ("/srv/My Docs!", "my-docs", False),
        ("~/notes", "n_1", False),
        ("/data/__x__", "x", True),
    ]


def test_a_bare_off_for_consolidate_is_off() -> None:
    assert parse("name: A\nmemory:\n  consolidate: false\n").memory.consolidate == "off"
    assert "memory.consolidate: got True" in error("name: A\nmemory:\n  consolidate: true\n")


def test_a_share_and_a_number_of_characters_print_as_written() -> None:
    assert str(parse("name: A\ncontext_budget: 3000\n").context_budget) == "3000"
    assert str(parse("name: A\ncontext_budget: 0.5\n").context_budget) == "50%"
    assert str(parse("name: A\n").context_budget) == "80%"
    number = parse("name: A\ncontext_budget: 3000\n").context_budget
    assert number.share == 0.8  # the default share stays; the number caps it


def test_task_runs_per_hour_follow_the_shortest_interval() -> None:
    assert TaskSettings(min_interval_seconds=60).max_runs_per_hour == 120
    assert TaskSettings(min_interval_seconds=20).max_runs_per_hour == 360
    assert TaskSettings(min_interval_seconds=7).max_runs_per_hour == 2 * 515
    assert TaskSettings(min_interval_seconds=3600).max_runs_per_hour == 120
    assert TaskSettings(max_runs_per_hour_set=5).max_runs_per_hour == 5
    assert TaskSettings(min_interval_seconds=1, max_runs_per_hour_set=0).max_runs_per_hour == 0


def test_tasks_take_the_groups_zone_unless_their_own() -> None:
    config = parse("name: A\ntimezone: Asia/Tokyo\n")
    assert config.timezone == "Asia/Tokyo" and config.tasks.timezone == "Asia/Tokyo"
    config = parse("name: A\ntimezone: Asia/Tokyo\ntasks: {timezone: Europe/Paris}\n")
    assert config.timezone == "Asia/Tokyo" and config.tasks.timezone == "Europe/Paris"


def test_money_caps() -> None:
    assert ModelLimits().capped is False
    assert ModelLimits(cost_per_day=0.0).capped is True
    assert ModelLimits(cost_per_month=1.0).capped is True
    limits = parse("name: A\nlimits: {cost_per_day: 0.5, cost_per_month: 3}\n").limits
    assert limits.cost_per_day == 0.5 and limits.cost_per_month == 3.0
    assert isinstance(limits.cost_per_month, float)


def test_to_dict_gives_lists_and_the_derived_runs_per_hour() -> None:
    config = parse(
        "name: A\ncreators: [a]\nmembers: [b]\nmounts: [{host: /x}]\nskills: [s]\n"
        "limits: {models: [m]}\ntasks: {allowed: [member], min_interval: 30}\n"
        "tools: {shell: [member]}\npackages: {debian: [jq], python: [rich]}\n"
        "context_budget: 0.5\n"
    )
    data = config.to_dict()
    assert data["creators"] == ["a"] and data["members"] == ["b"]
    assert data["mounts"] == [{"host_path": "/x", "name": "x", "writable": False}]
    assert data["skills"] == ["s"] and data["limits"]["models"] == ["m"]
    assert data["tasks"]["allowed"] == ["member"] and data["tasks"]["max_runs_per_hour"] == 240
    assert "max_runs_per_hour_set" not in data["tasks"]
    assert data["tools"]["shell"] == ["member"]
    assert data["packages"]["debian"] == ["jq"] and data["packages"]["python"] == ["rich"]
    assert data["context_budget"] == "50%"
    assert data["mcp"] == {"servers": {}} and data["web"]["enabled"] is False
    assert data["models"] == {"flush": None, "tasks": None, "background": None}
    assert parse("name: A\n").to_dict()["skills"] == "all"


def test_the_trust_of_a_sender() -> None:
    config = GroupConfig(name="A", creators=("alice", "email:c@d.e"), members=("bob",))
    assert classify_sender(config, "alice") == "creator"
    assert classify_sender(config, "email:c@d.e") is None  # never a creator by email
    assert classify_sender(config, "bob") == "member"
    assert classify_sender(config, "carol") is None
    assert classify_sender(config, "carol", "member") == "member"
    assert classify_sender(config, "bob", "guest") == "member"
    open_config = GroupConfig(name="A", unknown_senders="allow")
    assert classify_sender(open_config, "carol") == "guest"


def test_model_for_and_the_pairs_a_group_calls() -> None:
    config = GroupConfig(
        name="A",
        provider="p",
        model="chat",
        models=PurposeModels(flush=ModelChoice("q", "small"), tasks=ModelChoice("p", "chat")),
    )
    assert config.model_for("turn") == ModelChoice("p", "chat")
    assert config.model_for("flush") == ModelChoice("q", "small")
    assert config.model_for("tasks") == ModelChoice("p", "chat")
    assert config.model_for("background") == ModelChoice("p", "chat")
    assert config.model_pairs() == [ModelChoice("p", "chat"), ModelChoice("q", "small")]


def provider(name: str, window: int | None = None, **kw: object) -> ProviderDef:
    info = ModelInfo(context_tokens=window, prices=kw.pop("prices", None))  # type: ignore[arg-type]
    return ProviderDef(name=name, kind="openai", model_info=(("m", info),), **kw)  # type: ignore[arg-type]


def test_the_provider_must_be_defined_and_the_model_allowed() -> None:
    providers = {"p": ProviderDef(name="p", kind="openai", models=("m", "n"))}
    assert parse("name: A\nprovider: p\nmodel: n\n", providers).model == "n"
    assert error("name: A\nprovider: q\nmodel: m\n", providers) == (
        "/g/group.yaml:2: provider: unknown provider 'q'; defined: offline, p "
        "(see: orchestrator provider list)"
    )
    assert error("name: A\nprovider: p\nmodel: x\n", providers) == (
        "/g/group.yaml:3: model: model 'x' is not allowed for provider 'p'; allowed: m, n"
    )
    assert error("name: A\nprovider: p\nmodel: n\nlimits: {models: [m]}\n", providers) == (
        "/g/group.yaml:3: model: model 'n' is not allowed for provider 'p'; allowed: m"
    )
    # without providers (a file read alone), any provider name passes
    assert parse("name: A\nprovider: q\nmodel: m\n").provider == "q"


def test_a_purposes_pair_must_be_defined_and_allowed_by_the_group_too() -> None:
    providers = {"p": ProviderDef(name="p", kind="openai", models=("m", "n"))}
    head = "name: A\nprovider: p\nmodel: m\n"
    flush = parse(head + "models:\n  flush: {provider: p, model: n}\n", providers).models.flush
    assert flush == ModelChoice("p", "n")
    assert error(head + "models:\n  flush: {provider: q, model: n}\n", providers) == (
        "/g/group.yaml:5: models.flush.provider: unknown provider 'q'; defined: offline, p "
        "(see: orchestrator provider list)"
    )
    text = head + "limits: {models: [m]}\nmodels:\n  flush: {provider: p, model: n}\n"
    assert error(text, providers) == (
        "/g/group.yaml:6: models.flush.model: model 'n' is not allowed for provider 'p'; allowed: m"
    )


def test_a_window_too_small_for_a_fresh_context_is_refused_at_its_boundary() -> None:
    # 80% of 2530 tokens is 2024; less 1024 for the answer, 1000 tokens: 3000 characters
    assert parse("name: A\nprovider: p\nmodel: m\n", {"p": provider("p", 2530)}).model == "m"
    message = error("name: A\nprovider: p\nmodel: m\n", {"p": provider("p", 2529)})
    assert message == (
        "/g/group.yaml:1: context_budget: 80% of p/m's 2,529-token window, less 1,024 tokens "
        "for the answer, leaves about 2,997 characters: a fresh context needs at least 3,000 "
        "(instructions and room for one exchange) and every turn would compact; raise "
        "context_budget, lower limits.max_tokens, or use a model with a larger window"
    )
    message = error("name: A\nprovider: p\nmodel: m\n", {"p": provider("p", 1000)})
    assert "leaves about 0 characters" in message


def test_the_answer_is_the_smaller_of_the_groups_and_the_providers_max_tokens() -> None:
    small = {"p": provider("p", 2000, max_tokens=500)}
    # 80% of 2000 is 1600, less 500: 1100 tokens, 3300 characters
    assert parse("name: A\nprovider: p\nmodel: m\n", small).model == "m"
    group_lower = "name: A\nprovider: p\nmodel: m\nlimits: {max_tokens: 600}\n"
    assert parse(group_lower, {"p": provider("p", 2000)}).limits.max_tokens == 600
    message = error("name: A\nprovider: p\nmodel: m\ncontext_budget: 0.5\n", small)
    assert "50% of p/m's 2,000-token window, less 500 tokens for the answer" in message
    assert "leaves about 1,500 characters" in message


def test_every_pair_of_the_group_is_checked_for_its_window() -> None:
    providers = {"p": provider("p"), "q": provider("q", 1000)}
    text = "name: A\nprovider: p\nmodel: m\nmodels:\n  flush: {provider: q, model: m}\n"
    assert "of q/m's 1,000-token window" in error(text, providers)
    unknown = {"p": provider("p"), "q": provider("q")}
    assert parse(text, unknown).models.flush == ModelChoice("q", "m")


def test_a_money_cap_needs_priced_host_models() -> None:
    priced = {"p": provider("p", prices=Prices(input=1.0, output=2.0))}
    text = "name: A\nprovider: p\nmodel: m\nlimits: {cost_per_month: 5}\n"
    assert parse(text, priced).limits.cost_per_month == 5.0
    assert error("name: A\nlimits:\n  cost_per_day: 1\n", priced) == (
        "/g/group.yaml:3: limits.cost_per_day: the offline provider runs inside the container "
        "and costs nothing; a money cap needs a group whose models are priced host models"
    )
    unpriced = {"p": provider("p"), **priced}
    unpriced["q"] = provider("q")
    text = (
        "name: A\nprovider: p\nmodel: m\nlimits:\n  cost_per_month: 5\n"
        "models:\n  tasks: {provider: q, model: m}\n"
    )
    assert error(text, {"p": priced["p"], "q": unpriced["q"]}) == (
        "/g/group.yaml:5: limits.cost_per_month: a money cap needs prices for every model the "
        "group uses, and q/m has none; set providers.q.model_info.m.prices in orchestrator.yaml"
    )
    # both caps: the day's is named
    text = "name: A\nprovider: p\nmodel: x\nlimits:\n  cost_per_day: 1\n  cost_per_month: 5\n"
    assert "limits.cost_per_day: a money cap needs prices" in error(text, priced)
    # no cap: no prices needed
    assert parse("name: A\nprovider: p\nmodel: x\n", {"p": provider("p")}).model == "x"


def test_web_with_a_bridge_network_is_refused() -> None:
    assert error("name: A\ncontainer: {network: bridge}\nweb:\n  enabled: true\n") == (
        "/g/group.yaml:4: web.enabled: a group with container.network: bridge has a network "
        "of its own and would bypass the web policy; set container.network: none to use web"
    )
    assert (
        parse("name: A\ncontainer: {network: bridge}\nweb: {enabled: false}\n").web.enabled is False
    )
    assert parse("name: A\nweb: {enabled: true}\n").web.enabled is True


def test_a_problem_in_one_key_leaves_the_others_reported() -> None:
    message = error(
        "name: A\ncontainer: {pids: 1}\nlimits: {max_tokens: 1}\ntasks: {max: -1}\n"
        "tools: {shell: [x]}\nmemory: {consolidate: x}\nmedia: {transcribe: X}\n"
        "packages: {debian: ['X Y']}\nmcp: {servers: {X: {}}}\nweb: {trust: [x]}\n"
        "models: {x: 1}\nmounts: [{host: x}]\nskills: x\ncontext_budget: x\n"
        "turn_timeout: x\nlearned_max_chars: x\ntimezone: x\ncreators: x\nmembers: x\n"
        "unknown_senders: x\nsession_mode: x\nprovider: X\nmodel: ''\n"
    )
    assert message.startswith("22 problems: ")
    for key in (
        "container.pids", "limits.max_tokens", "tasks.max", "tools.shell[0]",
        "memory.consolidate", "media.transcribe", "packages.debian[0]", "mcp.servers.X",
        "web.trust[0]", "models.x", "mounts[0].host", "skills", "context_budget",
        "turn_timeout", "learned_max_chars", "timezone", "creators", "members",
        "unknown_senders", "session_mode", "provider", "model",
    ):  # fmt: skip
        assert f": {key}: " in message, key


def test_the_files_newer_version_is_refused() -> None:
    from orchestrator.versions import FileTooNew

    with pytest.raises(FileTooNew, match=r"/g/group.yaml is at version 99"):
        parse("version: 99\nname: A\n")
    assert parse("version: 1\nname: A\n").name == "A"


def test_load_reads_the_file(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text("name: A\nprovider: p\nmodel: m\n")
    assert load_group_config(path).provider == "p"
    with pytest.raises(InvalidConfig, match="unknown provider 'p'"):
        load_group_config(path, {})


def test_set_option_replaces_adds_and_nests(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text("# mine\nname: A\nturn_timeout: 5m\ncontainer:\n  memory: 1g\n")
    set_option(path, "turn_timeout", "10m")
    assert path.read_text() == "# mine\nname: A\nturn_timeout: 10m\ncontainer:\n  memory: 1g\n"
    set_option(path, "container.memory", "2g")
    set_option(path, "container.disk", "3g")
    set_option(path, "learned_max_chars", "500")
    assert path.read_text() == (
        "# mine\nname: A\nturn_timeout: 10m\ncontainer:\n  disk: 3g\n  memory: 2g\n"
        "learned_max_chars: 500\n"
    )
    with pytest.raises(InvalidConfig, match=r"group.yaml: no tasks: section to put tasks.max in"):
        set_option(path, "tasks.max", "3")
    with pytest.raises(InvalidConfig, match="turn_timeout: got 0"):
        set_option(path, "turn_timeout", "0")
    assert "turn_timeout: 10m\n" in path.read_text()  # a refused value is not written


def test_set_option_only_matches_the_key_at_its_own_indent(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text("name: A\ncontainer:\n  disk: 2g\n")
    with pytest.raises(InvalidConfig, match=r"group\.yaml:4: disk: unknown key"):
        set_option(path, "disk", "1")  # not a top-level key: appended, then refused
    assert path.read_text() == "name: A\ncontainer:\n  disk: 2g\n"


def test_set_packages_adds_the_section_or_rewrites_its_lists(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text("name: A  # the name\n\n")
    set_packages(path, ("jq",), ("rich==13.7.1",))
    text = path.read_text()
    assert text.startswith("name: A  # the name\n\n# Packages for this group's own image")
    assert text.endswith('packages:\n  debian: ["jq"]\n  python: ["rich==13.7.1"]\n')
    assert load_group_config(path).packages.python == ("rich==13.7.1",)
    set_packages(path, ("jq", "curl"), ())
    assert load_group_config(path).packages.debian == ("jq", "curl")
    assert "debian: [jq, curl]" in path.read_text() and "python: []" in path.read_text()
    assert "# the name" in path.read_text()
    path.write_text("name: A\npackages:\n")
    set_packages(path, ("jq",), ())
    assert load_group_config(path).packages.debian == ("jq",)
    path.write_text("name: A\npackages: [jq]\n")
    with pytest.raises(InvalidConfig) as info:
        set_packages(path, ("jq",), ())
    assert info.value.message == (
        f"{path}: packages: must be a mapping (debian:, python:, from_chat:), not CommentedSeq"
    )
    path.write_text("- a\n")
    with pytest.raises(InvalidConfig, match="the document must be a mapping"):
        set_packages(path, (), ())
    path.write_text("name: A\n")
    with pytest.raises(InvalidConfig, match=r"packages.debian\[0\]"):
        set_packages(path, ("Not A Package",), ())
    assert path.read_text() == "name: A\n"


def test_set_mcp_server_adds_and_removes(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text("name: A\n")
    with pytest.raises(InvalidConfig) as info:
        set_mcp_server(path, "time", None)
    assert info.value.message == f"{path}: no MCP server 'time' (the file has no mcp:)"
    set_mcp_server(path, "time", {"command": "mcp-server-time", "args": ["--x"]})
    server = load_group_config(path).mcp.get("time")
    assert server is not None and server.command == "mcp-server-time"
    assert server.args == ("--x",)
    with pytest.raises(InvalidConfig) as info:
        set_mcp_server(path, "other", None)
    assert info.value.message == f"{path}: no MCP server 'other'"
    set_mcp_server(path, "time", None)
    assert load_group_config(path).mcp.servers == ()
    path.write_text("name: A\nmcp:\n  servers:\n")
    set_mcp_server(path, "git", {"command": "g"})
    assert load_group_config(path).mcp.get("git") is not None
    path.write_text("- a\n")
    with pytest.raises(InvalidConfig, match="the document must be a mapping"):
        set_mcp_server(path, "git", {"command": "g"})


def test_config_lock_is_a_file_beside_group_yaml(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    with config_lock(path):
        assert (tmp_path / ".group.yaml.lock").exists()
    with config_lock(path):  # released: taken again
        pass


def test_a_new_packages_section_lists_every_package_as_json(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text("name: 'A'\n")
    set_packages(path, ("jq", "curl"), ("rich", "httpx==0.27.0"))
    assert path.read_text().endswith(
        '  debian: ["jq", "curl"]\n  python: ["rich", "httpx==0.27.0"]\n'
    )
    set_packages(path, ("jq",), ())
    assert path.read_text().startswith("name: 'A'\n")  # quotes kept on a rewrite


def test_check_mcp_server_refuses_and_writes_nothing(tmp_path: Path) -> None:
    from orchestrator.groups.config import check_mcp_server

    path = tmp_path / "group.yaml"
    path.write_text("name: A\n")
    check_mcp_server(path, "time", {"command": "mcp-server-time"})
    with pytest.raises(InvalidConfig) as info:
        check_mcp_server(path, "time", {"command": "x", "env": {"PATH": "/x"}})
    assert info.value.message.endswith(
        "mcp.servers.time.env.PATH: is set by the orchestrator and cannot be changed here"
    )
    assert path.read_text() == "name: A\n"


def test_at_most_64_packages_of_each_kind() -> None:
    names = ", ".join(f"p{i}" for i in range(64))
    assert len(parse(f"name: A\npackages: {{debian: [{names}]}}\n").packages.debian) == 64
    names = ", ".join(f"p{i}" for i in range(65))
    assert error(f"name: A\npackages: {{python: [{names}]}}\n") == (
        "/g/group.yaml:2: packages.python: 65 entries; at most 64"
    )


def test_an_empty_max_runs_per_hour_is_refused() -> None:
    assert error("name: A\ntasks: {max_runs_per_hour: }\n") == (
        "/g/group.yaml:2: tasks.max_runs_per_hour: got 0; expected 1 to 100000"
    )


def test_an_unknown_purpose_uses_the_chats_model() -> None:
    config = GroupConfig(name="A", provider="p", model="chat")
    assert config.model_for("summary") == ModelChoice("p", "chat")


def test_to_dict_has_each_key_once() -> None:
    data = parse("name: A\n").to_dict()
    assert set(data) == {
        "name", "provider", "model", "creators", "members", "unknown_senders",
        "session_mode", "container", "mounts", "skills", "context_budget",
        "turn_timeout_seconds", "limits", "learned_max_chars", "tasks", "tools",
        "packages", "mcp", "web", "timezone", "models", "memory", "media",
    }  # fmt: skip
    assert data["web"]["trust"] == ["creator"] and data["web"]["ports"] == [80, 443]


def test_bad_sections_beside_the_checks_that_read_them_are_each_reported_once() -> None:
    providers = {"p": provider("p", 100_000, prices=Prices(input=1.0, output=1.0))}
    message = error(
        "name: A\nprovider: p\nmodel: m\ncontainer: {pids: 1}\ncontext_budget: x\n"
        "limits: {max_tokens: 1, cost_per_day: 1}\nweb: {enabled: true}\n"
        "models: {x: 1}\n",
        providers,
    )
    assert message.startswith("4 problems: ")
    for key in ("container.pids", "context_budget", "limits.max_tokens", "models.x"):
        assert f": {key}: " in message, key
    message = error(f"name: A\nprovider: P\nmodel: {'m' * 201}\n", providers)
    assert message.startswith("2 problems: ")
    assert ": provider: 'P' does not match" in message and ": model: is 201" in message
    assert error("name: A\nprovider: P\nmodel: m\n", providers) == (
        "/g/group.yaml:2: provider: 'P' does not match [a-z0-9][a-z0-9_-]{0,39}"
    )
    only_m = {"p": ProviderDef(name="p", kind="openai", models=("m",))}
    assert error(f"name: A\nprovider: p\nmodel: {'m' * 201}\n", only_m) == (
        "/g/group.yaml:3: model: is 201 characters; at most 200 allowed"
    )


def test_the_edits_end_the_file_as_written_and_name_it_in_their_errors(tmp_path: Path) -> None:
    path = tmp_path / "group.yaml"
    path.write_text("name: A\n# end  \n")
    set_option(path, "turn_timeout", "5m")
    assert path.read_text() == "name: A\n# end  \nturn_timeout: 5m\n"
    path.write_text("name: A\n# end  \n")
    set_packages(path, (), ())
    assert path.read_text().startswith("name: A\n# end  \n\n# Packages")
    path.write_text("name: A\n# X\n")
    set_option(path, "turn_timeout", "5m")
    assert path.read_text() == "name: A\n# X\nturn_timeout: 5m\n"
    path.write_text("name: A\n# X\n")
    set_packages(path, (), ())
    assert path.read_text().startswith("name: A\n# X\n\n# Packages")
    with pytest.raises(InvalidConfig) as info:
        set_packages(path, ("Not A Package",), ())
    assert info.value.message.startswith(f"{path}:")
    with pytest.raises(InvalidConfig) as info:
        check_mcp_server_of(path)
    assert info.value.message.startswith(f"{path}:")


def check_mcp_server_of(path: Path) -> None:
    from orchestrator.groups.config import check_mcp_server

    check_mcp_server(path, "time", {"command": "x", "env": {"PATH": "/x"}})


def test_a_group_name_is_at_most_100_characters() -> None:
    assert parse(f"name: {'n' * 100}\n").name == "n" * 100
    assert error(f"name: {'n' * 101}\n") == (f"{P}:1: name: is 101 characters; at most 100 allowed")


def test_the_edits_read_and_write_utf8_whatever_the_locale(tmp_path: Path) -> None:

    start = "# l'équipe\nname: A  # « A »\npackages:\n  debian: []\n"
    edited = (
        "# l'équipe\nname: A  # « A »\npackages:\n  debian: [jq]\n  python: []\n"
        "turn_timeout: 5m\nmcp:\n  servers:\n    heure:\n      command: mcp-heure\n"
        "      args:\n      - --zone=Europe/Zürich\n"
    )
    here, child = tmp_path / "here" / "group.yaml", tmp_path / "child" / "group.yaml"
    for path in (here, child):
        path.parent.mkdir()
        path.write_bytes(start.encode())
    set_option(here, "turn_timeout", "5m")
    set_packages(here, ("jq",), ())
    set_mcp_server(here, "heure", {"command": "mcp-heure", "args": ["--zone=Europe/Zürich"]})
    assert here.read_bytes() == edited.encode()
    run_in_ascii_locale(
        "import sys; from pathlib import Path; "
        "from orchestrator.groups.config import set_mcp_server, set_option, set_packages; "
        "path = Path(sys.argv[1]); set_option(path, 'turn_timeout', '5m'); "
        "set_packages(path, ('jq',), ()); "
        "set_mcp_server(path, 'heure', {'command': 'mcp-heure', "
        "'args': ['--zone=Europe/Z\\xfcrich']})",  # escaped: the child's command line is ASCII
        str(child),
    )
    assert child.read_bytes() == edited.encode()
