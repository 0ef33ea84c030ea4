"""Connecting to the Docker engine, with one clear line when it does not answer.

Transient engine faults (connection refused or reset, timeouts, HTTP 5xx) are retried
with bounded exponential backoff; 4xx answers are final and reported as they are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.errors import EngineError, EngineUnreachable
from orchestrator.limits import ENGINE_RETRY_ATTEMPTS, ENGINE_RETRY_MAX_WAIT_SECONDS
from orchestrator.runtime.direct import DEFAULT_SOCKET

if TYPE_CHECKING:
    import docker

log = logging.getLogger(__name__)
T = TypeVar("T")
API_TIMEOUT_SECONDS = 60


def engine_endpoint() -> str:
    """What a connection would try: $DOCKER_HOST, or the default socket."""
    host = os.environ.get("DOCKER_HOST")
    return f"DOCKER_HOST={host}" if host else f"the default socket {DEFAULT_SOCKET}"


def _root_cause(exc: object) -> str:
    """The innermost OS-level reason of a connection failure, in a few words."""
    text = str(exc)
    for needle, words in (
        ("FileNotFoundError", "no such socket"),
        ("No such file or directory", "no such socket"),
        ("ConnectionRefusedError", "connection refused"),
        ("Connection refused", "connection refused"),
        ("PermissionError", "permission denied"),
        ("Permission denied", "permission denied"),
        ("timed out", "timed out"),
    ):
        if needle in text:
            return words
    return _short(exc)


def unreachable(reason: object) -> EngineUnreachable:
    return EngineUnreachable(
        f"Docker engine unreachable at {engine_endpoint()}: {_root_cause(reason)}",
        hint="start the engine (systemctl start docker), or set DOCKER_HOST to its socket",
    )


def _short(reason: object) -> str:
    text = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
    return text if len(text) < 200 else text[:197] + "..."


def connect(timeout: int = API_TIMEOUT_SECONDS) -> docker.DockerClient:
    """A client for the engine named by the environment, after a successful ping."""
    import docker
    from docker.errors import DockerException

    host = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    if host.startswith("unix://") and not os.path.exists(host.removeprefix("unix://")):
        raise unreachable("no such socket")
    # Probe with an old fixed API version first: version="auto" leaks its socket when the
    # engine is away, and the SDK's default version is newer than many engines accept.
    try:
        probe = docker.APIClient(version="1.24", timeout=timeout, **_env_kwargs())
    except DockerException as exc:
        raise unreachable(exc) from None
    try:
        probe.ping()
        api_version = str(probe.version(api_version=False)["ApiVersion"])
    except (DockerException, OSError, KeyError) as exc:
        raise unreachable(exc) from None
    finally:
        probe.close()
    return docker.DockerClient(version=api_version, timeout=timeout, **_env_kwargs())


def _env_kwargs() -> dict[str, Any]:
    from docker.utils import kwargs_from_env

    return dict(kwargs_from_env())


def is_transient(exc: BaseException) -> bool:
    """Faults worth retrying: the engine was away or overloaded, not a refusal."""
    import requests
    from docker.errors import APIError

    if isinstance(exc, APIError):
        return exc.status_code is not None and exc.status_code >= 500
    return isinstance(
        exc, requests.ConnectionError | requests.Timeout | ConnectionError | TimeoutError
    )


def call_engine(what: str, fn: Callable[[], T], *, attempts: int = ENGINE_RETRY_ATTEMPTS) -> T:
    """Run one engine call, retrying transient faults; map final errors to ours."""
    import tenacity
    from docker.errors import APIError, DockerException, NotFound

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "engine call %s failed (%s); retry %d of %d",
            what,
            _short(exc),
            state.attempt_number,
            attempts - 1,
        )

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=0.25, max=ENGINE_RETRY_MAX_WAIT_SECONDS),
        retry=tenacity.retry_if_exception(is_transient),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(fn)
    except NotFound:
        raise
    except APIError as exc:
        if is_transient(exc):
            raise unreachable(exc) from None
        raise EngineError(f"engine refused {what}: {_explain(exc)}") from None
    except DockerException as exc:
        raise unreachable(exc) from None
    except OSError as exc:
        raise unreachable(exc) from None
    except Exception as exc:
        if is_transient(exc):
            raise unreachable(exc) from None
        raise


def _explain(exc: Any) -> str:
    explanation = getattr(exc, "explanation", None) or str(exc)
    status = getattr(exc, "status_code", None)
    return f"{explanation} (HTTP {status})" if status else str(explanation)


def inspect_image_directly(ref: str, timeout: float = 10.0) -> dict[str, Any] | None:
    """``GET /images/<ref>/json`` straight over the engine's Unix socket (see
    ``orchestrator.runtime.direct``). None when the engine says the image is missing;
    EngineUnreachable when the engine is not on a Unix socket or does not answer as it
    should (the caller then takes the SDK's path)."""
    from orchestrator.runtime.direct import DirectFailed, inspect_image

    try:
        return inspect_image(ref, timeout)
    except DirectFailed as exc:
        raise unreachable(exc) from None
