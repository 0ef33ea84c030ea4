"""orchestrator.yaml's sections, exactly: each value read, each error naming file, key, value."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.config.metrics import MetricsConfig
from orchestrator.config.runtime import RuntimeSettings, SwarmSettings
from orchestrator.errors import InvalidConfig
from orchestrator.home import Home
from tests.asciilocale import run_in_ascii_locale


def load(home: Path, text: str, monkeypatch) -> OrchestratorConfig:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    (home / "orchestrator.yaml").write_text(text)
    return load_config(Home(home))


def error(home: Path, text: str, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidConfig) as caught:
        load(home, text, monkeypatch)
    return str(caught.value).replace(str(home), "HOME")


def test_runtime_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(home, "runtime: {}\n", monkeypatch)
    assert config.runtime == RuntimeSettings("docker", SwarmSettings())
    assert SwarmSettings() == SwarmSettings("orchestrator-runners", "orchestrator", 7070, ())
    assert config.runtime.swarm.address == "orchestrator:7070"


def test_runtime_swarm_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home,
        "runtime:\n  backend: swarm\n  swarm:\n    network: net_1.a\n    daemon: d.example\n"
        "    port: 65535\n    constraints: [' node.labels.zone == east ', 'engine.labels.x!=y']\n",
        monkeypatch,
    )
    assert config.runtime == RuntimeSettings(
        "swarm",
        SwarmSettings(
            "net_1.a", "d.example", 65535, ("node.labels.zone == east", "engine.labels.x!=y")
        ),
    )
    assert config.runtime.swarm.address == "d.example:65535"


def test_runtime_sixteen_constraints_pass(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    items = ", ".join(f"'node.labels.n{i} == v'" for i in range(16))
    config = load(
        home, f"runtime:\n  swarm:\n    port: 1\n    constraints: [{items}]\n", monkeypatch
    )
    assert len(config.runtime.swarm.constraints) == 16 and config.runtime.swarm.port == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "runtime:\n  backend: podman\n",
            "HOME/orchestrator.yaml:2: runtime.backend: got 'podman'; valid values: docker, swarm",
        ),
        (
            "runtime:\n  bogus: 1\n",
            "HOME/orchestrator.yaml:2: runtime.bogus: unknown key; valid keys here: backend, swarm",
        ),
        (
            "runtime:\n  swarm:\n    extra: 1\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.extra: unknown key; valid keys here: "
            "constraints, daemon, network, port",
        ),
        (
            "runtime:\n  swarm:\n    port: 0\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.port: got 0; expected a port from 1 to 65535",
        ),
        (
            "runtime:\n  swarm:\n    port: 65536\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.port: got 65536; "
            "expected a port from 1 to 65535",
        ),
        (
            "runtime:\n  swarm:\n    constraints: x\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.constraints: must be a list of at most 16 "
            "placement constraints, such as ['node.labels.orchestrator == groups']",
        ),
        (
            "runtime:\n  swarm:\n    constraints: [1]\n",
            "HOME/orchestrator.yaml:3: runtime.swarm.constraints[0]: got 1; expected a Swarm "
            "placement constraint such as 'node.labels.orchestrator == groups' or "
            "'node.hostname != edge-1'",
        ),
    ],
)
def test_runtime_errors(home: Path, monkeypatch, text: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, text, monkeypatch) == expected


def test_runtime_seventeen_constraints_refused(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    items = ", ".join(f"'node.labels.n{i} == v'" for i in range(17))
    message = error(home, f"runtime:\n  swarm:\n    constraints: [{items}]\n", monkeypatch)
    assert "runtime.swarm.constraints: must be a list of at most 16" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("network", "-bad"),
        ("network", "a" * 64),
        ("daemon", "Upper"),
        ("daemon", "a" * 254),
        ("constraints", "['node.role = manager']"),
        ("constraints", "['other.x == y']"),
    ],
)
def test_runtime_swarm_bad_names(home: Path, monkeypatch, key: str, value: str) -> None:  # type: ignore[no-untyped-def]
    message = error(home, f"runtime:\n  swarm:\n    {key}: {value}\n", monkeypatch)
    assert f"runtime.swarm.{key}" in message and "orchestrator.yaml:3" in message


def test_metrics_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert load(home, "metrics: {}\n", monkeypatch).metrics == MetricsConfig(True, None, False, 100)


def test_metrics_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home,
        "metrics:\n  listen: 0.0.0.0:9464\n  allow_remote: true\n  max_groups: 10000\n",
        monkeypatch,
    )
    assert config.metrics == MetricsConfig(True, "0.0.0.0:9464", True, 10000)
    off = load(home, "metrics:\n  enabled: false\n  max_groups: 1\n", monkeypatch)
    assert off.metrics == MetricsConfig(False, None, False, 1)
    local = load(home, "metrics:\n  listen: 127.0.0.1:9464\n", monkeypatch)
    assert local.metrics == MetricsConfig(True, "127.0.0.1:9464", False, 100)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "metrics:\n  enabled: false\n  listen: 127.0.0.1:9464\n",
            "HOME/orchestrator.yaml:3: metrics.listen: is set while metrics.enabled is false; "
            "remove one",
        ),
        (
            "metrics:\n  listen: 0.0.0.0:9464\n",
            "HOME/orchestrator.yaml:2: metrics.listen: 0.0.0.0 is not a loopback address; the "
            "metrics listener has no TLS and no token: let only Prometheus reach it, and set "
            "metrics.allow_remote: true to listen there",
        ),
        (
            "metrics:\n  max_groups: 0\n",
            "HOME/orchestrator.yaml:2: metrics.max_groups: got 0; expected 1 to 10,000",
        ),
        (
            "metrics:\n  max_groups: 10001\n",
            "HOME/orchestrator.yaml:2: metrics.max_groups: got 10001; expected 1 to 10,000",
        ),
        (
            "metrics:\n  foo: 1\n",
            "HOME/orchestrator.yaml:2: metrics.foo: unknown key; valid keys here: allow_remote, "
            "enabled, listen, max_groups",
        ),
        (
            "metrics:\n  listen: '" + "1" * 101 + "'\n",
            "HOME/orchestrator.yaml:2: metrics.listen: is 101 characters; at most 100 allowed",
        ),
    ],
)
def test_metrics_errors(home: Path, monkeypatch, text: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, text, monkeypatch) == expected


def test_web_search_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home,
        "web_search:\n  local:\n    kind: searxng\n    url: http://127.0.0.1:8888/\n"
        "    max_results: 20\n    timeout: 120s\n    price_per_query: 0.005\n"
        "  brave:\n    kind: brave\n    key_env: BRAVE\n    max_results: 1\n    timeout: 1s\n",
        monkeypatch,
    )
    local, brave = config.web_search["local"], config.web_search["brave"]
    assert local.to_dict() == {
        "name": "local",
        "kind": "searxng",
        "url": "http://127.0.0.1:8888/",
        "key": "no key",
        "max_results": 20,
        "timeout_seconds": 120.0,
    }
    assert (local.endpoint, local.price) == ("http://127.0.0.1:8888/search", 0.005)
    assert brave.to_dict() == {
        "name": "brave",
        "kind": "brave",
        "url": "https://api.search.brave.com/res/v1/web/search",
        "key": "env BRAVE",
        "max_results": 1,
        "timeout_seconds": 1.0,
    }
    assert (brave.endpoint, brave.price) == ("https://api.search.brave.com/res/v1/web/search", None)


def test_web_search_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    text = "web_search:\n  s:\n    kind: searxng\n    url: https://h\n    price_per_query: 0\n"
    backend = load(home, text, monkeypatch).web_search["s"]
    assert (backend.max_results, backend.timeout_seconds, backend.price) == (8, 10.0, 0.0)
    assert isinstance(backend.timeout_seconds, float) and isinstance(backend.price, float)
    assert backend.resolve_key(None) is None


def search(body: str) -> str:
    return "web_search:\n  s:\n" + "".join(f"    {line}\n" for line in body.splitlines())


URL_HELP = "expected an http:// or https:// URL, such as http://127.0.0.1:8888"
NO_QUERY = "the URL may hold no query or fragment (the search adds its own)"
CREDENTIALS = "holds credentials (user:password@); give the key by key_env or key_secret"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "kind: searxng",
            "2: web_search.s.url: is required for a searxng backend: the instance's base URL, "
            "such as http://127.0.0.1:8888",
        ),
        (
            "kind: brave",
            "2: web_search.s.key_env: a brave backend needs key_env or key_secret (its "
            "subscription token, sent as X-Subscription-Token)",
        ),
        ("kind: searxng\nurl: http://u:p@h/", f"4: web_search.s.url: {CREDENTIALS}"),
        ("kind: searxng\nurl: http://x@h/", f"4: web_search.s.url: {CREDENTIALS}"),
        (
            "kind: searxng\nurl: http://h/?q=1",
            f"4: web_search.s.url: got 'http://h/?q=1'; {NO_QUERY}",
        ),
        ("kind: searxng\nurl: http://h/?", f"4: web_search.s.url: got 'http://h/?'; {NO_QUERY}"),
        ("kind: searxng\nurl: http://h/#", f"4: web_search.s.url: got 'http://h/#'; {NO_QUERY}"),
        ("kind: searxng\nurl: http://h/#f", f"4: web_search.s.url: got 'http://h/#f'; {NO_QUERY}"),
        ("kind: searxng\nurl: ftp://h/", f"4: web_search.s.url: got 'ftp://h/'; {URL_HELP}"),
        ("kind: searxng\nurl: http:///x", f"4: web_search.s.url: got 'http:///x'; {URL_HELP}"),
        (
            "kind: searxng\nurl: http://h:99999/",
            f"4: web_search.s.url: got 'http://h:99999/'; {URL_HELP}",
        ),
        ("kind: searxng\nurl: http://h x/", f"4: web_search.s.url: got 'http://h x/'; {URL_HELP}"),
        (
            "kind: searxng\nurl: 'http://[::1'",
            f"4: web_search.s.url: got 'http://[::1'; {URL_HELP}",
        ),
        (
            "kind: searxng\nurl: 'http://a@[::1'",
            f"4: web_search.s.url: got the URL; {URL_HELP}",
        ),
        (
            "kind: searxng\nurl: http://h\ntimeout: 0",
            "5: web_search.s.timeout: got 0; expected a duration from 1s to 120s, such as 10s",
        ),
        (
            "kind: searxng\nurl: http://h\ntimeout: 121s",
            "5: web_search.s.timeout: got '121s'; expected a duration from 1s to 120s, such as 10s",
        ),
        (
            "kind: searxng\nurl: http://h\nmax_results: 21",
            "5: web_search.s.max_results: got 21; expected a whole number from 1 to 20",
        ),
        (
            "kind: searxng\nurl: http://h\nmax_results: 0",
            "5: web_search.s.max_results: got 0; expected a whole number from 1 to 20",
        ),
        (
            "kind: searxng\nurl: http://h\nprice_per_query: true",
            "5: web_search.s.price_per_query: got True; expected what one search costs, from 0, "
            "such as 0.005",
        ),
        (
            "kind: searxng\nurl: http://h\nprice_per_query: '1'",
            "5: web_search.s.price_per_query: got '1'; expected what one search costs, from 0, "
            "such as 0.005",
        ),
        (
            "kind: searxng\nurl: http://h\nprice_per_query: 1000000",
            "5: web_search.s.price_per_query: got 1000000; expected what one search costs, from "
            "0, such as 0.005",
        ),
        (
            "kind: searxng\nurl: http://h\nprice_per_query: -0.1",
            "5: web_search.s.price_per_query: got -0.1; expected what one search costs, from 0, "
            "such as 0.005",
        ),
        (
            "kind: searxng\nurl: http://h\nfoo: 1",
            "5: web_search.s.foo: unknown key; valid keys here: key_env, key_secret, kind, "
            "max_results, price_per_query, timeout, url",
        ),
        ("kind: bing", "3: web_search.s.kind: got 'bing'; valid values: searxng, brave"),
    ],
)
def test_web_search_errors(home: Path, monkeypatch, body: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, search(body), monkeypatch) == f"HOME/orchestrator.yaml:{expected}"


def test_web_search_url_length(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ok = "http://h/" + "a" * 503
    assert load(home, search(f"kind: searxng\nurl: {ok}"), monkeypatch).web_search["s"].url == ok
    message = error(home, search(f"kind: searxng\nurl: {ok}a"), monkeypatch)
    assert message.endswith("web_search.s.url: is 513 characters; at most 512 allowed")


def test_web_search_bad_name(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert error(home, "web_search:\n  Bad:\n    kind: brave\n", monkeypatch) == (
        "HOME/orchestrator.yaml:2: web_search.Bad: backend names are 1-40 of a-z, 0-9, '-' "
        "and '_', starting with a letter or digit"
    )


def test_transcription_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home,
        "transcription:\n  cloud:\n    kind: openai\n    base_url: http://w.local/v1\n"
        "    key_env: K\n    model: m2\n    price_per_minute: 0.006\n    max_bytes: 1g\n"
        "    language: en\n    max_seconds: 6h\n"
        "  here:\n    kind: local\n    model_dir: /srv/models/small\n    compute_type: float32\n"
        "    threads: 64\n    max_seconds: 1s\n    price_per_minute: 0\n    language: deu\n",
        monkeypatch,
    )
    cloud, here = config.transcription["cloud"], config.transcription["here"]
    assert cloud.to_dict() == {
        "name": "cloud",
        "kind": "openai",
        "base_url": "http://w.local/v1",
        "key": "env K",
        "model": "m2",
        "model_dir": None,
        "language": "en",
        "max_seconds": 21600,
        "price_per_minute": 0.006,
    }
    assert (cloud.max_bytes, cloud.compute_type, cloud.threads) == (1024**3, "int8", 2)
    assert here.to_dict() == {
        "name": "here",
        "kind": "local",
        "base_url": None,
        "key": "no key",
        "model": "small",
        "model_dir": "/srv/models/small",
        "language": "deu",
        "max_seconds": 1,
        "price_per_minute": 0.0,
    }
    assert (here.compute_type, here.threads, here.model_dir) == (
        "float32",
        64,
        Path("/srv/models/small"),
    )
    assert isinstance(here.price_per_minute, float)


def test_transcription_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home,
        "transcription:\n  cloud:\n    kind: openai\n    max_bytes: 1k\n"
        "  here:\n    kind: local\n    model_dir: /m\n    threads: 1\n",
        monkeypatch,
    )
    cloud, here = config.transcription["cloud"], config.transcription["here"]
    assert (cloud.base_url, cloud.model, cloud.model_name, cloud.max_bytes) == (
        "https://api.openai.com/v1",
        "whisper-1",
        "whisper-1",
        1024,
    )
    assert (cloud.language, cloud.max_seconds, cloud.price_per_minute) == (None, 1800, None)
    assert cloud.resolve_key(None) is None
    assert (here.compute_type, here.threads, here.model_name, here.max_seconds) == (
        "int8",
        1,
        "m",
        1800,
    )
    assert (here.max_bytes, here.price_per_minute, here.language) == (25 * 1024**2, None, None)
    assert load(home, "transcription:\n", monkeypatch).transcription == {}


def transcriber(body: str) -> str:
    return "transcription:\n  c:\n" + "".join(f"    {line}\n" for line in body.splitlines())


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "kind: openai\nmax_seconds: 21601",
            "4: transcription.c.max_seconds: got 21601; expected a duration from 1s to 6h, "
            "such as 30m",
        ),
        (
            "kind: openai\nmax_seconds: 0",
            "4: transcription.c.max_seconds: got 0; expected a duration from 1s to 6h, such as 30m",
        ),
        (
            "kind: openai\nmax_bytes: 1023",
            "4: transcription.c.max_bytes: got 1023; expected a size from 1k to 1g",
        ),
        (
            "kind: openai\nmax_bytes: 1073741825",
            "4: transcription.c.max_bytes: got 1073741825; expected a size from 1k to 1g",
        ),
        (
            "kind: openai\nmax_bytes: big",
            "4: transcription.c.max_bytes: got 'big'; expected a size from 1k to 1g",
        ),
        (
            "kind: openai\nthreads: 2",
            "4: transcription.c.threads: is a setting of kind local; this one is openai",
        ),
        (
            "kind: openai\nmodel_dir: /m",
            "4: transcription.c.model_dir: is a setting of kind local; this one is openai",
        ),
        (
            "kind: openai\ncompute_type: int8",
            "4: transcription.c.compute_type: is a setting of kind local; this one is openai",
        ),
        (
            "kind: local\nmodel: x",
            "4: transcription.c.model: is a setting of kind openai; this one is local",
        ),
        (
            "kind: local\nbase_url: http://x",
            "4: transcription.c.base_url: is a setting of kind openai; this one is local",
        ),
        (
            "kind: local\nkey_env: K",
            "4: transcription.c.key_env: is a setting of kind openai; this one is local",
        ),
        (
            "kind: local\nkey_secret: k",
            "4: transcription.c.key_secret: is a setting of kind openai; this one is local",
        ),
        (
            "kind: local\nmax_bytes: 1m",
            "4: transcription.c.max_bytes: is a setting of kind openai; this one is local",
        ),
        (
            "kind: local\nmodel_dir: rel/x",
            "4: transcription.c.model_dir: 'rel/x' is not an absolute path",
        ),
        (
            "kind: local\nmodel_dir: /x\nthreads: 65",
            "5: transcription.c.threads: got 65; expected 1 to 64",
        ),
        (
            "kind: local\nmodel_dir: /x\nthreads: 0",
            "5: transcription.c.threads: got 0; expected 1 to 64",
        ),
        (
            "kind: local\nmodel_dir: /x\ncompute_type: fp8",
            "5: transcription.c.compute_type: got 'fp8'; valid values: int8, int8_float32, "
            "int16, float32, default",
        ),
        (
            "kind: openai\nprice_per_minute: true",
            "4: transcription.c.price_per_minute: got True; expected a price from 0",
        ),
        (
            "kind: openai\nprice_per_minute: '1'",
            "4: transcription.c.price_per_minute: got '1'; expected a price from 0",
        ),
        (
            "kind: openai\nprice_per_minute: -1",
            "4: transcription.c.price_per_minute: got -1; expected a price from 0",
        ),
        (
            "kind: openai\nprice_per_minute: 1000000",
            "4: transcription.c.price_per_minute: got 1000000; expected a price from 0",
        ),
        (
            "kind: openai\nlanguage: english",
            "4: transcription.c.language: is 7 characters; at most 3 allowed",
        ),
        ("kind: openai\nlanguage: e", "4: transcription.c.language: 'e' does not match [a-z]{2,3}"),
        (
            "kind: openai\nbase_url: ftp://x",
            r"4: transcription.c.base_url: 'ftp://x' does not match https?://\S+",
        ),
        ("kind: whisper", "3: transcription.c.kind: got 'whisper'; valid values: openai, local"),
        (
            "kind: openai\nfoo: 1",
            "4: transcription.c.foo: unknown key; valid keys here: base_url, compute_type, "
            "key_env, key_secret, kind, language, max_bytes, max_seconds, model, model_dir, "
            "price_per_minute, threads",
        ),
    ],
)
def test_transcription_errors(home: Path, monkeypatch, body: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, transcriber(body), monkeypatch) == f"HOME/orchestrator.yaml:{expected}"


@pytest.mark.parametrize("name", ["'off'", "Bad", "a" * 41])
def test_transcription_bad_names(home: Path, monkeypatch, name: str) -> None:  # type: ignore[no-untyped-def]
    message = error(home, f"transcription:\n  {name}:\n    kind: openai\n", monkeypatch)
    assert message.endswith(
        ": a transcriber's name is 1-40 of a-z, 0-9, '-' and '_' (not 'off', which "
        "group.yaml media.transcribe uses to turn transcription off)"
    )
    assert f"transcription.{name.strip(chr(39))}:" in message


def test_mcp_servers_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.mcp import HeaderDef, RemoteServerDef
    from orchestrator.secrets import SecretRef

    config = load(
        home,
        "mcp_servers:\n  tracker:\n    url: https://mcp.example.com/mcp\n    transport: sse\n"
        "    headers:\n      Authorization: {secret: tracker-token, prefix: 'Bearer '}\n"
        "      X-Key: {env: XK}\n    groups: [support, a_b-c]\n",
        monkeypatch,
    )
    server = config.mcp_servers["tracker"]
    assert server == RemoteServerDef(
        "tracker",
        "https://mcp.example.com/mcp",
        "sse",
        (
            HeaderDef(
                "Authorization", SecretRef(None, "tracker-token", "env", "secret"), "Bearer "
            ),
            HeaderDef("X-Key", SecretRef("XK", None, "env", "secret"), ""),
        ),
        ("support", "a_b-c"),
    )
    assert server.allows("support") and not server.allows("other")
    monkeypatch.setenv("XK", "k1")
    secrets = home / "secrets.yaml"
    secrets.write_text("tracker-token: s3cret\n")
    secrets.chmod(0o600)
    assert server.resolve_headers(secrets) == {"Authorization": "Bearer s3cret", "X-Key": "k1"}
    target = server.target(secrets)
    assert (target.url, target.transport) == ("https://mcp.example.com/mcp", "sse")
    assert dict(target.headers) == {"Authorization": "Bearer s3cret", "X-Key": "k1"}


def test_mcp_server_defaults(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.mcp import RemoteServerDef

    config = load(home, "mcp_servers:\n  t:\n    url: http://h\n", monkeypatch)
    assert config.mcp_servers == {"t": RemoteServerDef("t", "http://h", "http", (), ())}
    assert config.mcp_servers["t"].resolve_headers(None) == {}


def mcp(body: str) -> str:
    return "mcp_servers:\n  t:\n    url: http://h\n" + "".join(
        f"    {line}\n" for line in body.splitlines()
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "headers:\n  'bad header': {env: X}",
            "5: mcp_servers.t.headers.bad header: is not an HTTP header name",
        ),
        (
            "headers:\n  " + "A" * 65 + ": {env: X}",
            f"5: mcp_servers.t.headers.{'A' * 65}: is not an HTTP header name",
        ),
        (
            "headers:\n  A: inline",
            "5: mcp_servers.t.headers.A: must be a mapping that names where its value comes "
            "from, never the value itself: {env: VAR} or {secret: NAME}, with prefix: 'Bearer ' "
            "if needed",
        ),
        (
            "headers:\n  A: {env: X, prefix: 1}",
            "5: mcp_servers.t.headers.A.prefix: must be a short line of text, such as 'Bearer '",
        ),
        (
            "headers:\n  A: {env: X, prefix: '" + "p" * 65 + "'}",
            "5: mcp_servers.t.headers.A.prefix: must be a short line of text, such as 'Bearer '",
        ),
        (
            'headers:\n  A: {env: X, prefix: "a\\nb"}',
            "5: mcp_servers.t.headers.A.prefix: must be a short line of text, such as 'Bearer '",
        ),
        (
            "headers:\n  A: {env: X, foo: 1}",
            "5: mcp_servers.t.headers.A.foo: unknown key; valid keys here: env, prefix, secret",
        ),
        ("headers:\n  A: {}", "5: mcp_servers.t.headers.A.env: give env or secret (one of them)"),
        ("groups: [ok, Bad]", "4: mcp_servers.t.groups[1]: got 'Bad'; expected a group folder"),
        ("transport: ws", "4: mcp_servers.t.transport: got 'ws'; valid values: http, sse"),
        (
            "foo: 1",
            "4: mcp_servers.t.foo: unknown key; valid keys here: groups, headers, transport, url",
        ),
    ],
)
def test_mcp_server_errors(home: Path, monkeypatch, body: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, mcp(body), monkeypatch) == f"HOME/orchestrator.yaml:{expected}"


def test_mcp_server_prefix_of_64_passes(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home, mcp("headers:\n  " + "A" * 64 + ": {env: X, prefix: '" + "p" * 64 + "'}"), monkeypatch
    )
    (header,) = config.mcp_servers["t"].headers
    assert (header.name, header.prefix) == ("A" * 64, "p" * 64)


def test_mcp_server_bad_url_and_name(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert error(home, "mcp_servers:\n  t:\n    url: ftp://h\n", monkeypatch) == (
        r"HOME/orchestrator.yaml:3: mcp_servers.t.url: 'ftp://h' does not match https?://\S+"
    )
    assert error(home, "mcp_servers:\n  'bad name':\n    url: http://h\n", monkeypatch) == (
        "HOME/orchestrator.yaml:2: mcp_servers.bad name: got 'bad name'; expected a server "
        "name of 1-32 lowercase letters, digits and hyphens, starting with a letter (such as "
        "time or git-repo)"
    )


PROVIDERS = (
    "providers:\n  claude:\n    kind: anthropic\n    key_env: AK\n"
    "    models: [claude-sonnet-4-5]\n"
    "    max_tokens: 1000000\n    stream: false\n"
    "  local:\n    kind: openai\n    base_url: http://127.0.0.1:11434/v1\n"
    "    models: [llama3.1, m2]\n"
    "    max_tokens: 1\n    model_info:\n      llama3.1:\n        context_tokens: 256\n"
    "        prices: {input: 0, output: 0}\n        vision: true\n"
    "      m2:\n        context_tokens: 100000000\n"
    "        prices: {input: 3, output: 15.5, cache_read: 0.3, cache_write: 3.75}\n      m3: {}\n"
    "  same:\n    kind: openai\n    base_url: https://api.openai.com/v1\n    key_secret: s\n"
)


def test_providers_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.providers import ModelInfo

    providers = load(home, PROVIDERS, monkeypatch).providers
    claude, local, same = providers["claude"], providers["local"], providers["same"]
    assert claude.to_dict() == {
        "name": "claude",
        "kind": "anthropic",
        "base_url": "https://api.anthropic.com",
        "key": "env AK",
        "models": ["claude-sonnet-4-5"],
        "max_tokens": 1000000,
        "stream": False,
        "model_info": {},
    }
    assert (claude.self_hosted, claude.url, claude.base_url) == (
        False,
        "https://api.anthropic.com",
        None,
    )
    assert local.to_dict() == {
        "name": "local",
        "kind": "openai",
        "base_url": "http://127.0.0.1:11434/v1",
        "key": "no key",
        "models": ["llama3.1", "m2"],
        "max_tokens": 1,
        "stream": True,
        "model_info": {
            "llama3.1": {
                "context_tokens": 256,
                "prices": {"input": 0.0, "output": 0.0, "cache_read": 0.0, "cache_write": 0.0},
                "vision": True,
            },
            "m2": {
                "context_tokens": 100000000,
                "prices": {"input": 3.0, "output": 15.5, "cache_read": 0.3, "cache_write": 3.75},
                "vision": False,
            },
            "m3": {"context_tokens": None, "prices": None, "vision": False},
        },
    }
    assert local.self_hosted and local.key_reference() == "no key"
    assert local.info("m3") == ModelInfo() and local.info("nope") == ModelInfo(None, None, False)
    m1 = local.info("llama3.1").prices
    assert m1 is not None and (m1.cache_read, m1.cache_write) == (None, None)
    assert (same.self_hosted, same.url, same.key_reference()) == (
        False,
        "https://api.openai.com/v1",
        "secret s",
    )
    assert (same.key_env, same.key_secret, same.max_tokens, same.stream) == (None, "s", 4096, True)


def test_effective_models_and_problems() -> None:
    from orchestrator.config.providers import ProviderDef, effective_models, model_problem

    open_ = ProviderDef("any", "openai")
    listed = ProviderDef("listed", "openai", models=("a", "b", "c"))
    assert effective_models(open_, ()) == ()
    assert effective_models(open_, ("x",)) == ("x",)
    assert effective_models(listed, ()) == ("a", "b", "c")
    assert effective_models(listed, ("c", "a", "z")) == ("a", "c")
    providers = {"listed": listed, "any": open_}
    assert model_problem(providers, "offline", "whatever", ()) is None
    assert model_problem(providers, "nope", "m", ()) == (
        "unknown provider 'nope'; defined: offline, any, listed (see: orchestrator provider list)"
    )
    assert model_problem(providers, "listed", "z", ("z",)) == (
        "no model is allowed both by provider 'listed' and by this group"
    )
    assert model_problem(providers, "listed", "z", ()) == (
        "model 'z' is not allowed for provider 'listed'; allowed: a, b, c"
    )
    assert model_problem(providers, "listed", "b", ("a",)) == (
        "model 'b' is not allowed for provider 'listed'; allowed: a"
    )
    assert model_problem(providers, "listed", "b", ()) is None
    assert model_problem(providers, "any", "q", ()) is None
    assert model_problem(providers, "any", "q", ("q", "r")) is None
    assert model_problem(providers, "any", "s", ("q", "r")) == (
        "model 's' is not allowed for provider 'any'; allowed: q, r"
    )


def test_provider_key_resolves(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.providers import ProviderDef, resolve_key
    from orchestrator.errors import OrchestratorError

    monkeypatch.setenv("PK_TEST", "k-1")
    assert resolve_key(ProviderDef("p", "openai", key_env="PK_TEST"), None) == "k-1"
    assert resolve_key(ProviderDef("p", "openai"), None) is None
    monkeypatch.delenv("PK_TEST")
    with pytest.raises(OrchestratorError) as caught:
        resolve_key(ProviderDef("p", "openai", key_env="PK_TEST"), None)
    assert caught.value.message == "provider 'p': environment variable PK_TEST is not set"


def provider(body: str) -> str:
    return "providers:\n  c:\n" + "".join(f"    {line}\n" for line in body.splitlines())


PRICE_HELP = "expected a price per million tokens from 0, such as 3.0"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "kind: anthropic",
            "3: providers.c.kind: an anthropic provider needs key_env or key_secret",
        ),
        ("kind: azure", "3: providers.c.kind: got 'azure'; valid values: anthropic, openai"),
        ("kind: openai\nmax_tokens: 0", "4: providers.c.max_tokens: got 0; expected 1 to 1000000"),
        (
            "kind: openai\nmax_tokens: 1000001",
            "4: providers.c.max_tokens: got 1000001; expected 1 to 1000000",
        ),
        (
            "kind: openai\nbase_url: ftp://x",
            r"4: providers.c.base_url: 'ftp://x' does not match https?://\S+",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    context_tokens: 255",
            "6: providers.c.model_info.m.context_tokens: got 255; expected a number of tokens "
            "from 256",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    context_tokens: 100000001",
            "6: providers.c.model_info.m.context_tokens: got 100000001; expected a number of "
            "tokens from 256",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    prices: {input: 1}",
            "6: providers.c.model_info.m.prices.output: missing; prices need input and output "
            "(per million tokens, 0 or more)",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    prices: {output: 1}",
            "6: providers.c.model_info.m.prices.input: missing; prices need input and output "
            "(per million tokens, 0 or more)",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    prices: {input: 1, output: true}",
            f"6: providers.c.model_info.m.prices.output: got True; {PRICE_HELP}",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    prices: {input: '1', output: 1}",
            f"6: providers.c.model_info.m.prices.input: got '1'; {PRICE_HELP}",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    prices: {input: -1, output: 1}",
            f"6: providers.c.model_info.m.prices.input: got -1; {PRICE_HELP}",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    prices: "
            "{input: 1, output: 1, cache_read: 1000000}",
            f"6: providers.c.model_info.m.prices.cache_read: got 1000000; {PRICE_HELP}",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    prices: {input: 1, output: 1, cache_write: -2}",
            f"6: providers.c.model_info.m.prices.cache_write: got -2; {PRICE_HELP}",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    prices: {input: 1, output: 1, x: 1}",
            "6: providers.c.model_info.m.prices.x: unknown key; valid keys here: cache_read, "
            "cache_write, input, output",
        ),
        (
            "kind: openai\nmodel_info:\n  ' ':\n    vision: true",
            "5: providers.c.model_info. : a model's name must be 1-200 characters",
        ),
        (
            "kind: openai\nmodel_info:\n  " + "m" * 201 + ":\n    vision: true",
            f"5: providers.c.model_info.{'m' * 201}: a model's name must be 1-200 characters",
        ),
        (
            "kind: openai\nmodel_info:\n  m:\n    foo: 1",
            "6: providers.c.model_info.m.foo: unknown key; valid keys here: context_tokens, "
            "prices, vision",
        ),
        (
            "kind: openai\nfoo: 1",
            "4: providers.c.foo: unknown key; valid keys here: base_url, key_env, key_secret, "
            "kind, max_tokens, model_info, models, stream",
        ),
    ],
)
def test_provider_errors(home: Path, monkeypatch, body: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert error(home, provider(body), monkeypatch) == f"HOME/orchestrator.yaml:{expected}"


def test_provider_model_name_of_200_and_bad_names(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(home, provider("kind: openai\nmodel_info:\n  " + "m" * 200 + ": {}"), monkeypatch)
    assert [m for m, _ in config.providers["c"].model_info] == ["m" * 200]
    assert error(home, "providers:\n  offline:\n    kind: openai\n", monkeypatch) == (
        "HOME/orchestrator.yaml:2: providers.offline: 'offline' is the embedded provider; pick "
        "another name"
    )
    assert error(home, "providers:\n  C:\n    kind: openai\n", monkeypatch) == (
        "HOME/orchestrator.yaml:2: providers.C: provider names are 1-40 of a-z, 0-9, '-' and "
        "'_', starting with a letter or digit"
    )


def set_concurrency(value: object):  # type: ignore[no-untyped-def]
    def change(data) -> None:  # type: ignore[no-untyped-def]
        data["concurrency"] = value

    return change


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("", "version: 1\nconcurrency: 3\n"),
        ("# only a comment", "# only a comment\nversion: 1\nconcurrency: 3\n"),
        ("# c\n", "# c\nversion: 1\nconcurrency: 3\n"),
        ("project: a  # keep\n", "project: a  # keep\nconcurrency: 3\n"),
        ("project: 'a'\nconcurrency: 1  # was\n", "project: 'a'\nconcurrency: 3  # was\n"),
    ],
)
def test_edit_keeps_comments_and_mode(home: Path, monkeypatch, text: str, written: str) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.edit import edit_config

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    path = home / "orchestrator.yaml"
    path.write_text(text)
    path.chmod(0o600)
    config = edit_config(Home(home), set_concurrency(3))
    assert config.concurrency == 3
    assert path.read_text() == written
    assert path.stat().st_mode & 0o777 == 0o600


def test_edit_makes_the_file_and_its_folder(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.edit import edit_config

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    root = tmp_path / "new" / "home"
    config = edit_config(Home(root), set_concurrency(2))
    path = root / "orchestrator.yaml"
    assert path.read_text() == "version: 1\nconcurrency: 2\n"
    assert path.stat().st_mode & 0o777 == 0o644 and config.concurrency == 2


def test_edit_that_would_be_invalid_writes_nothing(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.edit import edit_config

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    path = home / "orchestrator.yaml"
    path.write_text("concurrency: 1  # mine\n")
    with pytest.raises(InvalidConfig) as caught:
        edit_config(Home(home), set_concurrency("many"))
    assert "concurrency" in str(caught.value) and "'many'" in str(caught.value)
    assert path.read_text() == "concurrency: 1  # mine\n"


def test_edit_refuses_a_file_that_is_not_valid_or_not_a_mapping(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.edit import edit_config

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    path = home / "orchestrator.yaml"
    path.write_text("- 1\n")
    with pytest.raises(InvalidConfig) as caught:
        edit_config(Home(home), set_concurrency(3))
    assert str(caught.value).startswith(f"{path}:1: the document must be a mapping")
    assert path.read_text() == "- 1\n"
    path.write_text("concurrency: 0\n")
    with pytest.raises(InvalidConfig):
        edit_config(Home(home), set_concurrency(3))
    assert path.read_text() == "concurrency: 0\n"


def test_runtime_name_lengths(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(home, "runtime:\n  swarm:\n    network: " + "n" * 63 + "\n", monkeypatch)
    assert config.runtime.swarm == SwarmSettings(network="n" * 63)
    message = error(home, "runtime:\n  swarm:\n    network: " + "n" * 64 + "\n", monkeypatch)
    assert message == (
        "HOME/orchestrator.yaml:3: runtime.swarm.network: is 64 characters; at most 63 allowed"
    )
    daemon = ".".join(["a" * 63] * 4)  # 255 characters, each label valid
    message = error(home, f"runtime:\n  swarm:\n    daemon: {daemon}\n", monkeypatch)
    assert message == (
        "HOME/orchestrator.yaml:3: runtime.swarm.daemon: is 255 characters; at most 253 allowed"
    )


def test_transcription_base_url_length_and_secret_key(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    url = "http://h/" + "a" * 503
    config = load(home, transcriber(f"kind: openai\nbase_url: {url}\nkey_secret: tk"), monkeypatch)
    found = config.transcription["c"]
    assert (found.base_url, found.key.secret, found.key.secret_key) == (url, "tk", "key_secret")
    assert found.to_dict()["key"] == "secret tk"
    message = error(home, transcriber(f"kind: openai\nbase_url: {url}a"), monkeypatch)
    assert message == (
        "HOME/orchestrator.yaml:4: transcription.c.base_url: is 513 characters; at most 512 allowed"
    )


def test_keys_read_from_the_secrets_file_and_the_owner_of_a_missing_one(
    home: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.errors import OrchestratorError

    monkeypatch.delenv("NO_KEY", raising=False)
    config = load(
        home,
        "web_search:\n  b:\n    kind: brave\n    key_secret: bk\n"
        "  e:\n    kind: brave\n    key_env: NO_KEY\n"
        "transcription:\n  t:\n    kind: openai\n    key_secret: tk\n"
        "  e:\n    kind: openai\n    key_env: NO_KEY\n"
        "mcp_servers:\n  m:\n    url: http://h\n    headers:\n      X-Key: {env: NO_KEY}\n",
        monkeypatch,
    )
    secrets = home / "secrets.yaml"
    secrets.write_text("bk: brave-1\ntk: whisper-1\n")
    secrets.chmod(0o600)
    assert config.web_search["b"].resolve_key(secrets) == "brave-1"
    assert config.transcription["t"].resolve_key(secrets) == "whisper-1"
    missing = [
        (lambda: config.web_search["e"].resolve_key(secrets), "web_search.e"),
        (lambda: config.transcription["e"].resolve_key(secrets), "transcription.e"),
        (lambda: config.mcp_servers["m"].resolve_headers(secrets), "mcp_servers.m.headers.X-Key"),
    ]
    for call, owner in missing:
        with pytest.raises(OrchestratorError) as caught:
            call()
        assert caught.value.message == f"{owner}: environment variable NO_KEY is not set"


def test_mcp_server_url_and_group_lengths(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    url = "https://h/" + "u" * 1990
    group = "g" * 63
    text = f"mcp_servers:\n  t:\n    url: {url}\n    groups: [{group}]\n"
    server = load(home, text, monkeypatch).mcp_servers["t"]
    assert (server.url, server.groups) == (url, (group,))
    assert error(home, text.replace(url, url + "u"), monkeypatch) == (
        "HOME/orchestrator.yaml:3: mcp_servers.t.url: is 2001 characters; at most 2000 allowed"
    )
    assert error(home, text.replace(group, group + "g"), monkeypatch).startswith(
        "HOME/orchestrator.yaml:4: mcp_servers.t.groups[0]: must be 1..63 characters, got 'ggg"
    )


def test_transcriber_kind_is_required_and_local_threads_default_to_2(
    home: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    assert error(home, transcriber("model: m"), monkeypatch) == (
        "HOME/orchestrator.yaml:2: transcription.c.kind: is required"
    )
    here = load(home, transcriber("kind: local\nmodel_dir: /m"), monkeypatch).transcription["c"]
    assert here.threads == 2


def test_transcriber_model_and_model_dir_lengths(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    model, folder = "m" * 100, "/" + "d" * 4095
    cloud = load(home, transcriber(f"kind: openai\nmodel: {model}"), monkeypatch)
    assert cloud.transcription["c"].model == model
    here = load(home, transcriber(f"kind: local\nmodel_dir: {folder}"), monkeypatch)
    assert here.transcription["c"].model_dir == Path(folder)
    assert error(home, transcriber(f"kind: openai\nmodel: {model}m"), monkeypatch) == (
        "HOME/orchestrator.yaml:4: transcription.c.model: is 101 characters; at most 100 allowed"
    )
    assert error(home, transcriber(f"kind: local\nmodel_dir: {folder}d"), monkeypatch) == (
        "HOME/orchestrator.yaml:4: transcription.c.model_dir: is 4097 characters; "
        "at most 4096 allowed"
    )


def test_edit_makes_the_home_folder_when_the_state_is_elsewhere(
    tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.edit import edit_config

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", str(tmp_path / "state"))
    root = tmp_path / "new" / "home"
    assert edit_config(Home(root), set_concurrency(2)).concurrency == 2
    assert (root / "orchestrator.yaml").read_text() == "version: 1\nconcurrency: 2\n"


def test_provider_kind_is_required_and_base_url_and_model_lengths(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert error(home, provider("base_url: http://h"), monkeypatch) == (
        "HOME/orchestrator.yaml:2: providers.c.kind: is required"
    )
    url, model = "http://h/" + "u" * 503, "m" * 200
    text = provider(f"kind: openai\nbase_url: {url}\nmodels: [{model}]")
    defined = load(home, text, monkeypatch).providers["c"]
    assert (defined.base_url, defined.models) == (url, (model,))
    assert error(home, text.replace(url, url + "u"), monkeypatch) == (
        "HOME/orchestrator.yaml:4: providers.c.base_url: is 513 characters; at most 512 allowed"
    )
    assert error(home, text.replace(f"[{model}", f"[{model}m"), monkeypatch).startswith(
        "HOME/orchestrator.yaml:5: providers.c.models[0]: must be 1..200 characters, got 'mmm"
    )


def test_edit_reads_and_writes_utf8_whatever_the_locale(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]

    from orchestrator.config.edit import edit_config

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_STATE_DIR", raising=False)
    start = "# l'équipe « ops »\nconcurrency: 1  # était 2\n"
    edited = "# l'équipe « ops »\nconcurrency: 3  # était 2\n"
    here, child = tmp_path / "here", tmp_path / "child"
    for root in (here, child):
        root.mkdir()
        (root / "orchestrator.yaml").write_bytes(start.encode())
    assert edit_config(Home(here), set_concurrency(3)).concurrency == 3
    assert (here / "orchestrator.yaml").read_bytes() == edited.encode()
    run_in_ascii_locale(
        "import sys; from pathlib import Path; "
        "from orchestrator.config.edit import edit_config; from orchestrator.home import Home; "
        "edit_config(Home(Path(sys.argv[1])), lambda data: data.update(concurrency=3))",
        str(child),
    )
    assert (child / "orchestrator.yaml").read_bytes() == edited.encode()


@pytest.mark.skipif(not hasattr(yaml, "CSafeLoader"), reason="PyYAML without libyaml")
def test_edit_refuses_a_tab_the_loader_takes_but_the_editor_cannot_read(
    home: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.config.edit import edit_config

    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    path = home / "orchestrator.yaml"
    path.write_text("concurrency: 1\t\n")  # libyaml reads it; ruamel.yaml does not
    assert load_config(Home(home)).concurrency == 1
    with pytest.raises(InvalidConfig) as caught:
        edit_config(Home(home), set_concurrency(3))
    assert str(caught.value).startswith(
        f"{path}: cannot be read for editing: while scanning for the next token\n"
        "found character '\\t' that cannot start any token\n"
    )
    assert path.read_text() == "concurrency: 1\t\n"
