"""group.yaml validation: every error names file, line, key, value and what is valid."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import InvalidConfig
from orchestrator.groups.config import GroupConfig, parse_group_config
from orchestrator.units import parse_duration, parse_size

P = Path("/g/group.yaml")


def parse(text: str) -> GroupConfig:
    return parse_group_config(text, P)


def error(text: str) -> str:
    with pytest.raises(InvalidConfig) as info:
        parse(text)
    return info.value.message


def test_defaults_from_one_place() -> None:
    config = parse("name: Family\n")
    assert config == GroupConfig(name="Family")
    assert config.provider == "offline"
    assert config.session_mode == "per-chat"
    assert config.unknown_senders == "drop"
    assert config.container.network == "none"
    assert config.container.idle_timeout_seconds == 1800
    assert config.container.memory_bytes == 512 * 1024**2
    assert config.skills == "all"


def test_full_config() -> None:
    config = parse(
        "name: Support\nprovider: anthropic\nmodel: big\ncreators: [alice, 42]\n"
        "members: [bob]\nunknown_senders: allow\nsession_mode: shared\n"
        "container: {memory: 1g, cpus: 0.5, pids: 128, network: bridge, idle_timeout: 2h}\n"
        "mounts:\n  - {host: /srv/docs, writable: true}\nskills: [search]\n"
    )
    assert config.creators == ("alice", "42")
    assert config.container.memory_bytes == 1024**3
    assert config.container.idle_timeout_seconds == 7200
    assert config.mounts[0].name == "docs" and config.mounts[0].writable
    assert config.skills == ("search",)


def test_unknown_key_names_line_and_valid_keys() -> None:
    message = error("name: A\n\nsesion_mode: shared\n")
    assert message.startswith("/g/group.yaml:3: sesion_mode: unknown key; valid keys here:")
    assert "session_mode" in message


def test_nested_unknown_key() -> None:
    message = error("name: A\ncontainer:\n  memry: 1g\n")
    assert message.startswith("/g/group.yaml:3: container.memry: unknown key")


def test_bad_choice_names_value_and_options() -> None:
    message = error("name: A\nsession_mode: per-user\n")
    assert message == (
        "/g/group.yaml:2: session_mode: got 'per-user'; valid values: per-chat, per-thread, shared"
    )


def test_wrong_type() -> None:
    assert "must be a list of ids" in error("name: A\ncreators: alice\n")
    assert ":4: creators[1]: must be a string id" in error("name: A\ncreators:\n  - a\n  - [x]\n")
    assert "must be a non-empty string" in error("name: [1]\n")
    assert "is required" in error("provider: offline\n")


@pytest.mark.parametrize(
    ("snippet", "needle"),
    [
        (
            "container: {memory: 10m}",
            "container.memory: got '10m'; expected a size of at least 64m",
        ),
        ("container: {cpus: 0}", "container.cpus: got 0; expected a number from 0.01"),
        ("container: {pids: 2}", "container.pids: got 2; expected a whole number from 16"),
        ("container: {network: host}", "container.network: got 'host'; valid values: none, bridge"),
        ("container: {idle_timeout: soon}", "container.idle_timeout: got 'soon'"),
        ("mounts: [{host: relative/path}]", "mounts[0].host: got 'relative/path'"),
        ("skills: everything", "skills: got 'everything'; expected 'all' or a list"),
        ("unknown_senders: maybe", "unknown_senders: got 'maybe'; valid values: drop, allow"),
    ],
)
def test_bad_values(snippet: str, needle: str) -> None:
    assert needle in error(f"name: A\n{snippet}\n")


def test_malformed_yaml_is_one_line_with_line_and_column() -> None:
    message = error("name: A\ncreators: [alice\n")
    assert message.startswith("/g/group.yaml:3:1: malformed YAML:")
    assert "\n" not in message


def test_document_not_a_mapping() -> None:
    assert "must be a mapping" in error("- a\n- b\n")


def test_sizes_and_durations() -> None:
    assert parse_size("512m") == 512 * 1024**2
    assert parse_size("1GiB") == 1024**3
    assert parse_size(1000) == 1000
    assert parse_size("lots") is None
    assert parse_duration("90") == 90
    assert parse_duration("30m") == 1800
    assert parse_duration(True) is None


def test_a_key_given_twice_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.errors import InvalidConfig
    from orchestrator.groups.config import parse_group_config

    text = "name: a\ncontainer:\n  disk: 1m\n  memory: 1g\n  disk: 2g\n"
    with pytest.raises(InvalidConfig, match=r"group.yaml:5: disk: given twice \(also on line 3\)"):
        parse_group_config(text, tmp_path / "group.yaml")


def test_every_problem_of_a_group_yaml_is_reported_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.errors import InvalidConfig
    from orchestrator.groups.config import parse_group_config

    text = (
        "name: ''\nsession_mode: sometimes\ncontainer:\n  cpus: 1000\n"
        "turn_timeout: forever\ncolour: blue\n"
    )
    with pytest.raises(InvalidConfig) as caught:
        parse_group_config(text, tmp_path / "group.yaml")
    message = caught.value.message
    assert message.startswith("5 problems: ")
    for part in (
        "group.yaml:6: colour: unknown key",
        "group.yaml:1: name: must be a non-empty string",
        "group.yaml:2: session_mode: got 'sometimes'",
        "group.yaml:4: container.cpus: got 1000",
        "group.yaml:5: turn_timeout: got 'forever'",
    ):
        assert part in message, part


def test_a_display_name_of_100_characters_passes_and_101_does_not(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.errors import InvalidConfig
    from orchestrator.groups.config import parse_group_config

    assert parse_group_config(f"name: {'n' * 100}\n", tmp_path / "g.yaml").name == "n" * 100
    with pytest.raises(InvalidConfig, match="is 101 characters; at most 100 allowed"):
        parse_group_config(f"name: {'n' * 101}\n", tmp_path / "g.yaml")


def test_a_config_file_over_256_kib_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from orchestrator.errors import InvalidConfig
    from orchestrator.groups.config import load_group_config

    path = tmp_path / "group.yaml"
    path.write_text("name: big\n" + "# padding\n" * ((256 * 1024 - 10) // 10))
    assert path.stat().st_size <= 256 * 1024 and load_group_config(path).name == "big"
    path.write_text("name: big\n" + "#" * (256 * 1024))
    with pytest.raises(InvalidConfig, match="config files are limited to 262144 bytes"):
        load_group_config(path)
