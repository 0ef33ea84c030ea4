"""The mount allowlist: every refusal says why; nothing outside an allowed root."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import InvalidConfig, MountRefused
from orchestrator.groups.config import MountRequest
from orchestrator.runtime.mounts import resolve_mounts


@pytest.fixture
def setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    shared = tmp_path / "shared"
    (shared / "docs").mkdir(parents=True)
    (shared / "rw").mkdir()
    allowlist = tmp_path / "config" / "mount-allowlist.yaml"
    allowlist.parent.mkdir()
    allowlist.write_text(
        f"roots:\n  - path: {shared}\n  - path: {shared / 'rw'}\n    writable: true\n"
    )
    return home, shared, allowlist


def resolve(setup, *requests: MountRequest):  # type: ignore[no-untyped-def]
    home, _, allowlist = setup
    return resolve_mounts(requests, allowlist_path=allowlist, home_root=home)


def refusal(setup, request: MountRequest) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(MountRefused) as info:
        resolve(setup, request)
    return info.value.message


def test_allowed_mounts(setup) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    (mount,) = resolve(setup, MountRequest(str(shared / "docs"), "docs"))
    assert (mount.source, mount.target, mount.read_only) == (
        str(shared / "docs"),
        "/workspace/extra/docs",
        True,
    )
    (rw,) = resolve(setup, MountRequest(str(shared / "rw"), "rw", writable=True))
    assert rw.read_only is False


def test_no_requests_need_no_allowlist(tmp_path: Path) -> None:
    assert resolve_mounts((), allowlist_path=tmp_path / "none.yaml", home_root=tmp_path) == ()


def test_missing_allowlist(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home, shared, _ = setup
    with pytest.raises(MountRefused, match="no mount allowlist at"):
        resolve_mounts(
            (MountRequest(str(shared), "s"),),
            allowlist_path=tmp_path / "missing.yaml",
            home_root=home,
        )


@pytest.mark.parametrize(
    "name",
    [
        ".ssh",
        ".aws",
        ".env",
        "id_rsa",
        "id_ed25519.pub",
        "credentials",
        "server.pem",
        "tls.key",
        ".kube",
        ".docker",
    ],
)
def test_blocked_names(setup, name: str) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    target = shared / name
    target.mkdir()
    assert "never mounted" in refusal(setup, MountRequest(str(target), "x"))


def test_folder_holding_a_secret_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    (shared / "docs" / ".env").write_text("TOKEN=1")
    message = refusal(setup, MountRequest(str(shared / "docs"), "docs"))
    assert "holds '.env'" in message


def test_symlink_escaping_the_root(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    outside = tmp_path / "outside"
    outside.mkdir()
    (shared / "link").symlink_to(outside)
    message = refusal(setup, MountRequest(str(shared / "link"), "link"))
    assert f"{outside} is not under an allowlisted root" in message


def test_dotdot_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    assert "'..' is not allowed" in refusal(
        setup, MountRequest(str(shared / "docs" / ".." / "docs"), "d")
    )


def test_write_requested_but_not_allowed(setup) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    message = refusal(setup, MountRequest(str(shared / "docs"), "d", writable=True))
    assert "allows read-only mounts only" in message


def test_orchestrator_home_is_never_mounted(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home, _, allowlist = setup
    allowlist.write_text(f"roots:\n  - path: {tmp_path}\n")
    message = refusal(setup, MountRequest(str(home), "home"))
    assert "the orchestrator's own files" in message
    # an ancestor of the home would expose it too
    assert "the orchestrator's own files" in refusal(setup, MountRequest(str(tmp_path), "all"))


def test_not_existing_path(setup) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    assert "does not exist" in refusal(setup, MountRequest(str(shared / "nope"), "n"))


def test_allowlist_inside_home_is_an_error(setup) -> None:  # type: ignore[no-untyped-def]
    home, shared, _ = setup
    inside = home / "allow.yaml"
    inside.write_text(f"roots: [{{path: {shared}}}]\n")
    with pytest.raises(InvalidConfig, match="must live outside the orchestrator home"):
        resolve_mounts((MountRequest(str(shared), "s"),), allowlist_path=inside, home_root=home)


def test_bad_allowlist_names_the_line(setup) -> None:  # type: ignore[no-untyped-def]
    _, shared, allowlist = setup
    allowlist.write_text("roots:\n  - path: relative\n")
    with pytest.raises(InvalidConfig) as info:
        resolve(setup, MountRequest(str(shared), "s"))
    assert info.value.message.startswith(f"{allowlist}:2: roots[0].path: got 'relative'")


# Every name the README promises is refused: one example per pattern of BLOCKED_NAMES.
EVERY_BLOCKED = [
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".gcloud",
    ".kube",
    ".docker",
    ".env",
    ".env.local",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    "id_rsa",
    "id_rsa.pub",
    "id_ecdsa",
    "id_ed25519",
    "id_dsa",
    "credentials",
    "credentials.json",
    "cert.pem",
    "tls.key",
    "bundle.p12",
    "store.pfx",
    "docker.sock",
    "mount-allowlist.yaml",
    "orchestrator.yaml",
]


def test_every_blocked_pattern_has_an_example_here() -> None:
    import fnmatch

    from orchestrator.runtime.mounts import BLOCKED_NAMES

    flat = [p for p in BLOCKED_NAMES if "/" not in p]
    for pattern in flat:
        assert any(fnmatch.fnmatch(name, pattern) for name in EVERY_BLOCKED), pattern


@pytest.mark.parametrize("name", EVERY_BLOCKED)
def test_every_blocked_name_is_refused_as_the_folder_and_in_the_middle_of_a_path(
    setup, name: str
) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    (shared / name / "inner").mkdir(parents=True)
    assert "never mounted" in refusal(setup, MountRequest(str(shared / name), "x"))
    deeper = refusal(setup, MountRequest(str(shared / name / "inner"), "x"))
    assert f"contains {name!r}" in deeper


def test_a_nested_cloud_config_is_refused(setup) -> None:  # type: ignore[no-untyped-def]
    _, shared, _ = setup
    (shared / "home" / ".config" / "gcloud").mkdir(parents=True)
    assert "never mounted" in refusal(setup, MountRequest(str(shared / "home/.config/gcloud"), "g"))


def test_the_allowlists_own_folder_is_never_mounted(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _home, shared, allowlist = setup
    allowlist.write_text(f"roots:\n  - path: {shared}\n  - path: {allowlist.parent.parent}\n")
    (allowlist.parent / "notes").mkdir()
    message = refusal(setup, MountRequest(str(allowlist.parent / "notes"), "n"))
    assert "overlaps" in message and "orchestrator's own files" in message


def _refused(setup, request: MountRequest) -> tuple[str, str | None]:  # type: ignore[no-untyped-def]
    with pytest.raises(MountRefused) as info:
        resolve(setup, request)
    return info.value.message, info.value.hint


def test_each_refusal_says_exactly_why_and_what_to_do(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home, shared, allowlist = setup
    docs, outside = shared / "docs", tmp_path / "outside"
    outside.mkdir()
    (shared / "secret").mkdir()
    (shared / "secret" / "id_rsa").write_text("k")
    assert _refused(setup, MountRequest(f"{docs}/../docs", "d")) == (
        f"mount 'd' ({docs}/../docs): '..' is not allowed in a mount path",
        "write the path without '..'",
    )
    assert _refused(setup, MountRequest(str(shared / "secret"), "s")) == (
        f"mount 's' ({shared / 'secret'}): {shared / 'secret'} holds 'id_rsa', which is "
        "never mounted",
        "mount a folder that holds no secrets",
    )
    assert _refused(setup, MountRequest(str(outside), "o")) == (
        f"mount 'o' ({outside}): {outside} is not under an allowlisted root ({shared}, "
        f"{shared / 'rw'})",
        f"add a root to {allowlist}",
    )
    assert _refused(setup, MountRequest(str(docs), "d", writable=True)) == (
        f"mount 'd' ({docs}): writable requested, but root {shared} allows read-only mounts only",
        f"set writable: true on that root in {allowlist}, or drop writable",
    )
    allowlist.write_text(f"roots:\n  - path: {tmp_path}\n")
    assert _refused(setup, MountRequest(str(home), "h")) == (
        f"mount 'h' ({home}): {home} overlaps {home}, the orchestrator's own files",
        "mount a folder outside the orchestrator home and config",
    )
    allowlist.write_text("roots: []\n")
    assert _refused(setup, MountRequest(str(outside), "o"))[0].endswith(
        f"{outside} is not under an allowlisted root (none listed)"
    )
    allowlist.unlink()
    assert _refused(setup, MountRequest(str(docs), "d")) == (
        f"mount 'd' ({docs}): no mount allowlist at {allowlist}, so no extra mounts are allowed",
        "list allowed roots in that file (see README, Extra mounts)",
    )


def test_the_allowlist_file_is_checked_exactly(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    home, shared, allowlist = setup
    inside = home / "allow.yaml"
    inside.write_text(f"roots: [{{path: {shared}}}]\n")
    with pytest.raises(InvalidConfig) as info:
        resolve_mounts((MountRequest(str(shared), "s"),), allowlist_path=inside, home_root=home)
    assert (info.value.message, info.value.hint) == (
        f"{inside}: the mount allowlist must live outside the orchestrator home {home}",
        "move it, e.g. to ~/.config/orchestrator/mount-allowlist.yaml",
    )
    for body, problem in (
        ("roots: {path: /srv}\n", "1: roots: must be a list of {path, writable} mappings"),
        (f"roots:\n  - path: {'/x' * 2048}y\n", "2: roots[0].path: "),  # 4,097 characters
    ):
        allowlist.write_text(body)
        with pytest.raises(InvalidConfig) as info:
            resolve(setup, MountRequest(str(shared), "s"))
        assert info.value.message.startswith(f"{allowlist}:{problem}"), info.value.message
    allowlist.write_text(f"roots:\n  - path: {'/x' * 2048}\n")  # 4,096 characters: loads
    assert _refused(setup, MountRequest(str(shared), "s"))[0].endswith(
        f"is not under an allowlisted root ({'/x' * 2048})"
    )
    # a missing roots key allows nothing; a root may be given from the home folder (~)
    allowlist.write_text("{}\n")
    assert _refused(setup, MountRequest(str(shared), "s"))[0].endswith("(none listed)")
    allowlist.write_text("roots:\n  - path: ~/\n")
    assert _refused(setup, MountRequest(str(shared), "s"))[0].endswith(
        f"is not under an allowlisted root ({Path.home().resolve()})"
    )
