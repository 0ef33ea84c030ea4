"""The agent image: this distribution installed from wheels into a base image.

Inputs (the Dockerfile, the package sources, pyproject.toml and what the base is made
of) are hashed; the image is tagged ``<repository>:<hash12>`` and
``<repository>:latest`` and labelled with the full hash, so a build with unchanged
inputs is a no-op. The base counts by its recipe (the offline base: Debian suite,
packages, import changes) or by its registry reference and digest, never by a local image
id: another build that imports the same base again must not invalidate this image. ``docker build``
never reaches the network: wheels are downloaded on the host and installed with
``--no-index``, and the build runs with ``network_mode=none``.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orchestrator
from orchestrator.errors import ImageBuildFailed, OrchestratorError
from orchestrator.image import inputs, noop
from orchestrator.image.base import (
    INPUTS_LABEL,
    ROLE_LABEL,
    SOURCE_LABEL,
    VERSION_LABEL,
    ensure_offline_base,
)
from orchestrator.image.inputs import PYTHON_VERSION, InputsCache, Recorded
from orchestrator.limits import BASE_PULL_TIMEOUT_SECONDS
from orchestrator.runtime.engine import call_engine

if TYPE_CHECKING:
    import docker

Progress = Callable[[str], None]

REGISTRY_BASE = "python:3.11-slim-bookworm"
_PLATFORMS = {
    "x86_64": ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_17_x86_64"),
    "aarch64": ("manylinux_2_28_aarch64", "manylinux2014_aarch64", "manylinux_2_17_aarch64"),
}


@dataclass(frozen=True)
class BuildResult:
    tag: str
    image_id: str
    inputs_hash: str
    base: str
    built: bool  # False when the image was already current


def source_root() -> Path:
    """The checkout this package runs from; the image is built from its sources."""
    root = Path(orchestrator.__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file() or not (root / "images/agent/Dockerfile").is_file():
        raise ImageBuildFailed(
            f"no source checkout at {root} (pyproject.toml and images/agent/Dockerfile)",
            hint="build the image from a clone of the project (pip install -e .)",
        )
    return root


def recorded_noop(
    repository: str, inspect: Callable[[str], dict[str, Any] | None]
) -> BuildResult | None:
    """An offline build with nothing to do, known from the last one recorded and one
    ``inspect`` of its tag (the inputs hashed from their stats, the base's recipe
    computed here): its result, or None when a full build check is needed."""
    found = noop.recorded(str(source_root()), repository, inspect)
    if found is None:
        return None
    return BuildResult(found.tag, found.image_id, found.inputs_hash, found.base, built=False)


def _record(root: Path, repository: str, offline: bool, result: BuildResult) -> None:
    if offline:
        cache = InputsCache(root)
        cache.record(
            noop.offline_request(repository),
            Recorded(result.inputs_hash, result.tag, result.image_id, result.base),
        )
        cache.save()


def _image_id(client: docker.DockerClient, ref: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        return str(call_engine(f"inspect {ref}", lambda: client.images.get(ref)).id)
    except ImageNotFound:
        return None


def _try_pull(client: docker.DockerClient, ref: str) -> str | None:
    """One pull attempt with a short timeout; None when the registry cannot be had."""
    from docker.errors import DockerException
    from requests import RequestException

    repository, _, tag = ref.partition(":")
    saved = client.api.timeout
    client.api.timeout = BASE_PULL_TIMEOUT_SECONDS
    try:
        client.api.pull(repository, tag=tag or "latest")
    except (DockerException, RequestException, OSError) as exc:
        lines = str(getattr(exc, "explanation", None) or exc).splitlines() or [""]
        return lines[0][:160] or type(exc).__name__
    finally:
        client.api.timeout = saved
    return None


def resolve_base(
    client: docker.DockerClient,
    *,
    base: str | None,
    offline: bool,
    progress: Progress,
    mirror: str | None = None,
) -> str:
    """Pick the base image: the requested or registry one, else the offline Debian base."""
    if offline:
        return ensure_offline_base(client, progress, mirror)
    wanted = base or REGISTRY_BASE
    if _image_id(client, wanted):
        return wanted
    failure = _try_pull(client, wanted)
    if failure is None:
        progress(f"pulled {wanted}")
        return wanted
    if base:
        raise ImageBuildFailed(
            f"base image {base} is not present and cannot be pulled: {failure}",
            hint="use --offline to build the base from Debian packages",
        )
    progress(f"registry base {wanted} unavailable ({failure}); using the offline base")
    return ensure_offline_base(client, progress, mirror)


def _download_wheels(
    root: Path, wheels: Path, arch: str, progress: Progress, extra: str = ""
) -> str:
    """Put this project's wheel, its dependencies (with ``extra``, such as "[host]")
    and pip's wheel into ``wheels``."""
    import importlib.util

    platforms = _PLATFORMS.get(arch)
    if platforms is None:
        raise ImageBuildFailed(
            f"unsupported engine architecture {arch!r}", hint=f"supported: {', '.join(_PLATFORMS)}"
        )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # Without hatchling here, pip fetches it into an isolated build environment.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    progress("building the orchestrator wheel")
    _run(
        [*pip, "wheel", "-q", "--no-deps", *isolation, "-w", str(wheels), str(root)],
        "building the orchestrator wheel",
    )
    project_wheel = next(wheels.glob("orchestrator-*.whl"))
    progress(f"downloading dependency wheels for Python {PYTHON_VERSION} ({arch})")
    platform_args = [arg for p in platforms for arg in ("--platform", p)]
    download = [
        *pip,
        "download",
        "-q",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        *platform_args,
        "--find-links",
        str(wheels),
        "-d",
        str(wheels),
        f"{project_wheel}{extra}",
        "pip",
    ]
    built: set[str] = set()
    while (missing := _missing_wheel(download)) is not None:
        # a dependency published as source only: its wheel is built here, once, and
        # taken only when it is pure Python (one wheel for every platform)
        if missing in built or len(built) >= SOURCE_ONLY_DEPENDENCIES_MAX:
            raise ImageBuildFailed(
                f"downloading wheels failed: no wheel of {missing} for Python "
                f"{PYTHON_VERSION} ({arch}), and none could be built from its source",
                hint="check that PyPI is reachable from this host",
            )
        built.add(missing)
        progress(f"building a wheel of {missing} from its source (it publishes none)")
        _run([*pip, "wheel", "-q", "--no-deps", "-w", str(wheels), missing], f"building {missing}")
        impure = [w.name for w in wheels.glob("*.whl") if not w.name.endswith("-none-any.whl")]
        made = [n for n in impure if n.lower().startswith(_wheel_prefix(missing))]
        if made:
            raise ImageBuildFailed(
                f"{missing} publishes no wheel for Python {PYTHON_VERSION} ({arch}), and the "
                f"one built here is not pure Python ({made[0]})"
            )
    pip_wheel = next(wheels.glob("pip-*.whl"), None)
    if pip_wheel is None:
        raise ImageBuildFailed("pip's wheel was not downloaded")
    progress(f"{len(list(wheels.glob('*.whl')))} wheels ready")
    return pip_wheel.name


