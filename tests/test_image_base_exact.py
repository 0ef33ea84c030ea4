"""Exact behaviour of the offline base image's build (image/base.py) without an engine:
the Debian mirror found from the host's apt sources (read from a temp folder), the
commands run for the root filesystem (a recording stand-in, and real small commands for
the streaming), and the import through a fake engine client."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker.errors import ImageNotFound

from orchestrator.errors import ImageBuildFailed
from orchestrator.image import base
from orchestrator.image.recipe import EXCLUDES, IMPORT_CHANGES, PACKAGES, base_tag, recipe_hash

# find_mirror


@pytest.fixture()
def apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """/etc/apt as base.py sees it: a temp folder."""
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    real = Path

    def path(*parts: Any) -> Path:
        return real(str(real(*parts)).replace("/etc/apt", str(etc), 1))

    monkeypatch.setattr(base, "Path", path)
    monkeypatch.delenv(base.MIRROR_ENV, raising=False)
    return etc


def test_the_configured_mirror_comes_first(apt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(base.MIRROR_ENV, "http://env.example/debian")
    (apt / "sources.list").write_text("deb http://apt.example/debian bookworm main\n")
    assert base.find_mirror("http://conf.example/debian") == "http://conf.example/debian"


def test_the_environment_comes_before_the_apt_sources(
    apt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(base.MIRROR_ENV, "http://env.example/debian")
    (apt / "sources.list").write_text("deb http://apt.example/debian bookworm main\n")
    assert base.find_mirror() == "http://env.example/debian"
    assert base.find_mirror("") == "http://env.example/debian"


def test_an_empty_environment_setting_is_not_a_mirror(
    apt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(base.MIRROR_ENV, "")
    assert base.find_mirror() == "http://deb.debian.org/debian"


def test_no_sources_give_debians_own_mirror(apt: Path) -> None:
    assert base.find_mirror() == "http://deb.debian.org/debian"


def test_the_first_debian_mirror_of_a_one_line_source_list(apt: Path) -> None:
    (apt / "sources.list").write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb http://security.debian.org/debian-security bookworm-security main\n"
        "deb http://ubuntu.example/ubuntu jammy main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main  # x\n"
        "deb http://second.example/debian bookworm main\n"
    )
    assert base.find_mirror() == "http://mirror.example/debian"


def test_a_debian_security_mirror_is_not_the_mirror(apt: Path) -> None:
    (apt / "sources.list").write_text("deb http://security.example/debian bookworm main\n")
    assert base.find_mirror() == "http://deb.debian.org/debian"


def test_a_deb_line_needs_a_suite(apt: Path) -> None:
    (apt / "sources.list").write_text("deb http://alone.example/debian\n")
    assert base.find_mirror() == "http://deb.debian.org/debian"


def test_deb822_sources_are_read_in_name_order(apt: Path) -> None:
    (apt / "sources.list.d" / "b.sources").write_text(
        "Types: deb\nURIs: http://b.example/debian\nSuites: bookworm\n"
    )
    (apt / "sources.list.d" / "a.sources").write_text(
        "Types: deb\nURIs:   http://a.example/debian/\nSuites: bookworm\n"
    )
    assert base.find_mirror() == "http://a.example/debian"


def test_the_main_list_comes_before_the_folder(apt: Path) -> None:
    (apt / "sources.list.d" / "a.list").write_text("deb http://folder.example/debian x main\n")
    (apt / "sources.list").write_text("deb http://main.example/debian x main\n")
    assert base.find_mirror() == "http://main.example/debian"


def test_an_unreadable_source_is_skipped(apt: Path) -> None:
    (apt / "sources.list").mkdir()
    (apt / "sources.list.d" / "z.list").write_bytes(b"deb http://z.example/debian x main \xff\n")
    assert base.find_mirror() == "http://z.example/debian"


def test_a_comment_ends_a_line_at_its_first_hash(apt: Path) -> None:
    (apt / "sources.list").write_text("URIs: http://x.example/debian#a#b\n")
    assert base.find_mirror() == "http://x.example/debian"


def test_only_slashes_are_taken_off_the_end(apt: Path) -> None:
    (apt / "sources.list").write_text("deb http://x.example/debianX/ bookworm main\n")
    assert base.find_mirror() == "http://deb.debian.org/debian"


def test_a_mirror_must_end_in_debian(apt: Path) -> None:
    (apt / "sources.list").write_text(
        "deb http://x.example/debian-ports x main\ndeb http://y.example/debianx x main\n"
    )
    assert base.find_mirror() == "http://deb.debian.org/debian"


# _run_streaming


def test_a_command_streams_its_debootstrap_lines(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "print('I: Retrieving')\nprint('noise')\nprint('W: careful  ')\n"
        "print('E: bad', file=sys.stderr)\nprint(' I: indented')\n"
        "sys.stdout.buffer.write(b'I: caf\\xff\\n')\n"
    )
    seen: list[str] = []
    cmd = [sys.executable, "-c", script]
    base._run_streaming(cmd, seen.append, "tool")
    assert seen == [
        f"$ {' '.join(cmd)}",
        "  I: Retrieving",
        "  W: careful",
        "  E: bad",
        "  I: caf\ufffd",
    ]


def test_a_command_reads_no_input() -> None:
    # this process's stdin holds text: the command must not get it
    read, write = os.pipe()
    os.write(write, b"typed\n")
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    try:
        seen: list[str] = []
        script = "import sys\nprint('I: got ' + repr(sys.stdin.read()))\n"
        base._run_streaming([sys.executable, "-c", script], seen.append, "tool")
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(read)
    assert seen[1:] == ["  I: got ''"]


def test_a_failed_command_names_its_exit_and_last_three_lines() -> None:
    script = "import sys\nfor i in range(30): print(f'line {i}')\nsys.exit(3)\n"
    with pytest.raises(ImageBuildFailed) as caught:
        base._run_streaming([sys.executable, "-c", script], lambda line: None, "mmdebstrap")
    assert caught.value.message == "mmdebstrap failed (exit 3): line 27 | line 28 | line 29"
    assert caught.value.hint == (
        "check that the Debian mirror is reachable, or set debian_mirror in orchestrator.yaml"
    )


def test_a_failed_command_with_one_line_names_it() -> None:
    script = "import sys\nprint('E: no')\nsys.exit(1)\n"
    with pytest.raises(ImageBuildFailed) as caught:
        base._run_streaming([sys.executable, "-c", script], lambda line: None, "tar")
    assert caught.value.message == "tar failed (exit 1): E: no"


def test_the_tail_keeps_twenty_lines_for_the_last_three() -> None:
    # the tail is cut to the last 20 lines as it goes: the last three are always there
    script = "import sys\nfor i in range(21): print(f'l{i}')\nsys.exit(2)\n"
    with pytest.raises(ImageBuildFailed) as caught:
        base._run_streaming([sys.executable, "-c", script], lambda line: None, "x")
    assert caught.value.message == "x failed (exit 2): l18 | l19 | l20"


# build_rootfs_tar


class Tools:
    """Which of mmdebstrap/debootstrap are installed, who runs, and the commands run."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, installed: set[str], uid: int) -> None:
        import shutil

        self.runs: list[tuple[list[str], str]] = []
        self.removed: list[tuple[Path, bool]] = []
        monkeypatch.setattr(
            shutil, "which", lambda name: f"/usr/bin/{name}" if name in installed else None
        )
        monkeypatch.setattr(base.os, "geteuid", lambda: uid)
        monkeypatch.setattr(shutil, "rmtree", self.rmtree)
        monkeypatch.setattr(base, "_run_streaming", self.run)

    def run(self, cmd: list[str], progress: base.Progress, what: str) -> None:
        progress(f"ran {what}")
        self.runs.append((cmd, what))

    def rmtree(self, path: Path, ignore_errors: bool = False) -> None:
        self.removed.append((path, ignore_errors))


