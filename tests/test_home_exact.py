"""The home, atomic writes and YAML documents word for word: where the state folder is
(env, orchestrator.yaml, default) at the edges of what is read, the home's identity and
project name, its daemon lock and pid, a durable write's file and mode, and each YAML
refusal's sentence with the file and line it names."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from orchestrator import fsatomic
from orchestrator.errors import HomeNotWritable, InvalidConfig, OrchestratorError
from orchestrator.home import (
    HOME_ID_FILE,
    LOCK_FILE,
    PID_FILE,
    Home,
    lock_holder,
    read_pid,
    state_dir_of,
    take_lock,
)
from orchestrator.limits import CONFIG_FILE_MAX_BYTES
from orchestrator.yamldoc import (
    load_yaml_file,
    parse_yaml_bytes,
    parse_yaml_text,
    read_config_bytes,
)


@pytest.fixture(autouse=True)
def _no_state_dir_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRATOR_STATE_DIR", raising=False)


def _config(root: Path, text: str | bytes) -> Path:
    path = root / "orchestrator.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# -- where the state folder is --------------------------------------------------------


def test_the_state_folder_is_state_by_default_and_without_a_config(home: Path) -> None:
    assert state_dir_of(home, home / "orchestrator.yaml") == home / "state"
    assert Home(home).state_dir == home / "state"
    assert Home(home).config_file == home / "orchestrator.yaml"
    assert Home(home).groups_dir == home / "groups"
    assert Home(home).runtime_dir("fam") == home / "state" / "run" / "fam"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/srv/state", "/srv/state"),
        ("st", "HOME/st"),
        ("a/b", "HOME/a/b"),
        ("~/st", "USER/st"),
    ],
)
def test_state_dir_in_the_config_is_absolute_under_the_home_or_the_users(
    home: Path, value: str, expected: str
) -> None:
    config = _config(home, f"version: 1\nstate_dir: {value}\n")
    want = Path(expected.replace("HOME", str(home)).replace("USER", str(Path.home())))
    assert state_dir_of(home, config) == want


@pytest.mark.parametrize(
    "text",
    [
        "state_dir: ''\n",
        "state_dir: '   '\n",
        "state_dir: 3\n",
        "state_dir: [a]\n",
        "state_dir:\n",
        "- state_dir: /x\n",
        "just text\n",
        "a: [\n",  # malformed: load_config says so
        "state_dir: &a [*a]\n",
    ],
)
def test_a_state_dir_that_is_not_a_usable_string_leaves_the_default(home: Path, text: str) -> None:
    assert state_dir_of(home, _config(home, text)) == home / "state"


def test_a_config_not_utf8_leaves_the_default(home: Path) -> None:
    assert state_dir_of(home, _config(home, b"state_dir: /x\xff\n")) == home / "state"


def test_a_config_up_to_the_limit_is_read_and_one_byte_more_is_not(home: Path) -> None:
    line = "state_dir: /srv/state\n"
    exact = line + "#" * (CONFIG_FILE_MAX_BYTES - len(line) - 1) + "\n"
    assert len(exact) == CONFIG_FILE_MAX_BYTES
    assert state_dir_of(home, _config(home, exact)) == Path("/srv/state")
    assert state_dir_of(home, _config(home, exact + "\n")) == home / "state"


def test_the_env_state_dir_wins_and_is_made_absolute(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = _config(home, "state_dir: /srv/state\n")
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", "/var/st")
    assert state_dir_of(home, config) == Path("/var/st")
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", "~/st")
    assert state_dir_of(home, config) == Path.home() / "st"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", "rel")
    assert state_dir_of(home, config) == tmp_path / "rel"
    monkeypatch.setenv("ORCHESTRATOR_STATE_DIR", "")  # empty: not set
    assert state_dir_of(home, config) == Path("/srv/state")


# -- identity and project --------------------------------------------------------------


def _hash(root: Path) -> str:
    return hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:16]


def test_a_new_home_stores_the_hash_of_its_real_path_as_its_identity(
    home: Path, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(home)
    old = os.umask(0o022)
    try:
        identity = Home(link).identity
    finally:
        os.umask(old)
    assert identity == _hash(home) == hashlib.sha256(str(home).encode()).hexdigest()[:16]
    stored = home / "state" / HOME_ID_FILE
    assert stored.read_text() == identity + "\n"
    assert stored.stat().st_mode & 0o777 == 0o644
    assert Home(home).identity == identity


def test_a_stored_identity_is_kept_when_the_home_moves(home: Path) -> None:
    (home / "state").mkdir()
    (home / "state" / HOME_ID_FILE).write_text("  0123456789abcdef \n")
    assert Home(home).identity == "0123456789abcdef"
    assert Home.identity_from_file(home / "state" / HOME_ID_FILE) == "0123456789abcdef"


@pytest.mark.parametrize("stored", ["0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", ""])
def test_a_stored_identity_of_another_shape_is_not_taken(home: Path, stored: str) -> None:
    (home / "state").mkdir()
    path = home / "state" / HOME_ID_FILE
    path.write_text(stored)
    assert Home.identity_from_file(path) is None
    assert Home(home).identity == _hash(home)
    assert path.read_text() == stored  # never replaced


def test_identity_from_a_missing_file_is_none(tmp_path: Path) -> None:
    assert Home.identity_from_file(tmp_path / "nothing") is None


def test_an_identity_written_meanwhile_is_the_one_taken(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "state").mkdir()
    path = home / "state" / HOME_ID_FILE
    real_open = os.open

    def racing(file: object, flags: int, mode: int = 0o777) -> int:
        if str(file) == str(path):
            path.write_text("fedcba9876543210\n")  # another process, first
        return real_open(file, flags, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", racing)
    assert Home(home).identity == "fedcba9876543210"


def test_a_home_whose_state_cannot_be_written_still_has_its_identity(tmp_path: Path) -> None:
    root = tmp_path / "ro"
    root.mkdir()
    (root / "state").write_text("a file where the folder goes")
    assert Home(root).identity == _hash(root)


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("My Home!!", "my-home"),
        ("--_a_b-c_--", "a_b-c"),
        ("x" * 30, "x" * 24),
        ("ÉÉÉ", "home"),
        ("__", "home"),
    ],
)
def test_the_default_project_is_a_slug_of_the_folder_and_a_piece_of_the_identity(
    tmp_path: Path, name: str, slug: str
) -> None:
    root = tmp_path / name
    (root / "state").mkdir(parents=True)
    (root / "state" / HOME_ID_FILE).write_text("abcdef0123456789\n")
    assert Home(root).default_project() == f"{slug}-abcdef"


# -- writable, lock, pid ----------------------------------------------------------------


def test_ensure_writable_makes_groups_and_state(tmp_path: Path) -> None:
    root = tmp_path / "a" / "home"
    Home(root).ensure_writable()
    assert (root / "groups").is_dir()
    assert (root / "state").is_dir()


def test_ensure_writable_names_the_folder_it_cannot_make(tmp_path: Path) -> None:
    root = tmp_path / "home"
    root.mkdir()
    (root / "groups").write_text("a file")
    with pytest.raises(HomeNotWritable) as refused:
        Home(root).ensure_writable()
    assert refused.value.message == f"cannot create {root / 'groups'}: File exists"
    assert refused.value.hint == ("pass --home DIR (or set ORCHESTRATOR_HOME) to a writable folder")


def test_ensure_writable_names_a_folder_not_writable(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[str, int]] = []

    def access(path: object, mode: int) -> bool:
        seen.append((str(path), mode))
        return str(path) != str(home / "state")

    monkeypatch.setattr(os, "access", access)
    with pytest.raises(HomeNotWritable) as refused:
        Home(home).ensure_writable()
    assert refused.value.message == f"{home / 'state'} is not writable by uid {os.getuid()}"
    assert refused.value.hint == ("pass --home DIR (or set ORCHESTRATOR_HOME) to a writable folder")
    assert seen == [(str(p), os.W_OK | os.X_OK) for p in (home, home / "groups", home / "state")]


def test_the_lock_names_its_holder_and_a_second_taker_is_refused(home: Path) -> None:
    h = Home(home)
    h.ensure_writable()
    assert lock_holder(h) is None  # no lock file
    held = take_lock(h)
    try:
        assert (home / "state" / LOCK_FILE).exists()
        assert lock_holder(h) == os.getpid()
        with pytest.raises(OrchestratorError) as refused:
            take_lock(h)
        assert refused.value.message == f"a daemon already runs for {home} (pid {os.getpid()})"
        assert refused.value.hint == "stop it with: orchestrator down"
    finally:
        held.close()
    assert lock_holder(h) is None  # the file is left, nobody holds it
    take_lock(h).close()


def _no_proc_locks(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/locks":
            raise FileNotFoundError(2, "No such file or directory")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)


def test_without_proc_locks_the_lock_is_probed(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h = Home(home)
    h.ensure_writable()
    _no_proc_locks(monkeypatch)
    (home / "state" / LOCK_FILE).touch()
    assert lock_holder(h) is None
    assert lock_holder(h) is None  # the probe let the lock go
    held = take_lock(h)
    try:
        assert lock_holder(h) == -1  # held, no pid file
        (home / "state" / PID_FILE).write_text("4242\n")
        assert lock_holder(h) == 4242
        with pytest.raises(OrchestratorError) as refused:
            take_lock(h)
        assert refused.value.message == f"a daemon already runs for {home} (pid 4242)"
    finally:
        held.close()


def test_a_lock_of_another_file_in_proc_locks_is_not_its_holder(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Home(home)
    h.ensure_writable()
    lock = home / "state" / LOCK_FILE
    lock.touch()
    st = os.stat(lock)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    lines = {
        "1: FLOCK  ADVISORY  WRITE 111 00:00:1 0 EOF": None,
        f"1: POSIX  ADVISORY  WRITE 222 {dev}:{st.st_ino} 0 EOF": None,
        f"1: -> FLOCK  ADVISORY  WRITE 333 {dev}:{st.st_ino} 0 EOF": None,
        f"1: FLOCK  ADVISORY  WRITE 444 {dev}:{st.st_ino}0 0 EOF": None,
        f"1: FLOCK  ADVISORY  WRITE 555 {dev}:{st.st_ino} 0 EOF": 555,
        f"1: FLOCK ADVISORY WRITE 666 {dev}:{st.st_ino}": 666,
        "1: FLOCK ADVISORY WRITE 777": None,
    }
    real = Path.read_text
    for line, holder in lines.items():

        def read_text(self: Path, *args: object, _line: str = line, **kwargs: object) -> str:
            if str(self) == "/proc/locks":
                return f"{_line}\n"
            return real(self, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(Path, "read_text", read_text)
        assert lock_holder(h) == holder, line


@pytest.mark.parametrize(("text", "pid"), [(" 12\n", 12), ("x", None), ("", None)])
def test_read_pid(home: Path, text: str, pid: int | None) -> None:
    (home / "state").mkdir()
    (home / "state" / PID_FILE).write_text(text)
    assert read_pid(Home(home)) == pid


def test_read_pid_without_a_file(home: Path) -> None:
    assert read_pid(Home(home)) is None


# -- atomic writes ------------------------------------------------------------------------


def test_write_atomic_writes_text_as_utf8_with_the_mode_and_leaves_no_temp_file(
    tmp_path: Path,
) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")
    fsatomic.write_atomic(target, "café")
    assert target.read_bytes() == "café".encode()
    assert target.stat().st_mode & 0o7777 == 0o644
    fsatomic.write_atomic(target, b"\x00\x01", 0o600)
    assert target.read_bytes() == b"\x00\x01"
    assert target.stat().st_mode & 0o7777 == 0o600
    fsatomic.write_atomic(target, b"", 0o755)
    assert target.read_bytes() == b""
    assert target.stat().st_mode & 0o7777 == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_write_atomic_replaces_a_symlink_and_never_follows_it(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    fsatomic.write_atomic(link, "new")
    assert not link.is_symlink()
    assert link.read_text() == "new"
    assert elsewhere.read_text() == "keep"


def test_write_atomic_writes_beside_the_target_and_syncs_file_and_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    replaced: list[tuple[str, str]] = []
    synced: list[str] = []
    real_replace, real_fsync = os.replace, os.fsync

    def replace(src: str, dst: object) -> None:
        replaced.append((src, str(dst)))
        assert oct(os.stat(src).st_mode & 0o777) == oct(0o640)
        real_replace(src, dst)  # type: ignore[arg-type]

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "urandom", lambda n: bytes(range(n)))
    fsatomic.write_atomic(target, "x", 0o640)
    tmp = str(tmp_path / ".f.000102030405.tmp")
    assert replaced == [(tmp, str(target))]
    assert synced == [tmp, str(tmp_path)]


def test_write_atomic_takes_another_name_when_its_temp_name_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = tmp_path / ".f.000000000000.tmp"
    taken.write_text("someone else's")
    draws = iter([bytes(6), bytes(6), b"\x01" * 6])
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    fsatomic.write_atomic(tmp_path / "f", "x")
    assert taken.read_text() == "someone else's"
    assert (tmp_path / "f").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".f.000000000000.tmp", "f"]


def test_a_failed_write_atomic_leaves_no_temp_file_and_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "d"
    target.mkdir()
    (target / "x").write_text("inside")
    with pytest.raises(OSError):
        fsatomic.write_atomic(target, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert (target / "x").read_text() == "inside"


def test_a_write_atomic_interrupted_before_the_rename_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_text("old")

    def fail(path: object, mode: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "chmod", fail)
    with pytest.raises(KeyboardInterrupt):
        fsatomic.write_atomic(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert target.read_text() == "old"


def test_fsync_dir_syncs_a_folder_and_refuses_a_file(tmp_path: Path) -> None:
    fsatomic.fsync_dir(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        fsatomic.fsync_dir(tmp_path / "f")


# -- YAML documents ------------------------------------------------------------------------

DOC = """\
name: fam
channels:
  telegram:
    chat: 42