SOURCE_ONLY_DEPENDENCIES_MAX = 8  # dependencies without wheels built here before giving up


def _missing_wheel(download: list[str]) -> str | None:
    """Run ``download``; None when it succeeded, else the requirement pip found no wheel
    for (ImageBuildFailed for any other failure)."""
    import re
    import subprocess

    result = subprocess.run(download, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode == 0:
        return None
    found = re.search(r"No matching distribution found for (\S+)", result.stderr)
    if found is not None:
        return found[1]
    tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
    raise ImageBuildFailed(
        f"downloading wheels failed: {' | '.join(tail)}",
        hint="check that PyPI is reachable from this host",
    )


def _wheel_prefix(requirement: str) -> str:
    """The start of a wheel's file name for ``requirement`` (its name, normalized)."""
    import re

    name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "_", name).lower() + "-"


def _run(cmd: list[str], what: str) -> None:
    import subprocess

    result = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise ImageBuildFailed(
            f"{what} failed: {' | '.join(tail)}", hint="check that PyPI is reachable from this host"
        )


def agent_tag(repository: str, digest: str) -> str:
    return f"{repository}:{digest[:12]}"


def base_identity(client: docker.DockerClient, ref: str) -> str:
    """What the base image is made of: the offline base's recipe, or a registry
    reference with its digest when the engine knows one."""
    from orchestrator.image.recipe import BASE_REPOSITORY, recipe_hash

    if ref.startswith(BASE_REPOSITORY + ":"):
        return f"offline:{recipe_hash()}"
    from docker.errors import ImageNotFound

    try:
        image = call_engine(f"inspect {ref}", lambda: client.images.get(ref))
    except ImageNotFound:
        return f"registry:{ref}"
    digests = sorted(image.attrs.get("RepoDigests") or [])
    return f"registry:{ref}@{digests[0].partition('@')[2]}" if digests else f"registry:{ref}"