def packages(extra: tuple[str, ...] = ()) -> str:
    return ",".join(sorted({*PACKAGES, *extra}))


@pytest.mark.parametrize(("uid", "mode"), [(0, "root"), (1000, "unshare")])
def test_mmdebstrap_makes_the_tarball(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uid: int, mode: str
) -> None:
    tools = Tools(monkeypatch, {"mmdebstrap", "debootstrap"}, uid)
    seen: list[str] = []
    got = base.build_rootfs_tar(tmp_path, "http://m.example/debian", seen.append, ("git", "zsh"))
    assert got == tmp_path / "rootfs.tar"
    assert tools.runs == [
        (
            [
                "mmdebstrap",
                "--variant=essential",
                f"--include={packages(('zsh',))}",
                f"--mode={mode}",
                *(f"--dpkgopt=path-exclude={p}" for p in EXCLUDES),
                "bookworm",
                str(tmp_path / "rootfs.tar"),
                "http://m.example/debian",
            ],
            "mmdebstrap",
        )
    ]
    assert seen == ["ran mmdebstrap"]


def test_debootstrap_as_root_makes_the_tarball_without_the_package_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = Tools(monkeypatch, {"debootstrap"}, 0)
    seen: list[str] = []
    got = base.build_rootfs_tar(tmp_path, "http://m.example/debian", seen.append)
    rootfs = tmp_path / "rootfs"
    assert got == tmp_path / "rootfs.tar"
    assert tools.runs == [
        (
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={packages()}",
                "bookworm",
                str(rootfs),
                "http://m.example/debian",
            ],
            "debootstrap",
        ),
        (["tar", "-C", str(rootfs), "-cf", str(tmp_path / "rootfs.tar"), "."], "tar"),
    ]
    assert tools.removed == [(rootfs / "var/cache/apt/archives", True)]
    assert seen == ["ran debootstrap", "ran tar"]


