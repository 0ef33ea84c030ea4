"""orchestrator.yaml: every key optional; bad values named with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.errors import InvalidConfig
from orchestrator.home import Home


def load(home: Path, text: str, monkeypatch) -> OrchestratorConfig:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    (home / "orchestrator.yaml").write_text(text)
    return load_config(Home(home))


def test_defaults_without_a_file(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    monkeypatch.delenv("ORCHESTRATOR_HTTP_TOKEN", raising=False)
    config = load_config(Home(home))
    identity = (home / "state/home-id").read_text().strip()
    assert len(identity) == 16 and config.project == f"home-{identity[:6]}"
    assert config.http_token is None
    assert (config.unprivileged_uid, config.unprivileged_gid) == (10001, 10001)


def test_two_homes_get_different_projects_and_keep_their_identity(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("ORCHESTRATOR_PROJECT", raising=False)
    a, b = Home(tmp_path / "x" / "home"), Home(tmp_path / "y" / "home")
    assert a.default_project() != b.default_project()
    assert a.default_project().startswith("home-") and a.identity != b.identity
    moved = tmp_path / "moved"
    (tmp_path / "x" / "home").rename(moved)
    assert Home(moved).identity == a.identity  # kept in state/home-id


def test_all_keys(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    config = load(
        home,
        "project: prod\nimage: my/agent\nunprivileged_user: '2000:3000'\n"
        "concurrency: 4\nhttp:\n  listen: '0.0.0.0:9000'\n"
        "  token: 0123456789abcdefXYZ\n  allow_remote: true\n",
        monkeypatch,
    )
    assert (config.project, config.image, config.concurrency) == ("prod", "my/agent", 4)
    assert (config.unprivileged_uid, config.unprivileged_gid) == (2000, 3000)
    assert (config.http_listen, config.http_token) == ("0.0.0.0:9000", "0123456789abcdefXYZ")


def test_env_wins(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (home / "orchestrator.yaml").write_text("project: fromfile\n")
    monkeypatch.setenv("ORCHESTRATOR_PROJECT", "fromenv")
    monkeypatch.setenv("ORCHESTRATOR_HTTP_TOKEN", "t" * 20)
    config = load_config(Home(home))
    assert config.project == "fromenv" and config.http_token == "t" * 20


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("projekt: x\n", ":1: projekt: unknown key"),
        ("project: Bad Name\n", "project: 'Bad Name' does not match"),
        ("unprivileged_user: '0:0'\n", "expected UID:GID, both non-zero"),
        ("concurrency: 0\n", "concurrency: got 0; expected 1 to 256"),
        ("http:\n  token: short\n", ":2: http.token: is shorter than 16 characters"),
        ("http:\n  port: 1\n", "http.port: unknown key"),
    ],
)
def test_bad_values(home: Path, monkeypatch, text: str, needle: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidConfig) as info:
        load(home, text, monkeypatch)
    assert needle in info.value.message
    assert str(home / "orchestrator.yaml") in info.value.message


@pytest.mark.parametrize(
    ("listen", "allow", "error"),
    [
        ("0.0.0.0:8787", False, "not a loopback address"),
        ("192.168.1.5:8787", False, "TLS reverse proxy"),
        ("127.0.0.1:99999", False, "expected HOST:PORT"),
        ("8787", False, "expected HOST:PORT"),
        ("localhost:8787", False, None),
        ("[::1]:8787", False, None),
        ("127.0.0.2:8787", False, None),
        ("0.0.0.0:8787", True, None),
    ],
)
def test_http_listen_on_a_remote_address_needs_allow_remote(
    home: Path, monkeypatch, listen, allow, error
) -> None:  # type: ignore[no-untyped-def]
    text = f"http:\n  listen: '{listen}'\n  allow_remote: {str(allow).lower()}\n"
    if error is None:
        assert load(home, text, monkeypatch).http_listen == listen
    else:
        with pytest.raises(InvalidConfig, match=error):
            load(home, text, monkeypatch)


def test_a_short_token_in_the_environment_is_refused(home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ORCHESTRATOR_HTTP_TOKEN", "short")
    with pytest.raises(InvalidConfig, match="ORCHESTRATOR_HTTP_TOKEN is 5 characters"):
        load_config(Home(home))
