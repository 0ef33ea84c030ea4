"""orchestrator.yaml's top-level keys and the environment, exactly: each value read, each
limit at its bound, each error naming file, key and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import (
    DEFAULT_ALLOWLIST,
    OrchestratorConfig,
    listen_problem,
    load_config,
)
from orchestrator.errors import InvalidConfig
from orchestrator.home import Home
from orchestrator.versions import FileTooNew

ENVIRONMENT = (
    "ORCHESTRATOR_PROJECT",
    "ORCHESTRATOR_HTTP_TOKEN",
    "ORCHESTRATOR_HOST_HOME",
    "ORCHESTRATOR_HTTP_LISTEN",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def load(home: Path, text: str) -> OrchestratorConfig:
    (home / "orchestrator.yaml").write_text(text)
    return load_config(Home(home))


def error(home: Path, text: str) -> str:
    with pytest.raises(InvalidConfig) as caught:
        load(home, text)
    return caught.value.message.replace(str(home), "HOME")


def test_the_defaults_of_every_setting(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    config = load(home, "{}\n")
    assert config.image == "orchestrator-agent"
    assert config.mount_allowlist == DEFAULT_ALLOWLIST.expanduser()
    assert config.debian_mirror is None
    assert config.http_listen == "127.0.0.1:8787"
    assert (config.http_token, config.http_allow_remote, config.http_dashboard) == (
        None,
        False,
        False,
    )
    assert (config.concurrency, config.per_group_concurrency) == (None, None)
    assert (config.secrets_file, config.host_home) == (None, None)
    assert (config.search_embedder, config.search_vector_weight) == (None, 0.5)
    assert config.history_max_file_bytes == 4 * 1024 * 1024
    assert config.currency == "USD"
    assert dict(config.providers) == {} and dict(config.http_tokens) == {}


def test_prices_of_an_undefined_provider_is_none(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    assert load(home, "{}\n").prices_of("nowhere", "model") is None


def test_prices_of_a_defined_provider_are_its_models(
    home: Path, clean_env: pytest.MonkeyPatch
) -> None:
    config = load(
        home,
        "providers:\n  local:\n    kind: openai\n    base_url: http://127.0.0.1:1/v1\n"
        "    models: [m1]\n    model_info:\n      m1:\n        prices: {input: 1, output: 2}\n",
    )
    prices = config.prices_of("local", "m1")
    assert prices is not None and prices == config.providers["local"].info("m1").prices
    assert config.prices_of("other", "m1") is None


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("8787", "got '8787'; expected HOST:PORT, such as 127.0.0.1:8787"),
        ("127.0.0.1:", "got '127.0.0.1:'; expected HOST:PORT, such as 127.0.0.1:8787"),
        ("127.0.0.1:x1", "got '127.0.0.1:x1'; expected HOST:PORT, such as 127.0.0.1:8787"),
        ("127.0.0.1:0", "got '127.0.0.1:0'; expected HOST:PORT, such as 127.0.0.1:8787"),
        ("127.0.0.1:65536", "got '127.0.0.1:65536'; expected HOST:PORT, such as 127.0.0.1:8787"),
        (":8787", "got ':8787'; the host must be an address or a name, such as 127.0.0.1"),
        ("[]:8787", "got '[]:8787'; the host must be an address or a name, such as 127.0.0.1"),
        ("a b:8787", "got 'a b:8787'; the host must be an address or a name, such as 127.0.0.1"),
        ("a_b:8787", "got 'a_b:8787'; the host must be an address or a name, such as 127.0.0.1"),
        (
            "10.0.0.1:80",
            "10.0.0.1 is not a loopback address; the API has no TLS of its own: put it behind "
            "a TLS reverse proxy, and set http.allow_remote: true to listen there",
        ),
        (
            "example.com:80",
            "example.com is not a loopback address; the API has no TLS of its own: put it "
            "behind a TLS reverse proxy, and set http.allow_remote: true to listen there",
        ),
        (
            "[::2]:80",
            "::2 is not a loopback address; the API has no TLS of its own: put it behind "
            "a TLS reverse proxy, and set http.allow_remote: true to listen there",
        ),
    ],
)
def test_listen_problems(listen: str, expected: str) -> None:
    assert listen_problem(listen, False) == expected


@pytest.mark.parametrize(
    "listen",
    ["127.0.0.1:1", "127.0.0.1:65535", "localhost:8787", "[::1]:8787", "127.9.9.9:80", "A-b.c:1"],
)
def test_listen_on_loopback_or_allowed_is_fine(listen: str) -> None:
    allowed = listen != "A-b.c:1"
    assert listen_problem(listen, not allowed) is None
    assert listen_problem(listen, True) is None


def test_listen_problem_of_the_metrics_section() -> None:
    assert listen_problem("0.0.0.0:9100", False, "metrics") == (
        "0.0.0.0 is not a loopback address; the metrics listener has no TLS and no token: "
        "let only Prometheus reach it, and set metrics.allow_remote: true to listen there"
    )
    assert listen_problem("0.0.0.0:9100", True, "metrics") is None


def test_project_and_image(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    config = load(home, f"project: a{'b' * 39}\nimage: reg.example/x_y-z.1/a{'b' * 100}\n")
    assert config.project == "a" + "b" * 39
    assert config.image == "reg.example/x_y-z.1/a" + "b" * 100
    assert "project: " in error(home, f"project: a{'b' * 40}\n")
    assert "image: " in error(home, "image: My/agent\n")
    assert load(home, f"image: a{'b' * 127}\n").image == "a" + "b" * 127
    assert "image: " in error(home, f"image: a{'b' * 128}\n")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("'1:1'", (1, 1)),
        ("'4294967295:9999999999'", (4294967295, 9999999999)),
    ],
)
def test_unprivileged_user(
    home: Path, clean_env: pytest.MonkeyPatch, value: str, expected: tuple[int, int]
) -> None:
    config = load(home, f"unprivileged_user: {value}\n")
    assert (config.unprivileged_uid, config.unprivileged_gid) == expected


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("'0:5'", "'0:5'"),
        ("'5:0'", "'5:0'"),
        ("'12345678901:5'", "'12345678901:5'"),
        ("'5'", "'5'"),
        ("'a:b'", "'a:b'"),
        ("'1:2:3'", "'1:2:3'"),
    ],
)
def test_unprivileged_user_errors(
    home: Path, clean_env: pytest.MonkeyPatch, value: str, shown: str
) -> None:
    assert error(home, f"unprivileged_user: {value}\n") == (
        f"HOME/orchestrator.yaml:1: unprivileged_user: got {shown}; expected UID:GID, both non-zero"
    )


def test_paths_mirror_and_state_dir(
    home: Path, clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("HOME", str(tmp_path / "user"))
    config = load(
        home,
        "mount_allowlist: ~/allow.yaml\ndebian_mirror: https://deb.example/debian\n"
        "secrets_file: keys/secrets.yaml\n",
    )
    assert config.mount_allowlist == tmp_path / "user" / "allow.yaml"
    assert config.debian_mirror == "https://deb.example/debian"
    assert config.secrets_file == home / "keys" / "secrets.yaml"
    assert load(home, "secrets_file: /etc/s.yaml\n").secrets_file == Path("/etc/s.yaml")
    assert load(home, "secrets_file: ~/s.yaml\n").secrets_file == tmp_path / "user" / "s.yaml"
    assert "debian_mirror: " in error(home, "debian_mirror: ftp://deb.example\n")
    assert "mount_allowlist: " in error(home, f"mount_allowlist: {'a' * 4097}\n")
    assert load(home, f"mount_allowlist: /{'a' * 4095}\n").mount_allowlist == Path("/" + "a" * 4095)
    assert "debian_mirror: " in error(home, f"debian_mirror: http://{'a' * 506}\n")
    assert load(home, f"debian_mirror: http://{'a' * 505}\n").debian_mirror == (
        "http://" + "a" * 505
    )
    assert "state_dir: " in error(home, f"state_dir: {'a' * 4097}\n")
    assert "secrets_file: " in error(home, f"secrets_file: {'a' * 4097}\n")
    assert load(home, f"secrets_file: /{'a' * 4095}\n").secrets_file == Path("/" + "a" * 4095)


def test_concurrency_bounds(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    config = load(home, "concurrency: 256\nper_group_concurrency: 1\n")
    assert (config.concurrency, config.per_group_concurrency) == (256, 1)
    config = load(home, "concurrency: 1\nper_group_concurrency: 256\n")
    assert (config.concurrency, config.per_group_concurrency) == (1, 256)
    assert error(home, "concurrency: 257\n") == (
        "HOME/orchestrator.yaml:1: concurrency: got 257; expected 1 to 256"
    )
    assert error(home, "per_group_concurrency: 0\n") == (
        "HOME/orchestrator.yaml:1: per_group_concurrency: got 0; expected 1 to 256"
    )
    assert error(home, "per_group_concurrency: 257\n") == (
        "HOME/orchestrator.yaml:1: per_group_concurrency: got 257; expected 1 to 256"
    )


def test_currency(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    assert load(home, "currency: EUR\n").currency == "EUR"
    assert load(home, "currency: abcdefghij\n").currency == "abcdefghij"
    assert "currency: " in error(home, "currency: abcdefghijk\n")
    assert "currency: " in error(home, "currency: E1\n")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{}", (None, 0.5)),
        ("{embedder: none, vector_weight: 0}", (None, 0.0)),
        ("{embedder: wordllama, vector_weight: 1}", ("wordllama", 1.0)),
        ("{vector_weight: 0.25}", (None, 0.25)),
    ],
)
def test_memory_search(
    home: Path, clean_env: pytest.MonkeyPatch, body: str, expected: tuple[str | None, float]
) -> None:
    config = load(home, f"memory_search: {body}\n")
    assert (config.search_embedder, config.search_vector_weight) == expected
    assert type(config.search_vector_weight) is float


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("{vector_weight: 1.5}", "vector_weight: got 1.5; expected a number from 0 to 1"),
        ("{vector_weight: -0.1}", "vector_weight: got -0.1; expected a number from 0 to 1"),
        ("{vector_weight: true}", "vector_weight: got True; expected a number from 0 to 1"),
        ("{vector_weight: '0.5'}", "vector_weight: got '0.5'; expected a number from 0 to 1"),
        ("{embedder: bert}", "embedder: got 'bert'; valid values: none, wordllama"),
        ("{model: x}", "model: unknown key"),
    ],
)
def test_memory_search_errors(
    home: Path, clean_env: pytest.MonkeyPatch, body: str, expected: str
) -> None:
    message = error(home, f"memory_search: {body}\n")
    assert message.startswith("HOME/orchestrator.yaml:1: memory_search.")
    assert expected in message


@pytest.mark.parametrize(
    ("value", "size"),
    [("1k", 1024), ("1024", 1024), ("1g", 1024**3), ("4m", 4 * 1024 * 1024)],
)
def test_history_size(home: Path, clean_env: pytest.MonkeyPatch, value: str, size: int) -> None:
    assert load(home, f"history:\n  max_file_bytes: {value}\n").history_max_file_bytes == size


@pytest.mark.parametrize(("value", "shown"), [("1023", "1023"), ("1025m", "'1025m'"), ("x", "'x'")])
def test_history_size_errors(
    home: Path, clean_env: pytest.MonkeyPatch, value: str, shown: str
) -> None:
    assert error(home, f"history:\n  max_file_bytes: {value}\n") == (
        f"HOME/orchestrator.yaml:2: history.max_file_bytes: got {shown}; "
        "expected a size from 1k to 1g (such as 4m)"
    )


def test_history_unknown_key_and_default(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    assert "history.size: unknown key" in error(home, "history:\n  size: 1k\n")
    assert load(home, "history: {}\n").history_max_file_bytes == 4 * 1024 * 1024


def test_http_every_key(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    config = load(
        home,
        "http:\n  listen: 'localhost:1'\n  token: '0123456789abcdef'\n  dashboard: true\n",
    )
    assert (config.http_listen, config.http_token) == ("localhost:1", "0123456789abcdef")
    assert (config.http_dashboard, config.http_allow_remote) == (True, False)
    assert dict(config.http_tokens) == {}
    config = load(home, "http:\n  allow_remote: true\n")
    assert (config.http_allow_remote, config.http_dashboard) == (True, False)
    assert config.http_listen == "127.0.0.1:8787" and config.http_token is None


def test_http_errors(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    assert error(home, "http:\n  token: '0123456789abcde'\n") == (
        "HOME/orchestrator.yaml:2: http.token: is shorter than 16 characters; "
        "use a long random token"
    )
    assert error(home, "http:\n  listen: '10.0.0.1:80'\n") == (
        "HOME/orchestrator.yaml:2: http.listen: 10.0.0.1 is not a loopback address; the API "
        "has no TLS of its own: put it behind a TLS reverse proxy, and set "
        "http.allow_remote: true to listen there"
    )
    assert "http.token: " in error(home, f"http:\n  token: {'a' * 513}\n")
    assert load(home, f"http:\n  token: {'a' * 512}\n").http_token == "a" * 512
    assert "http.listen: " in error(home, f"http:\n  listen: 'localhost:1{'0' * 100}'\n")
    assert "http.dashboard: must be true or false" in error(home, "http:\n  dashboard: 1\n")
    assert "http.allow_remote: must be true or false" in error(home, "http:\n  allow_remote: 1\n")


def test_text_given_is_validated_instead_of_the_file(
    home: Path, clean_env: pytest.MonkeyPatch
) -> None:
    (home / "orchestrator.yaml").write_text("concurrency: 3\n")
    assert load_config(Home(home), "concurrency: 7\n").concurrency == 7
    assert load_config(Home(home)).concurrency == 3
    with pytest.raises(InvalidConfig, match="concurrency: got 0"):
        load_config(Home(home), "concurrency: 0\n")


def test_a_newer_version_is_refused_and_unknown_keys_named(
    home: Path, clean_env: pytest.MonkeyPatch
) -> None:
    with pytest.raises(FileTooNew, match="is at version 999"):
        load(home, "version: 999\nprojekt: x\n")
    assert load(home, "version: 1\nconcurrency: 2\n").concurrency == 2
    assert ":1: projekt: unknown key" in error(home, "projekt: x\n")


def test_the_environment_token(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ORCHESTRATOR_HTTP_TOKEN", "a" * 15)
    with pytest.raises(InvalidConfig) as caught:
        load(home, "{}\n")
    assert caught.value.message == (
        "ORCHESTRATOR_HTTP_TOKEN is 15 characters; the HTTP API needs a token of 16 or more"
    )
    assert caught.value.hint == "use a long random token, such as: openssl rand -hex 24"
    clean_env.setenv("ORCHESTRATOR_HTTP_TOKEN", "b" * 16)
    assert load(home, "http:\n  token: '0123456789abcdef'\n").http_token == "b" * 16
    clean_env.setenv("ORCHESTRATOR_HTTP_TOKEN", "")
    assert load(home, "http:\n  token: '0123456789abcdef'\n").http_token == "0123456789abcdef"


def test_the_environment_listen(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ORCHESTRATOR_HTTP_LISTEN", "localhost:9")
    config = load(home, "{}\n")
    assert (config.http_listen, config.http_allow_remote) == ("localhost:9", False)
    clean_env.setenv("ORCHESTRATOR_HTTP_LISTEN", "0.0.0.0:9")
    with pytest.raises(InvalidConfig) as caught:
        load(home, "{}\n")
    assert caught.value.message == (
        "ORCHESTRATOR_HTTP_LISTEN: 0.0.0.0 is not a loopback address; the API has no TLS of "
        "its own: put it behind a TLS reverse proxy, and set http.allow_remote: true to "
        "listen there"
    )
    config = load(home, "http:\n  allow_remote: true\n")
    assert (config.http_listen, config.http_allow_remote) == ("0.0.0.0:9", True)
    # in a container of its own (the host home given), the daemon listens on every interface
    clean_env.setenv("ORCHESTRATOR_HOST_HOME", "/srv/home")
    config = load(home, "{}\n")
    assert (config.http_listen, config.http_allow_remote) == ("0.0.0.0:9", True)
    assert config.host_home == Path("/srv/home")
    clean_env.setenv("ORCHESTRATOR_HTTP_LISTEN", "")
    assert load(home, "http:\n  listen: 'localhost:5'\n").http_listen == "localhost:5"


def test_the_environment_host_home(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ORCHESTRATOR_HOST_HOME", "srv/home")
    with pytest.raises(InvalidConfig) as caught:
        load(home, "{}\n")
    assert caught.value.message == "ORCHESTRATOR_HOST_HOME='srv/home': not an absolute path"
    assert caught.value.hint == "give the home's path on the host, as the engine sees it"
    clean_env.setenv("ORCHESTRATOR_HOST_HOME", "")
    config = load(home, "{}\n")
    assert config.host_home is None and config.http_allow_remote is False


def test_the_environment_project(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ORCHESTRATOR_PROJECT", "Bad.Name")
    with pytest.raises(InvalidConfig) as caught:
        load(home, "project: good\n")
    assert caught.value.message == (
        "ORCHESTRATOR_PROJECT='Bad.Name': not a valid project name; expected lowercase "
        "letters, digits, '_' or '-' (at most 40)"
    )
    clean_env.setenv("ORCHESTRATOR_PROJECT", "")
    assert load(home, "project: good\n").project == "good"


def test_a_listen_host_is_kept_whole_but_for_its_brackets() -> None:
    assert listen_problem("Xy:80", False) == (
        "Xy is not a loopback address; the API has no TLS of its own: put it behind a TLS "
        "reverse proxy, and set http.allow_remote: true to listen there"
    )


def test_image_and_listen_lengths_are_checked_before_their_form(
    home: Path, clean_env: pytest.MonkeyPatch
) -> None:
    assert error(home, f"image: a{'b' * 128}\n") == (
        "HOME/orchestrator.yaml:1: image: is 129 characters; at most 128 allowed"
    )
    host = "a" * 95
    text = f"http:\n  allow_remote: true\n  listen: '{host}:8787'\n"
    assert load(home, text).http_listen == f"{host}:8787"
    assert error(home, text.replace(host, host + "b")) == (
        "HOME/orchestrator.yaml:3: http.listen: is 101 characters; at most 100 allowed"
    )


def test_state_dir_may_be_long(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    state = home / ("s" * 200)
    config = load(home, f"state_dir: {state}\nconcurrency: 5\n")
    assert config.concurrency == 5
    long_state = "/" + "s" * 4095
    assert error(home, f"state_dir: {long_state}x\n") == (
        "HOME/orchestrator.yaml:1: state_dir: is 4097 characters; at most 4096 allowed"
    )


def test_http_tokens_and_channels(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    config = load(
        home,
        "http:\n  tokens:\n    b:\n      token_env: X\n      senders: 'loopchat:'\n"
        "channels:\n  t:\n    kind: telegram\n    token_env: TG\n",
    )
    token = config.http_tokens["b"]
    assert (token.name, token.senders, token.token_env) == ("b", "loopchat:", "X")
    assert list(config.http_tokens) == ["b"]
    account = config.channel_accounts["t"]
    assert (account.name, account.kind, account.token_env) == ("t", "telegram", "TG")
    assert list(config.channel_accounts) == ["t"]
    assert "http.tokens.B: token names" in error(
        home, "http:\n  tokens:\n    B:\n      token_env: X\n      senders: 'loopchat:'\n"
    )
    assert "channels.B: " in error(home, "channels:\n  B:\n    kind: telegram\n    token_env: X\n")


def test_an_error_in_text_given_names_the_file(home: Path, clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidConfig) as caught:
        load_config(Home(home), "concurrency: 0\n")
    assert caught.value.message == (
        f"{home / 'orchestrator.yaml'}:1: concurrency: got 0; expected 1 to 256"
    )