list:
  - a
  - b: 1
    c: 2
"""


def test_line_of_finds_each_key_or_its_nearest_parent(tmp_path: Path) -> None:
    doc = parse_yaml_text(DOC, tmp_path / "g.yaml")
    assert doc.data == {
        "name": "fam",
        "channels": {"telegram": {"chat": 42}},
        "list": ["a", {"b": 1, "c": 2}],
    }
    assert doc.line_of() == 1
    assert doc.line_of("name") == 1
    assert doc.line_of("channels") == 2
    assert doc.line_of("channels", "telegram") == 3
    assert doc.line_of("channels", "telegram", "chat") == 4
    assert doc.line_of("channels", "telegram", "missing") == 3
    assert doc.line_of("channels", "telegram", "chat", "deeper") == 4
    assert doc.line_of("list") == 5
    assert doc.line_of("list", 0) == 6
    assert doc.line_of("list", 1) == 7
    assert doc.line_of("list", 1, "c") == 8
    assert doc.line_of("list", 2) == 5
    assert doc.line_of("list", "c") == 5
    assert doc.line_of("missing", "x") == 1
    assert doc.where("list", 1, "c") == f"{tmp_path / 'g.yaml'}:8"
    assert doc.where() == f"{tmp_path / 'g.yaml'}:1"


def test_an_empty_document_has_no_lines(tmp_path: Path) -> None:
    doc = parse_yaml_text("", tmp_path / "e.yaml")
    assert doc.data is None
    assert doc.root is None
    assert doc.line_of("x") is None
    assert doc.where("x") == str(tmp_path / "e.yaml")


def test_a_document_that_starts_lower_counts_its_lines_from_the_file(tmp_path: Path) -> None:
    doc = parse_yaml_text("# c\n\nkey: v\n", tmp_path / "c.yaml")
    assert doc.line_of() == 3
    assert doc.line_of("key") == 3


def test_malformed_yaml_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: 1\nb: [1, 2\n", path)
    assert refused.value.message == (
        f"{path}:3:1: malformed YAML: did not find expected ',' or ']'"
    )
    assert refused.value.hint == "fix the YAML syntax at that place"
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: 1\n  b: 2\n", path)
    assert refused.value.message == (
        f"{path}:2:4: malformed YAML: mapping values are not allowed in this context"
    )


def test_two_documents_are_refused_naming_the_second(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: 1\n---\nb: 2\n", path)
    assert refused.value.message == (f"{path}:2:1: malformed YAML: but found another document")


def test_an_unknown_tag_is_malformed(tmp_path: Path) -> None:
    path = tmp_path / "tag.yaml"
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: !!python/object:os.system x\n", path)
    assert refused.value.message.startswith(f"{path}:1:4: malformed YAML: could not determine")


def test_a_yaml_error_without_a_mark_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    import orchestrator.yamldoc as yamldoc

    path = tmp_path / "m.yaml"

    class Marked(yamldoc._Loader):  # type: ignore[misc,valid-type]
        def get_single_node(self) -> yaml.Node:
            raise yaml.MarkedYAMLError(context="a context only")

    monkeypatch.setattr(yamldoc, "_Loader", Marked)
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: 1\n", path)
    assert refused.value.message == f"{path}: malformed YAML: a context only"

    class Bare(yamldoc._Loader):  # type: ignore[misc,valid-type]
        def get_single_node(self) -> yaml.Node:
            raise yaml.MarkedYAMLError()

    monkeypatch.setattr(yamldoc, "_Loader", Bare)
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: 1\n", path)
    assert refused.value.message == f"{path}: malformed YAML: invalid YAML"

    class Plain(yamldoc._Loader):  # type: ignore[misc,valid-type]
        def get_single_node(self) -> yaml.Node:
            raise yaml.YAMLError("no place")

    monkeypatch.setattr(yamldoc, "_Loader", Plain)
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: 1\n", path)
    assert refused.value.message == f"{path}: malformed YAML: no place"
    assert refused.value.hint is None


def test_a_mark_of_the_context_only_is_named(tmp_path: Path) -> None:
    import yaml

    import orchestrator.yamldoc as yamldoc

    path = tmp_path / "c.yaml"
    mark = yaml.Mark("x", 0, 4, 6, None, None)

    class Context(yamldoc._Loader):  # type: ignore[misc,valid-type]
        def get_single_node(self) -> yaml.Node:
            raise yaml.MarkedYAMLError(context="while here", context_mark=mark)

    real = yamldoc._Loader
    try:
        yamldoc._Loader = Context
        with pytest.raises(InvalidConfig) as refused:
            parse_yaml_text("a: 1\n", path)
    finally:
        yamldoc._Loader = real
    assert refused.value.message == f"{path}:5:7: malformed YAML: while here"


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: 1\nb:\n  - x: 1\n    y: 2\n    x: 3\n", path)
    assert refused.value.message == f"{path}:5: x: given twice (also on line 3)"
    assert refused.value.hint == "keep one of them"
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("1: a\n'1': b\n", path)
    assert refused.value.message == f"{path}:2: 1: given twice (also on line 1)"
    doc = parse_yaml_text("a: {x: 1}\nb: {x: 2}\n", path)  # one key in two mappings
    assert doc.data == {"a": {"x": 1}, "b": {"x": 2}}


def test_an_alias_loop_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("a: 1\nb: &x\n  - 1\n  - *x\n", path)
    assert refused.value.message == (
        f"{path}:2: an alias (*name) inside the value its anchor (&name) names: the value "
        "would hold itself without end"
    )
    assert refused.value.hint == "remove the alias from inside its anchor's value"


def test_aliases_used_twice_side_by_side_are_no_loop(tmp_path: Path) -> None:
    doc = parse_yaml_text("a: &x [1, 2]\nb: [*x, *x]\nc: *x\n", tmp_path / "ok.yaml")
    assert doc.data == {"a": [1, 2], "b": [[1, 2], [1, 2]], "c": [1, 2]}


def _aliased(fillers: int) -> str:
    """A flow list: a list of 1023 values, 254 aliases of it and ``fillers`` scalars; once
    expanded it holds 1 + 1024 * 255 + fillers values (CONFIG_FILE_MAX_BYTES with 1023)."""
    items = ["&x [" + ", ".join(["0"] * 1023) + "]", *(["*x"] * 254), *(["0"] * fillers)]
    return "[" + ", ".join(items) + "]\n"


def test_a_document_up_to_the_value_limit_loads_and_one_value_more_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bomb.yaml"
    assert CONFIG_FILE_MAX_BYTES == 1 + 1024 * 255 + 1023
    assert len(parse_yaml_text(_aliased(1023), path).data) == 255 + 1023
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_text("\n" + _aliased(1024), path)
    assert refused.value.message == (
        f"{path}:2: this value holds more than {CONFIG_FILE_MAX_BYTES} values once its "
        "aliases (*name) are expanded"
    )
    assert refused.value.hint == "write the values out, or use fewer aliases"


def test_read_config_bytes_up_to_the_limit_and_its_refusals(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"#" * CONFIG_FILE_MAX_BYTES)
    assert len(read_config_bytes(path)) == CONFIG_FILE_MAX_BYTES
    path.write_bytes(b"#" * (CONFIG_FILE_MAX_BYTES + 1))
    with pytest.raises(InvalidConfig) as refused:
        read_config_bytes(path)
    assert refused.value.message == (
        f"{path}: file is {CONFIG_FILE_MAX_BYTES + 1} bytes; config files are limited to "
        f"{CONFIG_FILE_MAX_BYTES} bytes"
    )
    with pytest.raises(InvalidConfig) as refused:
        read_config_bytes(tmp_path / "none.yaml")
    assert refused.value.message == f"{tmp_path / 'none.yaml'}: file not found"
    with pytest.raises(InvalidConfig) as refused:
        read_config_bytes(tmp_path)
    assert refused.value.message == f"{tmp_path}: is a directory, expected a YAML file"


def test_an_unreadable_config_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\n")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(InvalidConfig) as refused:
        read_config_bytes(path)
    assert refused.value.message == f"{path}: permission denied while reading"


def test_bytes_not_utf8_are_refused_at_their_offset(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    with pytest.raises(InvalidConfig) as refused:
        parse_yaml_bytes(b"a: 1\n\xff", path)
    assert refused.value.message == f"{path}: not UTF-8 text (invalid byte at offset 5)"
    assert refused.value.hint == "save the file as UTF-8"
    path.write_bytes("a: é\n".encode())
    assert load_yaml_file(path).data == {"a": "é"}
    assert load_yaml_file(path).path == path


def test_a_state_dir_in_utf8_is_read_whatever_the_locale(home: Path) -> None:
    import subprocess
    import sys

    config = _config(home, "state_dir: /srv/état\n")
    assert state_dir_of(home, config) == Path("/srv/état")
    script = (
        "import sys; from pathlib import Path; from orchestrator.home import state_dir_of; "
        "print(state_dir_of(Path(sys.argv[1]), Path(sys.argv[2])).as_posix().encode())"
    )
    import orchestrator.home

    here = str(Path(orchestrator.home.__file__).parents[1])  # the code this test runs
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0",
           "PYTHONPATH": here}  # fmt: skip
    env.pop("ORCHESTRATOR_STATE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", script, str(home), str(config)],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == repr("/srv/état".encode())


def test_a_daemon_whose_pid_cannot_be_found_is_shown_with_a_question_mark(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.home as home_module

    h = Home(home)
    h.ensure_writable()
    held = take_lock(h)
    try:
        monkeypatch.setattr(home_module, "lock_holder", lambda _home: None)
        with pytest.raises(OrchestratorError) as refused:
            take_lock(h)
        assert refused.value.message == f"a daemon already runs for {home} (pid ?)"
    finally:
        held.close()


def test_the_temp_file_is_never_readable_by_others_while_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = os.umask(0)
    modes: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    try:
        fsatomic.write_atomic(tmp_path / "f", "secret", 0o644)
    finally:
        os.umask(old)
    assert modes == [0o600]
    assert stat.S_IMODE(os.stat(tmp_path / "f").st_mode) == 0o644


def test_a_temp_file_already_gone_when_the_write_fails_raises_the_first_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def chmod(path: str, mode: int) -> None:
        os.unlink(path)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "chmod", chmod)
    with pytest.raises(PermissionError):
        fsatomic.write_atomic(tmp_path / "f", "x")
    assert os.listdir(tmp_path) == []
