"""The host's side of a model provider: one call in, one answer out.

Adapters turn the runner's request (plain JSON: system, messages with tool calls and
results, tool specs) into a provider's API, consume its stream, and hand back text, tool
calls and token counts. Failures become ProviderFailure, marked retryable or not, with
anything that looks like the key removed from their text.
"""

from __future__ import annotations

import abc
import email.utils
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.providers import ProviderDef


@dataclass(frozen=True)
class ModelCall:
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)  # name, description, parameters
    purpose: str = "turn"


@dataclass(frozen=True)
class ModelAnswer:
    text: str | None
    tool_calls: list[dict[str, Any]]  # id, name, arguments (a mapping)
    input_tokens: int
    output_tokens: int
    stop_reason: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": self.tool_calls,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
        }


class ProviderFailure(Exception):
    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.retryable = retryable

    def __str__(self) -> str:
        return self.message


class HostProvider(abc.ABC):
    """One configured provider; made once per daemon and used by every group."""

    def __init__(self, definition: ProviderDef, key: str | None) -> None:
        self.definition = definition
        self.key = key

    @abc.abstractmethod
    def complete(self, call: ModelCall, *, model: str, timeout: float) -> ModelAnswer:
        """One completion within ``timeout`` seconds; ProviderFailure when it fails."""

    def close(self) -> None:
        """Release the client's connections."""
        client = getattr(self, "client", None)
        if client is not None:
            client.close()

    def scrub(self, text: str) -> str:
        """``text`` with the key (and any long prefix of it) taken out."""
        if self.key and len(self.key) >= 4:
            text = text.replace(self.key, "[key]")
            if len(self.key) > 12:
                text = text.replace(self.key[:12], "[key]")
        return text


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Retry-After as seconds (it may be a number or an HTTP date), or None."""
    if not headers:
        return None
    value = headers.get("retry-after") or headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def status_failure(
    provider: HostProvider, status: int, headers: Mapping[str, str] | None, detail: str
) -> ProviderFailure:
    """A failure for an HTTP error answer: 429 and 5xx are worth retrying."""
    retryable = status == 429 or status >= 500
    name = provider.definition.name
    return ProviderFailure(
        provider.scrub(f"provider {name!r} answered HTTP {status}: {detail}"[:500]),
        status=status,
        retry_after=retry_after_seconds(headers),
        retryable=retryable,
    )


def sdk_failure(
    provider: HostProvider, sdk: Any, exc: BaseException, detail: Callable[[Any], str]
) -> ProviderFailure:
    """The failure for what a vendor SDK (anthropic's, openai's: the same exception
    classes) raised: an HTTP error answer, no answer (worth retrying), or an answer its
    parser gave up on (a malformed one, worth retrying)."""
    name = provider.definition.name
    if isinstance(exc, ProviderFailure):
        exc.message = provider.scrub(exc.message)
        return exc
    if isinstance(exc, sdk.APIStatusError):
        return status_failure(provider, exc.status_code, exc.response.headers, detail(exc))
    if isinstance(exc, sdk.APITimeoutError | sdk.APIConnectionError):
        return ProviderFailure(
            provider.scrub(f"provider {name!r} unreachable: {exc}"), retryable=True
        )
    return ProviderFailure(
        provider.scrub(
            f"provider {name!r} sent a malformed answer: {type(exc).__name__}: {exc}"[:500]
        ),
        retryable=True,
    )
