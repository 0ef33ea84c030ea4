"""The offline base image: a minimal Debian root filesystem with python3, imported locally.

Used when the registry base image is not present and cannot be pulled (no registry), or
when asked with ``--offline``. Built with mmdebstrap (preferred: smaller, faster) or
debootstrap, from the Debian mirror in the host's apt sources.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import ImageBuildFailed
from orchestrator.image.recipe import (
    EXCLUDES,
    IMPORT_CHANGES,
    PACKAGES,
    SUITE,
    base_tag,
    recipe_hash,
)
from orchestrator.runtime.engine import call_engine

if TYPE_CHECKING:
    import docker

Progress = Callable[[str], None]

ROLE_LABEL = "org.orchestrator.role"
INPUTS_LABEL = "org.orchestrator.inputs"
# the checkout an agent image was built from: a build removes its own checkout's older
# images only, never those another checkout (another home, another release) runs
SOURCE_LABEL = "org.orchestrator.source"
# the release whose sources an agent, daemon or group image was built from
VERSION_LABEL = "org.opencontainers.image.version"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MIRROR_ENV = "ORCHESTRATOR_DEBIAN_MIRROR"


def find_mirror(configured: str | None = None) -> str:
    """The Debian mirror: config, env, the host's apt sources, or deb.debian.org."""
    if configured:
        return configured
    if os.environ.get(MIRROR_ENV):
        return os.environ[MIRROR_ENV]
    candidates: list[str] = []
    sources = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for path in sources:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            match = re.match(r"deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line) or re.match(
                r"URIs:\s*(\S+)", line
            )
            if match:
                candidates.append(match[1].rstrip("/"))
    for uri in candidates:
        if re.search(r"/debian$", uri) and "security" not in uri:
            return uri
    return DEFAULT_MIRROR


def _run_streaming(cmd: list[str], progress: Progress, what: str) -> None:
    import subprocess

    progress(f"$ {' '.join(cmd)}")
    tail: list[str] = []
    with subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as process:  # closes its pipe, whatever happens
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip()
            tail = [*tail[-19:], line]
            if line.startswith(("I: ", "W: ", "E: ")):
                progress(f"  {line}")
    if process.wait() != 0:
        raise ImageBuildFailed(
            f"{what} failed (exit {process.returncode}): " + " | ".join(tail[-3:]),
            hint="check that the Debian mirror is reachable, or set debian_mirror "
            "in orchestrator.yaml",
        )


def build_rootfs_tar(
    workdir: Path, mirror: str, progress: Progress, extra: tuple[str, ...] = ()
) -> Path:
    """Make a root filesystem tarball with mmdebstrap or debootstrap."""
    import shutil

    tarball = workdir / "rootfs.tar"
    packages = ",".join(sorted({*PACKAGES, *extra}))
    if shutil.which("mmdebstrap"):
        mode = "root" if os.geteuid() == 0 else "unshare"
        _run_streaming(
            [
                "mmdebstrap",
                "--variant=essential",
                f"--include={packages}",
                f"--mode={mode}",
                *(f"--dpkgopt=path-exclude={pattern}" for pattern in EXCLUDES),
                SUITE,
                str(tarball),
                mirror,
            ],
            progress,
            "mmdebstrap",
        )
        return tarball
    if shutil.which("debootstrap"):
        if os.geteuid() != 0:
            raise ImageBuildFailed(
                "debootstrap needs root", hint="install mmdebstrap, or build as root"
            )
        rootfs = workdir / "rootfs"
        _run_streaming(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={packages}",
                SUITE,
                str(rootfs),
                mirror,
            ],
            progress,
            "debootstrap",
        )
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        _run_streaming(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], progress, "tar")
        return tarball
    raise ImageBuildFailed(
        "building the offline base image needs mmdebstrap or debootstrap",
        hint="install one: apt-get install mmdebstrap",
    )


def ensure_offline_base(
    client: docker.DockerClient,
    progress: Progress,
    mirror: str | None = None,
    extra: tuple[str, ...] = (),
) -> str:
    """Return the tag of the offline base image (with ``extra`` packages: a base of its
    own, cached by the list), building and importing it when missing."""
    import tempfile

    from docker.errors import ImageNotFound

    tag = base_tag(extra)
    try:
        call_engine("inspect base image", lambda: client.images.get(tag))
        return tag
    except ImageNotFound:
        pass
    repository, version = tag.split(":", 1)
    mirror = find_mirror(mirror)
    progress(f"building the offline base image {tag} from Debian {SUITE} ({mirror})")
    with tempfile.TemporaryDirectory(prefix="orchestrator-base-") as tmp:
        tarball = build_rootfs_tar(Path(tmp), mirror, progress, extra)
        size_mb = tarball.stat().st_size / 1024**2
        progress(f"importing {size_mb:.0f} MB root filesystem as {tag}")
        changes = [
            *IMPORT_CHANGES,
            f"LABEL {ROLE_LABEL}=base {INPUTS_LABEL}={recipe_hash(extra)}",
        ]
        call_engine(
            "import base image",
            lambda: client.api.import_image_from_file(
                str(tarball), repository=repository, tag=version, changes=changes
            ),
            attempts=1,
        )
    return tag
