"""An offline build of the agent image with nothing to do, known from the last build
recorded and one inspect of its tag: the inputs are hashed from their stats, the base's
recipe computed here, and nothing of the build, the engine's SDK or the CLI is loaded.

``orchestrator image build --offline`` asks here first (from the console script, before
the CLI is imported), and so does every offline build; whatever this cannot answer for
certain (no record, a changed input, another image under the tag, a home whose
orchestrator.yaml was not read whole since it last changed, settings from the
environment) goes the full way, which reports any problem."""

from __future__ import annotations

import os
import sys

from orchestrator.image.inputs import InputsCache, Recorded, inputs_hash
from orchestrator.image.recipe import recipe_hash

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# the image repository a home uses when its orchestrator.yaml names none (or it has none):
# the configuration's default (orchestrator.config imports nothing of images)
DEFAULT_IMAGE_REPOSITORY = "orchestrator-agent"
CONFIG_FILE = "orchestrator.yaml"
# environment settings the configuration checks; with any set, the full way reads them
_CONFIG_ENV = (
    "ORCHESTRATOR_HTTP_TOKEN",
    "ORCHESTRATOR_HTTP_LISTEN",
    "ORCHESTRATOR_HOST_HOME",
    "ORCHESTRATOR_PROJECT",
)


def checkout_root() -> str | None:
    """The source checkout this package runs from, or None outside one."""
    import orchestrator

    root = os.path.dirname(os.path.dirname(os.path.realpath(orchestrator.__file__)))
    if os.path.isfile(os.path.join(root, "pyproject.toml")) and os.path.isfile(
        os.path.join(root, "images", "agent", "Dockerfile")
    ):
        return root
    return None


def offline_request(repository: str) -> str:
    """How a build asked for is remembered: its repository, the offline base, the engine."""
    engine = os.environ.get("DOCKER_HOST") or "default"
    return f"{repository} offline {engine}"


def recorded(
    root: str, repository: str, inspect: Callable[[str], dict[str, Any] | None]
) -> Recorded | None:
    """The recorded offline build of ``repository`` from the checkout ``root`` when it is
    still current (its inputs unchanged, its tag the image it made and ``:latest`` on
    it), asking ``inspect`` about that one tag; else None."""
    found = InputsCache(root).recorded(offline_request(repository))
    if found is None:
        return None
    if inputs_hash(root, f"offline:{recipe_hash()}") != found.inputs_hash:
        return None
    attrs = inspect(found.tag)
    if not attrs or attrs.get("Id") != found.image_id:
        return None
    if f"{repository}:latest" not in (attrs.get("RepoTags") or []):
        return None
    return found


def home_repository(root: str, home: str) -> str | None:
    """The image repository the home at ``home`` uses, when known without reading its
    configuration: the default when it has no orchestrator.yaml, else the one recorded
    when that same file was last read whole and found valid; None otherwise."""
    if any(os.environ.get(name) for name in _CONFIG_ENV):
        return None
    config_file = os.path.join(home, CONFIG_FILE)
    if not os.path.lexists(config_file):
        return DEFAULT_IMAGE_REPOSITORY
    return InputsCache(root).config_repository(config_file)


def remember_home(home: str, repository: str) -> None:
    """Record that the home's orchestrator.yaml, as it is now, was read whole and found
    valid, naming ``repository`` (outside a checkout, nothing is recorded)."""
    root = checkout_root()
    if root is not None:
        remember_home_in(root, home, repository)


def remember_home_in(root: str, home: str, repository: str) -> None:
    """As remember_home, in the cache of the checkout ``root``."""
    cache = InputsCache(root)
    cache.record_config(os.path.join(home, CONFIG_FILE), repository)
    cache.save()


def answer_from_console(args: list[str], root: str | None = None) -> bool:
    """For ``image build --offline`` with nothing to do, print what the CLI prints and
    return True; False when the CLI must answer (any other arguments, or anything this
    cannot know for certain). ``root``: the checkout (default: this package's)."""
    if args != ["image", "build", "--offline"]:
        return False
    from orchestrator.runtime.direct import DirectFailed, inspect_image

    root = root or checkout_root()
    if root is None:
        return False
    # as the CLI's --home: the environment's, else the current folder, made absolute
    # (not normalized: "link/.." is where the link leads, as the CLI reads it)
    home = os.environ.get("ORCHESTRATOR_HOME") or os.getcwd()
    if not os.path.isabs(home):
        home = os.path.join(os.getcwd(), home)
    try:
        repository = home_repository(root, home)
        if repository is None:
            return False
        found = recorded(root, repository, inspect_image)
    except (OSError, DirectFailed):
        return False
    if found is None:
        return False
    sys.stdout.write(f"{found.tag} is up to date (base {found.base}); nothing to build\n")
    sys.stdout.flush()
    return True
