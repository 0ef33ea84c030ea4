"""A group's packages: names checked before anything runs, group.yaml edited in place."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli import cli
from orchestrator.errors import InvalidConfig
from orchestrator.groups import GroupStore
from orchestrator.groups.config import (
    GroupConfig,
    config_lock,
    load_group_config,
    parse_group_config,
    set_packages,
)
from orchestrator.groups.packages import check_names, debian_problem, python_problem
from orchestrator.home import Home

REFUSED_DEBIAN = [
    "; rm -rf /",
    "-o",
    "-oDpkg::Options::=--force-all",
    "../x",
    "a",
    "Jq",
    "jq=1.6",
    "jq/bookworm",
    "http://x/y.deb",
    "",
    "j q",
    "jq\n",
]
REFUSED_PYTHON = [
    "; rm -rf /",
    "-r requirements.txt",
    "--index-url=http://x",
    "../x",
    "pkg@http://example.org/x.whl",
    "pkg @ https://example.org/x.whl",
    "./local.whl",
    "/abs/pkg",
    "pkg; sys_platform == 'linux'",
    "",
    "a b",
    "git+https://example.org/repo",
]


@pytest.mark.parametrize("name", REFUSED_DEBIAN)
def test_debian_names_outside_the_grammar_are_refused(name: str) -> None:
    assert debian_problem(name) is not None


@pytest.mark.parametrize("text", REFUSED_PYTHON)
def test_python_requirements_with_options_paths_urls_or_markers_are_refused(text: str) -> None:
    assert python_problem(text) is not None


def test_ordinary_names_are_accepted() -> None:
    for name in ("jq", "sqlite3", "libc6", "g++", "python3.11", "xz-utils"):
        assert debian_problem(name) is None, name
    for text in ("rich", "rich==13.7.1", "Pillow>=10,<11", "requests[socks]~=2.32"):
        assert python_problem(text) is None, text
    check_names(["jq"], ["rich"])
    with pytest.raises(InvalidConfig, match=r"packages\.python\[1\]"):
        check_names([], ["rich", "x@http://y"])


def group(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    GroupStore(Home(home)).add(GroupConfig(name="fam"))
    return home


def test_set_packages_keeps_the_file_and_refuses_bad_names(tmp_path: Path) -> None:
    home = group(tmp_path)
    path = home / "groups" / "fam" / "group.yaml"
    path.write_text(path.read_text().replace("\npackages:", "\n# operator's note\npackages:"))
    with config_lock(path):
        set_packages(path, ("tree",), ("rich==13.7.1",))
    text = path.read_text()
    assert "# operator's note" in text and "# Scheduled tasks" in text
    assert load_group_config(path).packages.debian == ("tree",)
    assert load_group_config(path).packages.python == ("rich==13.7.1",)
    with pytest.raises(InvalidConfig, match=r"packages\.debian\[0\]"):
        set_packages(path, ("-oops",), ())
    assert path.read_text() == text  # unchanged
    # a group.yaml of an older release, with no packages section, gets one
    old = path.read_text().split("\n# Packages for")[0] + "\n"
    path.write_text(old)
    set_packages(path, ("tree",), ())
    assert load_group_config(path).packages.debian == ("tree",)
    assert parse_group_config(path.read_text(), path).packages.from_chat is False


def test_set_packages_takes_any_yaml_the_loader_takes(tmp_path: Path) -> None:
    """A packages section written by hand, in flow style or with its keys in another
    order and indentation, is edited in place (it was refused as a second packages:
    section), every other line kept; a packages: that is not a mapping is refused,
    naming it, and nothing changes."""
    home = group(tmp_path)
    path = home / "groups" / "fam" / "group.yaml"
    base = path.read_text().split("\n# Packages for")[0] + "\n"
    for section in (
        "packages: {debian: [curl], from_chat: true}\n",
        "packages:\n    python: []  # none yet\n    debian:\n      - curl\n",
    ):
        path.write_text(base + "# mine\n" + section)
        with config_lock(path):
            set_packages(path, ("curl", "tree"), ("rich==13.7.1",))
        config = load_group_config(path)
        assert config.packages.debian == ("curl", "tree")
        assert config.packages.python == ("rich==13.7.1",)
        text = path.read_text()
        assert text.startswith(base) and "# mine" in text and text.count("packages:") == 1
    assert config.packages.from_chat is False  # the second file never said from_chat
    path.write_text(base + "packages: {debian: [curl], from_chat: true}\n")
    set_packages(path, ("tree",), ())
    assert load_group_config(path).packages.from_chat is True  # kept
    path.write_text(base + "packages: [curl]\n")
    with pytest.raises(InvalidConfig, match="packages"):
        set_packages(path, ("tree",), ())
    assert path.read_text() == base + "packages: [curl]\n"


def test_the_cli_refuses_before_anything_changes(tmp_path: Path) -> None:
    home = group(tmp_path)
    path = home / "groups" / "fam" / "group.yaml"
    before = path.read_text()
    runner = CliRunner()
    for args in (
        ["--add-debian", "-oDpkg::Options::=--force-all"],
        ["--add-python", "pkg@http://example.org/x.whl"],
        ["--add-python", "--index-url=http://example.org"],
        ["--remove", "never-asked"],
    ):
        result = runner.invoke(cli, ["--home", str(home), "group", "packages", "fam", *args])
        assert result.exit_code == 2, (args, result.output)
        assert path.read_text() == before
    listed = runner.invoke(cli, ["--home", str(home), "group", "packages", "fam"])
    assert listed.exit_code == 0 and "debian:  -" in listed.output


def test_the_operator_lists_and_denies_a_request_and_nothing_changes(tmp_path: Path) -> None:
    import json as _json

    from orchestrator.relay.approvals import PACKAGES
    from orchestrator.store.held import HeldRequests
    from orchestrator.store.messages import new_message, open_queue

    home = group(tmp_path)
    path = home / "groups" / "fam" / "group.yaml"
    before = path.read_text()
    queue = open_queue(Home(home))
    try:
        message = new_message(
            group="fam", session="cli.chat-c", chat="c", thread=None, sender="bob",
            trust="member", text="get tree", channel="cli",
        )  # fmt: skip
        asked = queue.put(message)
        content = _json.dumps({"debian": ["tree"], "python": [], "wheels": [], "reason": "x"})
        request = HeldRequests(queue).hold(
            group="fam", kind=PACKAGES, content=content, channel="cli", chat="c",
            thread=None, sender="bob", message_id=asked.id, chat_approvable=True, ttl=3600,
        )  # fmt: skip
    finally:
        queue.close()
    runner = CliRunner()
    base = ["--home", str(home), "group", "packages", "fam"]
    listed = runner.invoke(cli, [*base, "--pending", "--json"])
    assert listed.exit_code == 0, listed.output
    [shown] = _json.loads(listed.output)
    assert shown["id"] == request.id and _json.loads(shown["content"])["debian"] == ["tree"]
    unknown = runner.invoke(cli, [*base, "--deny", str(request.id + 1)])
    assert unknown.exit_code == 2 and "no package request" in unknown.output
    denied = runner.invoke(cli, [*base, "--deny", str(request.id)])
    assert denied.exit_code == 0, denied.output
    assert path.read_text() == before
    queue = open_queue(Home(home))
    try:
        assert HeldRequests(queue).waiting("fam") == []
        replies = queue.get(asked.id).replies  # type: ignore[union-attr]
        assert any(f"Request {request.id} was denied" in r for r in replies), replies
    finally:
        queue.close()