def test_debootstrap_needs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = Tools(monkeypatch, {"debootstrap"}, 1000)
    with pytest.raises(ImageBuildFailed) as caught:
        base.build_rootfs_tar(tmp_path, "http://m.example/debian", lambda line: None)
    assert caught.value.message == "debootstrap needs root"
    assert caught.value.hint == "install mmdebstrap, or build as root"
    assert tools.runs == []


def test_neither_tool_is_an_error_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    Tools(monkeypatch, set(), 0)
    with pytest.raises(ImageBuildFailed) as caught:
        base.build_rootfs_tar(tmp_path, "http://m.example/debian", lambda line: None)
    assert caught.value.message == (
        "building the offline base image needs mmdebstrap or debootstrap"
    )
    assert caught.value.hint == "install one: apt-get install mmdebstrap"


# ensure_offline_base


class FakeEngine:
    """An engine client with images.get and api.import_image_from_file; call_engine's
    stand-in records each call's name and attempts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, present: set[str]) -> None:
        self.present = present
        self.calls: list[tuple[str, int | None]] = []
        self.imports: list[tuple[str, dict[str, Any], int]] = []
        self.images = SimpleNamespace(get=self.get)
        self.api = SimpleNamespace(import_image_from_file=self.import_image)
        monkeypatch.setattr(base, "call_engine", self.call_engine)

    def call_engine(self, what: str, fn: Any, *, attempts: int | None = None) -> Any:
        self.calls.append((what, attempts))
        return fn()

    def get(self, tag: str) -> object:
        if tag not in self.present:
            raise ImageNotFound(f"no {tag}")
        return object()

    def import_image(self, path: str, **kwargs: Any) -> None:
        self.imports.append((path, kwargs, Path(path).stat().st_size))


def test_a_present_base_is_not_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = FakeEngine(monkeypatch, {base_tag(("zsh",))})
    monkeypatch.setattr(base, "build_rootfs_tar", pytest.fail)
    seen: list[str] = []
    assert base.ensure_offline_base(engine, seen.append, extra=("zsh",)) == base_tag(("zsh",))  # type: ignore[arg-type]
    assert engine.calls == [("inspect base image", None)]
    assert seen == []


# 2.5005 MiB: "3 MB" (2.4956 if a MB were 1025**2 bytes)
SIZE = 2621964


def test_a_missing_base_is_built_and_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine(monkeypatch, set())
    built: list[tuple[str, str, tuple[str, ...]]] = []
    made: list[Path] = []

    def build(workdir: Path, mirror: str, progress: base.Progress, extra: tuple[str, ...]) -> Path:
        assert workdir.is_dir() and workdir.name.startswith("orchestrator-base-")
        built.append((str(workdir.parent), mirror, extra))
        progress("rootfs progress")
        tarball = workdir / "rootfs.tar"
        tarball.write_bytes(b"")
        os.truncate(tarball, SIZE)
        made.append(tarball)
        return tarball

    monkeypatch.setattr(base, "build_rootfs_tar", build)
    monkeypatch.setattr(base, "find_mirror", lambda configured: f"found<{configured}>")
    seen: list[str] = []
    tag = base_tag(("zsh",))
    repository, version = tag.split(":", 1)
    got = base.ensure_offline_base(engine, seen.append, "http://m/debian", ("zsh",))  # type: ignore[arg-type]
    assert got == tag
    assert built[0][1:] == ("found<http://m/debian>", ("zsh",))
    assert engine.calls == [("inspect base image", None), ("import base image", 1)]
    assert engine.imports == [
        (
            str(made[0]),
            {
                "repository": repository,
                "tag": version,
                "changes": [
                    *IMPORT_CHANGES,
                    "LABEL org.orchestrator.role=base org.orchestrator.inputs="
                    + recipe_hash(("zsh",)),
                ],
            },
            SIZE,
        )
    ]
    assert seen == [
        f"building the offline base image {tag} from Debian bookworm (found<http://m/debian>)",
        "rootfs progress",
        f"importing 3 MB root filesystem as {tag}",
    ]
    assert not made[0].parent.exists()


def test_a_base_tag_with_a_colon_in_its_version_splits_at_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine(monkeypatch, set())
    monkeypatch.setattr(base, "base_tag", lambda extra: "repo:v:1")

    def build(workdir: Path, mirror: str, progress: base.Progress, extra: tuple[str, ...]) -> Path:
        tarball = workdir / "rootfs.tar"
        tarball.write_bytes(b"x")
        return tarball

    monkeypatch.setattr(base, "build_rootfs_tar", build)
    monkeypatch.setattr(base, "find_mirror", lambda configured: "m")
    assert base.ensure_offline_base(engine, lambda line: None) == "repo:v:1"  # type: ignore[arg-type]
    assert engine.imports[0][1]["repository"] == "repo"
    assert engine.imports[0][1]["tag"] == "v:1"