def current_agent_image(
    client: docker.DockerClient, repository: str
) -> tuple[str | None, str | None]:
    """(tag of the image matching today's inputs or None, the base it was or would be
    built on, or None). Looks only at images already present: never pulls, builds or
    reaches the network. The base image itself need not be present any more."""
    root = source_root()
    from orchestrator.image.recipe import base_tag

    candidates = [REGISTRY_BASE] if _image_id(client, REGISTRY_BASE) else []
    candidates.append(base_tag())
    for base in candidates:
        tag = agent_tag(repository, inputs.inputs_hash(root, base_identity(client, base)))
        if _image_id(client, tag):
            return tag, base
    present = [b for b in candidates if _image_id(client, b)]
    return None, (present[0] if present else None)


def agent_image_ref(client: docker.DockerClient, repository: str) -> str:
    """The tag containers should run: the image built from the current sources.

    Outside a source checkout (an installed distribution), ``<repository>:latest``.
    """
    from orchestrator.errors import ImageMissing

    try:
        tag, _ = current_agent_image(client, repository)
    except ImageBuildFailed:
        latest = f"{repository}:latest"
        if _image_id(client, latest):
            return latest
        tag = None
    if tag is None:
        raise ImageMissing(
            "no agent image matches the current sources; build it with: orchestrator image build",
            hint="run: orchestrator image build",
        )
    return tag


def build_agent_image(
    client: docker.DockerClient,
    repository: str,
    *,
    base: str | None = None,
    offline: bool = False,
    force: bool = False,
    progress: Progress = lambda _: None,
    mirror: str | None = None,
) -> BuildResult:
    """Build (or find current) the agent image; see the module docstring."""
    root = source_root()
    if offline and base is None and not force:
        from docker.errors import ImageNotFound

        def inspect(ref: str) -> dict[str, Any] | None:
            try:
                image = call_engine(f"inspect {ref}", lambda: client.images.get(ref))
            except ImageNotFound:
                return None
            return dict(image.attrs)

        known = recorded_noop(repository, inspect)
        if known is not None:
            return known
    base_ref = resolve_base(client, base=base, offline=offline, progress=progress, mirror=mirror)
    if _image_id(client, base_ref) is None:
        raise ImageBuildFailed(f"base image {base_ref} vanished during the build")
    digest = inputs.inputs_hash(root, base_identity(client, base_ref))
    tag = agent_tag(repository, digest)
    existing = _image_id(client, tag)
    if existing and not force:
        call_engine("tag image", lambda: client.api.tag(existing, repository, "latest"))
        result = BuildResult(tag, existing, digest, base_ref, built=False)
    else:
        image_id = _build_from(client, root, "agent", tag, base_ref, digest, progress)
        call_engine("tag image", lambda: client.api.tag(image_id, repository, "latest"))
        _prune_old(client, repository, keep=tag, progress=progress)
        result = BuildResult(tag, image_id, digest, base_ref, built=True)
    _record(root, repository, offline and base is None, result)
    return result


def _build_from(
    client: docker.DockerClient,
    root: Path,
    role: str,
    tag: str,
    base_ref: str,
    digest: str,
    progress: Progress,
    extra: str = "",
) -> str:
    """Build images/<role>/ as ``tag`` on ``base_ref``: wheels (with ``extra``)
    downloaded here, the build itself without network. The new image's id."""
    import shutil
    import tempfile

    progress(f"building {tag} on {base_ref}")
    with tempfile.TemporaryDirectory(prefix="orchestrator-image-") as tmp:
        context = Path(tmp)
        shutil.copytree(root / "images" / role, context, dirs_exist_ok=True)
        wheels = context / "wheels"
        wheels.mkdir()
        arch = str(call_engine("engine info", client.info).get("Architecture", "x86_64"))
        pip_wheel = _download_wheels(root, wheels, arch, progress, extra=extra)
        return _docker_build(client, context, tag, base_ref, pip_wheel, digest, progress, role)


