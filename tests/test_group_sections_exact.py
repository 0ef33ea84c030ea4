"""group.yaml's sections, exactly: ``mcp``, ``web`` and ``models`` (every key's bounds
and error text, naming file, line, key and value), and the cache of parsed group.yaml
data between processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from orchestrator.config.providers import ProviderDef
from orchestrator.groups.mcpconfig import McpServer, McpSettings
from orchestrator.groups.modelsconfig import ModelChoice, PurposeModels
from orchestrator.groups.parsed import MISSING, ParsedYaml
from orchestrator.groups.webconfig import WebSettings
from tests.test_group_config_exact import error, parse

HASH = "0123456789abcdef"
SERVER_NAME = (
    "expected a server name of 1-32 lowercase letters, digits and hyphens, starting with a "
    "letter (such as time or git-repo)"
)
HOST = "expected a host name (example.org) or a pattern of its subdomains (*.example.org)"
ADDRESS = "expected HOST:PORT, such as 127.0.0.1:8080 or [::1]:8080"


def server(body: str) -> str:
    return f"mcp: {{servers: {{time: {{{body}}}}}}}"


# ---- mcp


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (server("remote: Bad"), f"mcp.servers.time.remote: got 'Bad'; {SERVER_NAME}"),
        (server(f"remote: {'a' * 33}"), "mcp.servers.time.remote: is 33 characters; at most 32"),
        (
            server("remote: git, command: x"),
            "mcp.servers.time.command: a remote server has no command, args or env: "
            "the host calls it",
        ),
        (
            server("remote: git, args: [x]"),
            "mcp.servers.time.args: a remote server has no command, args or env: the host calls it",
        ),
        (
            server("remote: git, env: {A: b}"),
            "mcp.servers.time.env: a remote server has no command, args or env: the host calls it",
        ),
        (
            server("args: [x]"),
            "mcp.servers.time.command: is required: the server's program in the group's image "
            "(such as mcp-server-time), or remote: NAME for a server in orchestrator.yaml",
        ),
        (
            server(f"command: {'c' * 1001}"),
            "mcp.servers.time.command: is 1001 characters; at most 1000 allowed",
        ),
        (
            server(f"command: x, args: ['{'a' * 1001}']"),
            "mcp.servers.time.args[0]: must be 1..1000 characters",
        ),
        (
            server("command: x, args: [" + ", ".join(["a"] * 65) + "]"),
            "mcp.servers.time.args: 65 arguments; at most 64",
        ),
        (
            server("command: x, trust: [member, admin]"),
            "mcp.servers.time.trust[1]: got 'admin'; expected creator, member or guest",
        ),
        (
            server(f"command: x, trust: [{'c' * 21}]"),
            "mcp.servers.time.trust[0]: must be 1..20 characters",
        ),
        (
            server("command: x, env: {1A: b}"),
            "mcp.servers.time.env.1A: is not a variable name (letters, digits and _)",
        ),
        (
            server("command: x, env: {7: b}"),
            "mcp.servers.time.env.7: is not a variable name (letters, digits and _)",
        ),
        (
            server(f"command: x, env: {{A{'b' * 64}: c}}"),
            f"mcp.servers.time.env.A{'b' * 64}: is not a variable name",
        ),
        (
            server("command: x, env: {PATH: b}"),
            "mcp.servers.time.env.PATH: is set by the orchestrator and cannot be changed here",
        ),
        (
            server("command: x, env: {LD_PRELOAD: b}"),
            "mcp.servers.time.env.LD_PRELOAD: is set by the orchestrator and cannot be changed",
        ),
        (
            server("command: x, env: {ORCHESTRATOR_X: b}"),
            "mcp.servers.time.env.ORCHESTRATOR_X: is set by the orchestrator",
        ),
        (
            server("command: x, env: {PYTHONHOME: b}"),
            "mcp.servers.time.env.PYTHONHOME: is set by the orchestrator",
        ),
        (
            server("command: x, env: {A: true}"),
            "mcp.servers.time.env.A: must be a string, got True",
        ),
        (server("command: x, env: {A: [1]}"), "mcp.servers.time.env.A: must be a string, got [1]"),
        (
            server('command: x, env: {A: "a\\nb"}'),
            "mcp.servers.time.env.A: must be one line of at most 1000 characters",
        ),
        (
            server(f"command: x, env: {{A: {'v' * 1001}}}"),
            "mcp.servers.time.env.A: must be one line of at most 1000 characters",
        ),
        (
            server(f"command: x, tools: {{'bad name': '{HASH}'}}"),
            "mcp.servers.time.tools.bad name: is not an MCP tool name",
        ),
        (
            server(f"command: x, tools: {{{'t' * 129}: '{HASH}'}}"),
            f"mcp.servers.time.tools.{'t' * 129}: is not an MCP tool name",
        ),
        (
            server("command: x, tools: {now: '0123456789abcdeF'}"),
            "mcp.servers.time.tools.now: got '0123456789abcdeF'; expected the tool's "
            "16-hex-digit hash, as orchestrator mcp add or mcp approve writes it",
        ),
        (
            server("command: x, tools: {now: '0123456789abcdef0'}"),
            "mcp.servers.time.tools.now: got '0123456789abcdef0'; expected the tool's "
            "16-hex-digit hash",
        ),
        (
            server("command: x, tools: {now: 5}"),
            "mcp.servers.time.tools.now: got 5; expected the tool's 16-hex-digit hash",
        ),
        (
            server("command: x, foo: 1"),
            "mcp.servers.time.foo: unknown key; valid keys here: args, command, env, remote, "
            "tools, trust",
        ),
        ("mcp: {other: 1}", "mcp.other: unknown key; valid keys here: servers"),
        ("mcp: {servers: {Bad: {command: x}}}", f"mcp.servers.Bad: got 'Bad'; {SERVER_NAME}"),
        ("mcp: {servers: {1: {command: x}}}", f"mcp.servers.1: got 1; {SERVER_NAME}"),
    ],
)
def test_each_bad_mcp_value_is_named(snippet: str, message: str) -> None:
    got = error(f"name: A\n{snippet}\n")
    assert got.startswith(f"/g/group.yaml:2: {message}"), got


def test_at_most_16_servers_and_128_pinned_tools() -> None:
    many = ", ".join(f"s{i}: {{command: x}}" for i in range(17))
    assert error(f"name: A\nmcp: {{servers: {{{many}}}}}\n") == (
        "/g/group.yaml:2: mcp.servers: 17 servers; at most 16"
    )
    sixteen = ", ".join(f"s{i}: {{command: x}}" for i in range(16))
    assert len(parse(f"name: A\nmcp: {{servers: {{{sixteen}}}}}\n").mcp.servers) == 16
    tools = ", ".join(f"t{i}: '{HASH}'" for i in range(129))
    message = error(f"name: A\n{server(f'command: x, tools: {{{tools}}}')}\n")
    assert message == "/g/group.yaml:2: mcp.servers.time.tools: 129 tools; at most 128"
    tools = ", ".join(f"t{i}: '{HASH}'" for i in range(128))
    config = parse(f"name: A\n{server(f'command: x, tools: {{{tools}}}')}\n")
    assert len(config.mcp.servers[0].tools) == 128
    args = ", ".join(["a"] * 64)
    assert (
        len(parse(f"name: A\n{server(f'command: x, args: [{args}]')}\n").mcp.servers[0].args) == 64
    )


def test_an_mcp_server_as_read() -> None:
    config = parse(
        "name: A\nmcp:\n  servers:\n"
        "    time:\n      command: mcp-server-time\n      args: [--tz, 7]\n"
        f"      env: {{TZ: UTC, N: 3, F: 1.5, PYTHONPATHS: x, _a: ''}}\n"
        f"      trust: [member, guest, member]\n      tools: {{now: '{HASH}', a.b-c_d: '{HASH}'}}\n"
        "    git:\n      remote: git-repo\n"
    )
    time, git = config.mcp.servers
    assert time == McpServer(
        name="time",
        command="mcp-server-time",
        args=("--tz", "7"),
        env=(("TZ", "UTC"), ("N", "3"), ("F", "1.5"), ("PYTHONPATHS", "x"), ("_a", "")),
        remote=None,
        trust=("member", "guest"),
        tools=(("now", HASH), ("a.b-c_d", HASH)),
    )
    assert time.kind == "stdio" and time.pins == {"now": HASH, "a.b-c_d": HASH}
    assert git == McpServer(name="git", remote="git-repo")
    assert git.kind == "remote" and git.trust == ("creator",) and git.command is None
    assert time.to_dict() == {
        "command": "mcp-server-time",
        "args": ["--tz", "7"],
        "env": {"TZ": "UTC", "N": "3", "F": "1.5", "PYTHONPATHS": "x", "_a": ""},
        "trust": ["member", "guest"],
        "tools": {"now": HASH, "a.b-c_d": HASH},
    }
    assert git.to_dict() == {"remote": "git-repo", "trust": ["creator"], "tools": {}}
    assert McpServer(name="x", command="c").to_dict() == {
        "command": "c",
        "trust": ["creator"],
        "tools": {},
    }
    assert config.mcp.to_dict() == {"servers": {"time": time.to_dict(), "git": git.to_dict()}}


def test_mcp_servers_by_name_and_by_trust() -> None:
    a = McpServer(name="a", command="x", trust=("creator", "member"))
    b = McpServer(name="b", command="x", trust=("guest",))
    settings = McpSettings((a, b))
    assert settings.get("a") is a and settings.get("b") is b and settings.get("c") is None
    assert settings.for_trust("member") == (a,)
    assert settings.for_trust("creator") == (a,)
    assert settings.for_trust("guest") == (b,)
    assert settings.for_trust(None) == ()
    assert McpSettings().to_dict() == {"servers": {}}


# ---- web


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (
            "web: {trust: [member, admin]}",
            "web.trust[1]: got 'admin'; expected creator, member or guest",
        ),
        (f"web: {{trust: [{'c' * 21}]}}", "web.trust[0]: must be 1..20 characters"),
        ("web: {allow: ['*.Example.org', 'bad host']}", f"web.allow[1]: got 'bad host'; {HOST}"),
        ("web: {deny: ['x.org', '*.*.x']}", f"web.deny[1]: got '*.*.x'; {HOST}"),
        ("web: {allow: ['-x.org']}", f"web.allow[0]: got '-x.org'; {HOST}"),
        ("web: {allow: ['x-.org']}", f"web.allow[0]: got 'x-.org'; {HOST}"),
        (f"web: {{allow: ['{'a' * 64}']}}", f"web.allow[0]: got '{'a' * 64}'; {HOST}"),
        (f"web: {{deny: ['{'a' * 254}']}}", "web.deny[0]: must be 1..253 characters"),
        ("web: {ports: [0]}", "web.ports: got [0]; expected a list of ports, such as [80, 443]"),
        ("web: {ports: [65536]}", "web.ports: got [65536]; expected a list of ports"),
        ("web: {ports: [80, true]}", "web.ports: got [80, True]; expected a list of ports"),
        ("web: {ports: ['80']}", "web.ports: got ['80']; expected a list of ports"),
        ("web: {ports: 80}", "web.ports: got 80; expected a list of ports, such as [80, 443]"),
        (
            "web: {allow_addresses: ['localhost']}",
            f"web.allow_addresses[0]: got 'localhost'; {ADDRESS}",
        ),
        (
            "web: {allow_addresses: ['127.0.0.1:0']}",
            f"web.allow_addresses[0]: got '127.0.0.1:0'; {ADDRESS}",
        ),
        (
            "web: {allow_addresses: ['127.0.0.1:65536']}",
            f"web.allow_addresses[0]: got '127.0.0.1:65536'; {ADDRESS}",
        ),
        (
            "web: {allow_addresses: ['127.0.0.1:x']}",
            f"web.allow_addresses[0]: got '127.0.0.1:x'; {ADDRESS}",
        ),
        (
            "web: {allow_addresses: ['127.0.0.1:']}",
            f"web.allow_addresses[0]: got '127.0.0.1:'; {ADDRESS}",
        ),
        (
            "web: {allow_addresses: ['a:80', '[127.0.0.1]:80']}",
            "web.allow_addresses[1]: got '[127.0.0.1]:80'; brackets are for an IPv6 address only: "
            "127.0.0.1:80",
        ),
        (
            "web: {allow_addresses: ['Bad_Host:80']}",
            f"web.allow_addresses[0]: got 'Bad_Host:80'; {ADDRESS}",
        ),
        ("web: {allow_addresses: ['[x]:80']}", f"web.allow_addresses[0]: got '[x]:80'; {ADDRESS}"),
        (
            f"web: {{allow_addresses: ['{'a' * 254}:80']}}",
            f"web.allow_addresses[0]: got '{'a' * 254}:80'; {ADDRESS}",
        ),
        (f"web: {{allow_addresses: ['{'a' * 300}:8']}}", "web.allow_addresses[0]: must be 1..300"),
        ("web: {max_fetches_per_hour: 0}", "web.max_fetches_per_hour: got 0; expected 1 to 100000"),
        (
            "web: {max_fetches_per_hour: 100001}",
            "web.max_fetches_per_hour: got 100001; expected 1 to 100000",
        ),
        ("web: {search: ''}", "web.search: must be a non-empty string, got ''"),
        (f"web: {{search: {'s' * 41}}}", "web.search: is 41 characters; at most 40 allowed"),
        ("web: {enabled: 1}", "web.enabled: must be true or false, got 1"),
        (
            "web: {proxy: 1}",
            "web.proxy: unknown key; valid keys here: allow, allow_addresses, deny, enabled, "
            "max_fetches_per_hour, ports, search, trust",
        ),
    ],
)
def test_each_bad_web_value_is_named(snippet: str, message: str) -> None:
    got = error(f"name: A\n{snippet}\n")
    assert got.startswith(f"/g/group.yaml:2: {message}"), got


def test_at_most_200_names_in_allow_and_deny() -> None:
    names = ", ".join(f"h{i}.org" for i in range(201))
    assert error(f"name: A\nweb: {{deny: [{names}]}}\n") == (
        "/g/group.yaml:2: web.deny: 201 entries; at most 200"
    )
    names = ", ".join(f"h{i}.org" for i in range(200))
    assert len(parse(f"name: A\nweb: {{allow: [{names}]}}\n").web.allow) == 200


def test_the_web_policy_as_read() -> None:
    web = parse(
        "name: A\nweb:\n  enabled: true\n  trust: [member, creator, member]\n"
        "  allow: ['*.Wikipedia.ORG', a_b.x-y.org, '*.c']\n  deny: [Bad.Example.com]\n"
        "  ports: [1, 443, 65535, 443]\n  max_fetches_per_hour: 100000\n"
        "  allow_addresses: ['127.0.0.1:8080', '[::1]:1', 'my-host.lan:65535', '127.0.0.1:8080']\n"
        "  search: local\n"
    ).web
    assert web == WebSettings(
        enabled=True,
        trust=("member", "creator"),
        allow=("*.wikipedia.org", "a_b.x-y.org", "*.c"),
        deny=("bad.example.com",),
        ports=(1, 443, 65535),
        max_fetches_per_hour=100000,
        allow_addresses=("127.0.0.1:8080", "[::1]:1", "my-host.lan:65535"),
        search="local",
    )
    assert parse("name: A\nweb: {max_fetches_per_hour: 1}\n").web.max_fetches_per_hour == 1
    assert parse("name: A\nweb: {ports: []}\n").web.ports == ()
    assert parse("name: A\nweb: {allow_addresses: ['::1:80']}\n").web.allow_addresses == ("::1:80",)


def test_the_web_defaults_and_their_dict() -> None:
    web = parse("name: A\nweb:\n").web
    assert web == WebSettings()
    assert web.to_dict() == {
        "enabled": False,
        "trust": ["creator"],
        "allow": [],
        "deny": [],
        "ports": [80, 443],
        "max_fetches_per_hour": 60,
        "allow_addresses": [],
        "search": None,
    }


def test_who_the_web_is_open_to() -> None:
    web = WebSettings(enabled=True, trust=("creator", "member"))
    assert web.open_to("creator") and web.open_to("member")
    assert not web.open_to("guest") and not web.open_to(None)
    assert not WebSettings(enabled=False).open_to("creator")


def test_the_rules_of_fetches_and_of_the_shells_gate() -> None:
    web = WebSettings(allow=("a.org",), deny=("b.org",), ports=(443,), allow_addresses=("h:1",))
    rules = web.rules()
    assert (rules.allow, rules.deny, rules.ports, rules.allow_addresses) == (
        ("a.org",),
        ("b.org",),
        (443,),
        ("h:1",),
    )
    assert rules.need_allow is False and web.rules(gate=True).need_allow is True


# ---- models


def host(name: str, *models: str) -> ProviderDef:
    return ProviderDef(name=name, kind="openai", models=models)


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (
            "models: {tasks: {provider: p, model: x}, extra: 1}",
            "models.extra: unknown key; valid keys here: background, flush, tasks",
        ),
        ("models: {tasks: {provider: p}}", "models.tasks.model: is required"),
        ("models: {flush: {model: m}}", "models.flush.provider: is required"),
        (
            "models: {tasks: {provider: p, model: x, temp: 1}}",
            "models.tasks.temp: unknown key; valid keys here: model, provider",
        ),
        (
            "models: {tasks: {provider: P, model: x}}",
            "models.tasks.provider: 'P' does not match [a-z0-9][a-z0-9_-]{0,39}",
        ),
        (
            f"models: {{tasks: {{provider: p, model: {'m' * 201}}}}}",
            "models.tasks.model: is 201 characters; at most 200 allowed",
        ),
        (
            "models: {background: {provider: offline, model: x}}",
            "models.background: the offline provider runs inside the container, so purposes can "
            "only pick providers the host calls, and only for a group whose own provider is one "
            "(this group's provider is 'p')",
        ),
        ("models: [x]", "models must be a mapping of keys to values, got a list"),
    ],
)
def test_each_bad_purpose_model_is_named(snippet: str, message: str) -> None:
    got = error(f"name: A\nprovider: p\nmodel: m\n{snippet}\n")
    assert got.startswith(f"/g/group.yaml:4: {message}"), got


def test_a_purpose_of_an_offline_group_is_refused() -> None:
    message = error("name: A\nmodels:\n  flush: {provider: p, model: m}\n")
    assert message.endswith("(this group's provider is 'offline')")
    assert message.startswith("/g/group.yaml:3: models.flush: the offline provider")


def test_purpose_models_are_checked_against_the_providers() -> None:
    providers = {"p": host("p", "m", "n"), "q": host("q", "small")}
    base = "name: A\nprovider: p\nmodel: m\nlimits: {models: [m, small]}\nmodels:\n"
    config = parse(
        base + "  tasks: {provider: q, model: small}\n  background: {provider: p, model: m}\n",
        providers,
    )
    assert config.models == PurposeModels(
        tasks=ModelChoice("q", "small"), background=ModelChoice("p", "m")
    )
    assert error(base + "  flush: {provider: r, model: m}\n", providers) == (
        "/g/group.yaml:6: models.flush.provider: unknown provider 'r'; defined: offline, p, q "
        "(see: orchestrator provider list)"
    )
    assert error(base + "  flush: {provider: p, model: n}\n", providers) == (
        "/g/group.yaml:6: models.flush.model: model 'n' is not allowed for provider 'p'; allowed: m"
    )
    # without providers, any names pass
    assert parse(base + "  flush: {provider: r, model: z}\n").models.flush == ModelChoice("r", "z")


def test_purpose_models_pairs_and_dict() -> None:
    models = PurposeModels(background=ModelChoice("a", "b"), flush=ModelChoice("c", "d"))
    assert models.pairs() == [
        ("flush", ModelChoice("c", "d")),
        ("background", ModelChoice("a", "b")),
    ]
    assert models.to_dict() == {
        "flush": {"provider": "c", "model": "d"},
        "tasks": None,
        "background": {"provider": "a", "model": "b"},
    }
    assert PurposeModels().pairs() == []
    assert ModelChoice("p", "m").to_dict() == {"provider": "p", "model": "m"}


# ---- the cache of parsed group.yaml data


def test_the_cache_keeps_entries_by_the_files_bytes(tmp_path: Path) -> None:
    cache = ParsedYaml(tmp_path)
    assert cache.path == tmp_path / "cache/group-yaml.json"
    assert cache.get("a", b"x") is MISSING
    cache.put("a", b"x", {"name": "a"})
    assert cache.get("a", b"x") == {"name": "a"}
    assert cache.get("a", b"y") is MISSING and cache.get("b", b"x") is MISSING
    cache.save()
    assert os.stat(cache.path).st_mode & 0o777 == 0o600
    assert os.stat(cache.path.parent).st_mode & 0o777 == 0o700
    written = json.loads(cache.path.read_text())
    import hashlib

    assert written == {
        "version": 1,
        "entries": {"a": [hashlib.sha256(b"x").hexdigest(), {"name": "a"}]},
    }
    assert ParsedYaml(tmp_path).get("a", b"x") == {"name": "a"}


def test_the_cache_keeps_text_as_it_is(tmp_path: Path) -> None:
    cache = ParsedYaml(tmp_path)
    cache.put("a", b"x", {"name": "Zoë ✓"})
    cache.save()
    assert '"Zoë ✓"' in cache.path.read_text(encoding="utf-8")
    assert ParsedYaml(tmp_path).get("a", b"x") == {"name": "Zoë ✓"}


@pytest.mark.parametrize(
    "data",
    [
        {"n": 1.0, "m": [1]},
        {"n": [1, 2.0]},
        {"n": {"m": True}},
        {"n": [[1], [2]]},
        "text",
        [1, "a", None],
    ],
)
def test_the_cache_keeps_data_json_gives_back_of_the_same_types(
    tmp_path: Path, data: object
) -> None:
    cache = ParsedYaml(tmp_path)
    cache.put("a", b"x", data)
    assert cache.get("a", b"x") == data
    cache.save()
    assert ParsedYaml(tmp_path).get("a", b"x") == data


@pytest.mark.parametrize(
    "data",
    [
        {"n": (1, 2)},  # a tuple comes back a list
        {"n": [1, (2,)]},
        {"n": {"m": (1,)}},
        {1: "a"},  # an integer key comes back text
        {"n": float("nan")},  # not equal to itself
        {"n": {1, 2}},
    ],
)
def test_the_cache_keeps_nothing_json_would_change(tmp_path: Path, data: object) -> None:
    cache = ParsedYaml(tmp_path)
    cache.put("a", b"x", data)
    assert cache.get("a", b"x") is MISSING
    cache.save()
    assert not cache.path.exists()  # nothing changed: nothing written


def test_the_cache_forgets_folders_no_longer_there(tmp_path: Path) -> None:
    cache = ParsedYaml(tmp_path)
    cache.put("a", b"x", 1)
    cache.put("b", b"y", 2)
    cache.save()
    again = ParsedYaml(tmp_path)
    again.forget({"a", "c"})
    again.save()
    last = ParsedYaml(tmp_path)
    assert last.get("a", b"x") == 1 and last.get("b", b"y") is MISSING
    # forgetting nothing writes nothing
    before = cache.path.stat().st_mtime_ns
    cache.path.write_text(cache.path.read_text())
    kept = ParsedYaml(tmp_path)
    kept.forget({"a"})
    cache.path.chmod(0o400)
    kept.save()
    assert json.loads(cache.path.read_text())["entries"].keys() == {"a"}
    del before


def test_an_unchanged_cache_is_not_written(tmp_path: Path) -> None:
    cache = ParsedYaml(tmp_path)
    cache.save()
    assert not (tmp_path / "cache").exists()
    cache.put("a", b"x", 1)
    cache.save()
    cache.path.write_text('{"version": 1, "entries": {}}')
    cache.save()  # saved already: not written again
    assert cache.path.read_text() == '{"version": 1, "entries": {}}'
    loaded = ParsedYaml(tmp_path)
    loaded.get("a", b"x")
    loaded.save()
    assert cache.path.read_text() == '{"version": 1, "entries": {}}'


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        '{"version": 2, "entries": {"a": ["%s", 1]}}',
        '{"entries": {"a": ["%s", 1]}}',
        '{"version": 1, "entries": [["a", 1]]}',
        '{"version": 1}',
    ],
)
def test_a_cache_of_another_shape_or_version_is_not_used(tmp_path: Path, text: str) -> None:
    import hashlib

    path = tmp_path / "cache/group-yaml.json"
    path.parent.mkdir()
    path.write_text(text.replace("%s", hashlib.sha256(b"x").hexdigest()))
    cache = ParsedYaml(tmp_path)
    assert cache.get("a", b"x") is MISSING
    cache.put("b", b"y", 2)
    cache.save()
    assert json.loads(path.read_text())["entries"] == {"b": [hashlib.sha256(b"y").hexdigest(), 2]}


@pytest.mark.parametrize("entry", ['"plain"', '["%s"]', '["%s", 1, 2]', '["other", 1]'])
def test_an_entry_of_another_shape_is_missing(tmp_path: Path, entry: str) -> None:
    import hashlib

    path = tmp_path / "cache/group-yaml.json"
    path.parent.mkdir()
    digest = hashlib.sha256(b"x").hexdigest()
    body = entry.replace("%s", digest)
    path.write_text(f'{{"version": 1, "entries": {{"a": {body}}}}}')
    assert ParsedYaml(tmp_path).get("a", b"x") is MISSING


def test_a_cache_that_cannot_be_written_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("a file where the folder would be")
    cache = ParsedYaml(tmp_path)
    cache.put("a", b"x", 1)
    cache.save()  # quietly not written
    assert cache.get("a", b"x") == 1


def test_an_empty_remote_is_named_as_empty() -> None:
    assert error(f"name: A\n{server('remote: ')}\n") == (
        "/g/group.yaml:2: mcp.servers.time.remote: must be a non-empty string, got None"
    )


def test_an_env_value_of_1000_characters_passes() -> None:
    value = "v" * 1000
    config = parse(f"name: A\n{server(f'command: x, env: {{A: {value}}}')}\n")
    assert config.mcp.servers[0].env == (("A", "v" * 1000),)


def test_an_address_with_one_bracket_is_refused() -> None:
    assert error("name: A\nweb: {allow_addresses: ['[::1:80']}\n") == (
        f"/g/group.yaml:2: web.allow_addresses[0]: got '[::1:80'; {ADDRESS}"
    )


def test_the_cache_makes_its_folders(tmp_path: Path) -> None:
    cache = ParsedYaml(tmp_path / "state")
    cache.put("a", b"x", 1)
    cache.save()
    assert ParsedYaml(tmp_path / "state").get("a", b"x") == 1


def test_the_cache_keeps_no_subclass_json_would_make_plain(tmp_path: Path) -> None:
    class Text(str):
        pass

    cache = ParsedYaml(tmp_path)
    cache.put("a", b"x", {"n": Text("t")})
    assert cache.get("a", b"x") is MISSING
