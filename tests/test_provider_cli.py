"""`orchestrator provider`, `usage`, provider checks at `group add` and in `doctor`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from orchestrator.config.providers import ProviderDef, resolve_key
from orchestrator.errors import BadInput
from orchestrator.home import Home
from orchestrator.secrets import MissingSecret
from orchestrator.store.messages import open_queue
from orchestrator.store.usage import OK, REFUSED, Call, UsageStore


def test_add_list_remove_keep_comments_and_never_show_keys(run, home: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("MY_KEY", "sk-secret-value-123456")
    (home / "orchestrator.yaml").write_text("# my settings\nconcurrency: 2  # two cores\n")
    result = run(
        "provider",
        "add",
        "claude",
        "--kind",
        "anthropic",
        "--key-env",
        "MY_KEY",
        "--allow-model",
        "claude-a",
        "--allow-model",
        "claude-b",
    )
    assert result.exit_code == 0, result.stderr
    run("provider", "add", "local", "--kind", "openai", "--base-url", "http://127.0.0.1:1/v1")
    text = (home / "orchestrator.yaml").read_text()
    assert text.startswith("# my settings\nconcurrency: 2  # two cores\n")
    listed = json.loads(run("provider", "list", "--json").stdout)
    assert [p["name"] for p in listed] == ["claude", "local"]
    assert listed[0]["key"] == "env MY_KEY" and listed[0]["models"] == ["claude-a", "claude-b"]
    assert "sk-secret" not in run("provider", "list").stdout + json.dumps(listed)
    doctor = run("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["provider claude"]["status"] == "ok" and "sk-secret" not in doctor.stdout

    assert run("group", "add", "Fam", "--provider", "claude", "--model", "claude-b").exit_code == 0
    refused = run("provider", "remove", "claude")
    assert refused.exit_code == 2 and "used by fam" in refused.stderr
    assert run("provider", "remove", "local").exit_code == 0
    assert "local" not in (home / "orchestrator.yaml").read_text()


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--kind", "anthropic"], "needs key_env or key_secret"),
        (["--kind", "openai", "--key-env", "A", "--key-secret", "b"], "not both"),
        (["--kind", "openai", "--base-url", "ftp://x"], "does not match"),
    ],
)
def test_a_bad_provider_changes_nothing(run, home: Path, args, error) -> None:  # type: ignore[no-untyped-def]
    (home / "orchestrator.yaml").write_text("# untouched\n")
    result = run("provider", "add", "p", *args)
    assert result.exit_code == 2 and error in result.stderr
    assert (home / "orchestrator.yaml").read_text() == "# untouched\n"


def test_group_add_refuses_an_unknown_provider_or_model(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    result = run("group", "add", "Fam", "--provider", "anthropic", "--model", "x")
    assert result.exit_code == 2
    assert "unknown provider 'anthropic'; defined: offline" in result.stderr
    assert not (home / "groups/fam").exists()
    run("provider", "add", "ollama", "--kind", "openai", "--allow-model", "llama3")
    result = run("group", "add", "Fam", "--provider", "ollama", "--model", "mistral")
    assert result.exit_code == 2 and "model 'mistral' is not allowed" in result.stderr


def test_credentials_from_env_or_a_private_secrets_file(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("NOPE", raising=False)
    with pytest.raises(MissingSecret, match="NOPE is not set"):
        resolve_key(ProviderDef("p", "openai", key_env="NOPE"), None)
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("claude: sk-from-file\n")
    os.chmod(secrets, 0o644)
    definition = ProviderDef("p", "anthropic", key_secret="claude")
    with pytest.raises(BadInput, match="has mode 0644; others may read it"):
        resolve_key(definition, secrets)
    os.chmod(secrets, 0o600)
    assert resolve_key(definition, secrets) == "sk-from-file"
    with pytest.raises(MissingSecret, match="no entry 'other'"):
        resolve_key(ProviderDef("p", "anthropic", key_secret="other"), secrets)
    assert resolve_key(ProviderDef("p", "openai"), None) is None  # a keyless local server


def test_usage_per_group_and_day(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("group", "add", "Fam")
    assert "no model calls" in run("usage").stdout
    queue = open_queue(Home(home))
    store = UsageStore(queue.path)
    now = time.time()
    for outcome, tokens in ((OK, (100, 20)), (OK, (50, 5)), (REFUSED, (0, 0))):
        store.record(Call("m1", "fam", "p", "m", "turn", now, 12.0, *tokens, outcome))
    store.close()
    queue.close()
    [row] = json.loads(run("usage", "fam", "--json").stdout)
    assert (row["requests"], row["refused"], row["input_tokens"], row["output_tokens"]) == (
        2,
        1,
        150,
        25,
    )
    table = run("usage", "--since", "24h").stdout
    assert "fam" in table and "150" in table
    assert run("usage", "--since", "soon").exit_code == 2


def test_doctor_fails_on_a_group_whose_provider_is_gone(run, home: Path) -> None:  # type: ignore[no-untyped-def]
    run("provider", "add", "local", "--kind", "openai")
    run("group", "add", "Fam", "--provider", "local", "--model", "llama")
    (home / "orchestrator.yaml").write_text("# the provider was removed by hand\n")
    result = run("doctor", "--json")
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert result.exit_code == 1
    assert checks["group fam"]["status"] == "fail"
    assert "unknown provider 'local'" in checks["group fam"]["detail"]