def _docker_build(
    client: docker.DockerClient,
    context: Path,
    tag: str,
    base_ref: str,
    pip_wheel: str,
    digest: str,
    progress: Progress,
    role: str = "agent",
) -> str:
    from docker.errors import APIError

    _repository, _, _version = tag.partition(":")
    try:
        stream = client.api.build(
            path=str(context),
            tag=tag,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            network_mode="none",
            buildargs={"BASE_IMAGE": base_ref, "PIP_WHEEL": pip_wheel},
            labels={
                ROLE_LABEL: role,
                INPUTS_LABEL: digest,
                SOURCE_LABEL: source_identity(source_root()),
                VERSION_LABEL: orchestrator.__version__,
            },
        )
        image_id = None
        for chunk in stream:
            if "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                raise ImageBuildFailed(f"docker build of {tag} failed: {detail.strip()}")
            line = str(chunk.get("stream", "")).rstrip()
            if line.startswith("Step "):
                progress(f"  {line}")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and "ID" in aux:
                image_id = aux["ID"]
    except APIError as exc:
        raise ImageBuildFailed(f"docker build of {tag} failed: {exc.explanation}") from None
    if image_id is None:
        found = _image_id(client, tag)
        if found is None:
            raise ImageBuildFailed(f"docker build of {tag} produced no image")
        image_id = found
    return str(image_id)


def source_identity(root: Path) -> str:
    """The checkout an image is built from, as its images are labelled."""
    return hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]


def _prune_old(client: docker.DockerClient, repository: str, keep: str, progress: Progress) -> None:
    """Drop older agent-image tags of this repository built from this checkout; images in
    use, and those of another checkout (which a daemon of its own may still start
    containers from), are left alone."""
    from docker.errors import APIError

    mine = f"{SOURCE_LABEL}={source_identity(source_root())}"
    for image in client.images.list(
        name=repository, filters={"label": [f"{ROLE_LABEL}=agent", mine]}
    ):
        for old in image.tags:
            if old.startswith(f"{repository}:") and old not in (keep, f"{repository}:latest"):
                try:
                    client.images.remove(old)
                    progress(f"removed old image {old}")
                except (APIError, OrchestratorError):
                    pass


DAEMON_REPOSITORY = "orchestrator-daemon"


def daemon_inputs_hash(root: Path, base_identity_: str) -> str:
    digest = hashlib.sha256(b"daemon\n")
    digest.update(inputs.inputs_hash(root, base_identity_).encode())
    digest.update(hashlib.sha256((root / "images/daemon/Dockerfile").read_bytes()).digest())
    return digest.hexdigest()


def build_daemon_image(
    client: docker.DockerClient,
    *,
    base: str | None = None,
    offline: bool = False,
    force: bool = False,
    progress: Progress = lambda _: None,
    mirror: str | None = None,
) -> BuildResult:
    """Build (or find current) the daemon image, as the agent image is built: the same
    base, wheels downloaded on the host (with the host extra), no network in the build."""
    root = source_root()
    base_ref = resolve_base(client, base=base, offline=offline, progress=progress, mirror=mirror)
    digest = daemon_inputs_hash(root, base_identity(client, base_ref))
    tag = agent_tag(DAEMON_REPOSITORY, digest)
    existing = _image_id(client, tag)
    if existing and not force:
        call_engine("tag image", lambda: client.api.tag(existing, DAEMON_REPOSITORY, "latest"))
        return BuildResult(tag, existing, digest, base_ref, built=False)
    image_id = _build_from(client, root, "daemon", tag, base_ref, digest, progress, "[host]")
    call_engine("tag image", lambda: client.api.tag(image_id, DAEMON_REPOSITORY, "latest"))
    return BuildResult(tag, image_id, digest, base_ref, built=True)
