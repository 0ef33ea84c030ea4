"""A group's packages: names checked before anything runs, group.yaml edited in place."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import asdict
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
from orchestrator.groups.packages import (
    LockedWheel,
    PackageRefused,
    PythonLock,
    check_names,
    debian_problem,
    download_locked,
    python_problem,
    read_lock,
    resolve_python,
    write_lock,
)
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


# resolving and fetching wheels (pip faked: no network)


def test_a_refused_requirement_says_what_is_expected() -> None:
    expected = "expected a name with an optional version, such as requests or rich==13.7.1"
    assert python_problem(" -r x") == (
        f"got ' -r x': no options, paths, URLs or markers; {expected}"
    )
    assert python_problem("-r requirements.txt") == (
        f"got '-r requirements.txt': no options, paths, URLs or markers; {expected}"
    )
    assert python_problem("rich_") == f"got 'rich_': no URLs or markers; {expected}"
    assert python_problem(42) == f"got 42; {expected}"
    assert python_problem("a" * 200) is None and python_problem("a" * 201) is not None
    assert python_problem("Xlib") is None


class FakePip:
    """Stands for ``pip download``: records the command and puts files in ``-d``."""

    def __init__(self, files: dict[str, bytes], code: int = 0, err: str = "", out: str = ""):
        self.files, self.code, self.err, self.out = files, code, err, out
        self.calls: list[tuple[list[str], dict[str, object]]] = []

    def __call__(self, cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        self.calls.append((cmd, kw))
        dest = Path(cmd[cmd.index("-d") + 1])
        for name, data in self.files.items():
            (dest / name).write_bytes(data)
        return subprocess.CompletedProcess(cmd, self.code, self.out, self.err)


PIP_HEAD = [
    sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "-q",
    "--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp",
    "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
    "--platform", "manylinux_2_17_x86_64", "-d",
]  # fmt: skip
RICH = "rich-13.7.1-py3-none-any.whl"
MD = "markdown_it_py-3.0.0-py3-none-any.whl"


def test_requirements_resolve_to_wheels_and_their_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    pip = FakePip({RICH: b"rich wheel", MD: b"md wheel"})
    monkeypatch.setattr("orchestrator.groups.packages.subprocess.run", pip)
    said: list[str] = []
    lock = resolve_python(["rich==13.7.1"], said.append)
    [(cmd, kw)] = pip.calls
    dest = cmd[len(PIP_HEAD)]
    assert cmd == [*PIP_HEAD, dest, "--", "rich==13.7.1"]
    assert kw == {"capture_output": True, "text": True, "stdin": subprocess.DEVNULL}
    assert Path(dest).name.startswith("orchestrator-packages-") and not Path(dest).exists()
    md = LockedWheel("markdown_it_py", "3.0.0", MD, hashlib.sha256(b"md wheel").hexdigest())
    rich = LockedWheel("rich", "13.7.1", RICH, hashlib.sha256(b"rich wheel").hexdigest())
    assert lock == PythonLock(("rich==13.7.1",), (md, rich))
    assert said == [
        "resolving rich==13.7.1 to wheels for Python 3.11",
        "2 wheels: markdown_it_py 3.0.0, rich 13.7.1",
    ]
    assert lock.requirements_txt() == (
        f"markdown_it_py==3.0.0 --hash=sha256:{md.sha256}\n"
        f"rich==13.7.1 --hash=sha256:{rich.sha256}\n"
    )
    # the digest names the lock's content (an image is rebuilt when it changes)
    assert (
        lock.digest()
        == hashlib.sha256(
            json.dumps(
                {"requirements": ["rich==13.7.1"], "wheels": [asdict(md), asdict(rich)]},
                sort_keys=True,
            ).encode()
        ).hexdigest()
    )
    assert PythonLock(("b", "a"), ()).digest() == (
        "c66c063146afac0e703d38b677d9919096fe2e5c8f79dccf6dd1e11876abf4ed"
    )
    said.clear()
    resolve_python(["rich", "six"], said.append)
    assert said[0] == "resolving rich, six to wheels for Python 3.11"
    assert resolve_python([]) == PythonLock((), ()) and len(pip.calls) == 2
    monkeypatch.setattr(
        "orchestrator.groups.packages.subprocess.run", FakePip({"rich-1.0.tar.gz": b"sdist"})
    )
    with pytest.raises(PackageRefused, match=r"^rich-1\.0\.tar\.gz is not a wheel; only wheels"):
        resolve_python(["rich"])


def test_a_failed_download_says_why_in_its_last_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    err = "ERROR: one\n\nERROR: Could not find a version that satisfies x\nERROR: No matching\n"
    monkeypatch.setattr("orchestrator.groups.packages.subprocess.run", FakePip({}, 1, err=err))
    with pytest.raises(PackageRefused) as caught:
        resolve_python(["x"])
    assert caught.value.message == (
        "no wheel for Python 3.11 on Linux: ERROR: Could not find a version that satisfies x"
        " | ERROR: No matching"
    )
    assert caught.value.hint == (
        "only wheels are installed (an sdist would run its setup.py on the host as root); "
        "pick a version that ships a wheel"
    )
    monkeypatch.setattr(
        "orchestrator.groups.packages.subprocess.run",
        FakePip({}, 1, out="No Matching Distribution"),
    )
    with pytest.raises(PackageRefused, match=r"^no wheel for Python 3\.11 on Linux: No Matching"):
        resolve_python(["x"])
    monkeypatch.setattr(
        "orchestrator.groups.packages.subprocess.run", FakePip({}, 2, err="boom " * 200)
    )
    with pytest.raises(PackageRefused) as caught:
        resolve_python(["x"])
    assert caught.value.message == "pip download failed: " + ("boom " * 80)[:400]
    assert caught.value.hint == "check that PyPI is reachable"


def test_locked_wheels_are_fetched_and_checked_against_their_hashes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rich = LockedWheel("rich", "13.7.1", RICH, hashlib.sha256(b"rich wheel").hexdigest())
    lock = PythonLock(("rich",), (rich,))
    pip = FakePip({RICH: b"rich wheel"})
    monkeypatch.setattr("orchestrator.groups.packages.subprocess.run", pip)
    said: list[str] = []
    download_locked(PythonLock((), ()), tmp_path, said.append)
    assert pip.calls == [] and said == []
    download_locked(lock, tmp_path, said.append)
    requirements = tmp_path / "requirements.txt"
    assert requirements.read_text() == lock.requirements_txt()
    assert pip.calls[0][0] == [
        *PIP_HEAD, str(tmp_path), "--no-deps", "--require-hashes", "-r", str(requirements),
    ]  # fmt: skip
    assert said == ["downloading 1 locked wheels"]
    monkeypatch.setattr(
        "orchestrator.groups.packages.subprocess.run", FakePip({RICH: b"another wheel"})
    )
    with pytest.raises(PackageRefused, match=f"^{RICH}: missing or not the locked file$"):
        download_locked(lock, tmp_path)
    (tmp_path / RICH).unlink()
    monkeypatch.setattr("orchestrator.groups.packages.subprocess.run", FakePip({}))
    with pytest.raises(PackageRefused, match=f"^{RICH}: missing or not the locked file$"):
        download_locked(lock, tmp_path)


def test_the_lock_file_is_written_readable_and_read_back(tmp_path: Path) -> None:
    rich = LockedWheel("rich", "13.7.1", RICH, "ab" * 32)
    lock = PythonLock(("rich==13.7.1",), (rich,))
    assert read_lock(tmp_path) is None
    write_lock(tmp_path, lock)
    assert (tmp_path / "packages.lock").read_text() == json.dumps(lock.to_dict(), indent=2) + "\n"
    assert (tmp_path / "packages.lock").read_text().startswith('{\n  "requirements": [\n    "rich')
    assert read_lock(tmp_path) == lock
    (tmp_path / "packages.lock").write_text('{"requirements": []}')
    assert read_lock(tmp_path) is None


def test_a_refused_debian_name_says_what_is_expected() -> None:
    assert debian_problem("Jq") == (
        "got 'Jq'; expected a Debian package name: lowercase letters, digits, '+', '-' and '.', "
        "at least two characters, starting with a letter or digit"
    )
