"""The host's side of a model provider: one call in, one answer out.

Adapters turn the runner's request (plain JSON: system, messages with tool calls and
results, tool specs) into a provider's API, consume its stream, and hand back text, tool
calls and token counts. Failures become ProviderFailure, marked retryable or not, with
anything that looks like the key removed from their text.
"""

from __future__ import annotations

import abc
import contextlib
import email.utils
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.config.providers import ProviderDef
from orchestrator.redact import mask

# Why an answer stopped, in one vocabulary whatever the provider says: its end, its
# length limit (max_tokens), tool calls, or the turn's deadline (the stream was cut).
STOP_END, STOP_LENGTH, STOP_TOOLS, STOP_CUT = "end", "length", "tool_calls", "cut"
_STOP_REASONS = {
    "stop": STOP_END,
    "end_turn": STOP_END,
    "stop_sequence": STOP_END,
    "length": STOP_LENGTH,
    "max_tokens": STOP_LENGTH,
    "tool_calls": STOP_TOOLS,
    "tool_use": STOP_TOOLS,
    "function_call": STOP_TOOLS,
}


def stop_reason(raw: object) -> str | None:
    """A provider's finish or stop reason in the vocabulary above (unknown ones kept)."""
    if raw is None:
        return None
    return _STOP_REASONS.get(str(raw), str(raw))


@dataclass(frozen=True)
class ModelCall:
    system: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)  # name, description, parameters
    purpose: str = "turn"
    max_tokens: int | None = None  # the call's own cap on its answer (a summary's)


# Where the text of an answer goes while it streams (the chat, in pieces).
TextSink = Callable[[str], None]


@dataclass(frozen=True)
class ModelAnswer:
    text: str | None
    tool_calls: list[dict[str, Any]]  # id, name, arguments (a mapping)
    input_tokens: int
    output_tokens: int
    stop_reason: str | None = None  # STOP_END, STOP_LENGTH, STOP_TOOLS, STOP_CUT, or other
    # the server's own time, in ms, when it says (llama.cpp's timings): prompt, answer
    server_ms: float | None = None
    # prompt tokens read from the provider's cache, and written to it (beside input_tokens,
    # which counts the rest of the prompt: each kind has a price of its own)
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __post_init__(self) -> None:
        # a count below zero (a server's bug, or a hostile one) would lower what the
        # group is charged, and let a call past its caps: it counts as none
        for count in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            if getattr(self, count) < 0:
                object.__setattr__(self, count, 0)

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt, cached parts included (what fills the context window)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def cut(self) -> bool:
        return self.stop_reason == STOP_CUT

    def to_wire(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": self.tool_calls,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": self.output_tokens},
            "stop_reason": self.stop_reason,
        }


class ProviderFailure(Exception):
    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool = False,
        overflow: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.retryable = retryable
        # the request did not fit the model's context window: compacting may help
        self.overflow = overflow

    def __str__(self) -> str:
        return self.message


# HTTP answers worth trying again: a timeout, a conflict, a rate limit, a server error.
RETRYABLE_STATUS = frozenset({408, 409, 429})

# How each kind of server says a request is over the model's context window.
_OVERFLOW_TYPES = frozenset({"exceed_context_size_error", "context_length_exceeded"})
_OVERFLOW_TEXTS = (
    "exceeds the available context size",  # llama.cpp
    "maximum context length",  # OpenAI
    "prompt is too long",  # Anthropic
    "context length exceeded",
    "context window",
)


def is_overflow(status: int, body: object, text: str) -> bool:
    """Whether an error answer says the request is over the context window (llama.cpp's
    ``exceed_context_size_error``, OpenAI's ``context_length_exceeded``, Anthropic's
    "prompt is too long")."""
    if status not in (400, 413):
        return False
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and (
        error.get("type") in _OVERFLOW_TYPES or error.get("code") in _OVERFLOW_TYPES
    ):
        return True
    lowered = text.lower()
    return any(marker in lowered for marker in _OVERFLOW_TEXTS)


class Deadline:
    """The turn's deadline, for a stream: ``passed()`` is checked between chunks (the
    SDK's timeout covers only the gap between two of them)."""

    def __init__(self, at: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.at = at
        self.clock = clock

    def passed(self) -> bool:
        return self.clock() >= self.at

    def left(self) -> float:
        return self.at - self.clock()


# a stream whose read fails this close to its deadline (or after it) was cut by it: the
# SDK's read timeout is the time left, so a gap between two chunks ends there
DEADLINE_SLACK_SECONDS = 0.25


class _Closer:
    """One thread that closes streams at their deadlines, for every stream of the
    daemon (a timer thread per model call would cost more than the rest of the call).
    A cancelled stream is forgotten at once; its place in the queue is dropped when due."""

    def __init__(self) -> None:
        import threading

        self._cond = threading.Condition()
        self._due: list[tuple[float, int]] = []  # (when, handle), a heap
        self._closes: dict[int, Callable[[], object]] = {}  # handle -> close, until due
        self._count = 0
        self._thread: threading.Thread | None = None

    def at(self, when: float, close: Callable[[], object]) -> int:
        """Call ``close`` at ``when`` (time.monotonic()); a handle for ``cancel``."""
        import heapq
        import threading

        with self._cond:
            self._count += 1
            heapq.heappush(self._due, (when, self._count))
            self._closes[self._count] = close
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="stream-closer", daemon=True)
                self._thread.start()
            self._cond.notify()
            return self._count

    def cancel(self, handle: int) -> None:
        with self._cond:
            self._closes.pop(handle, None)

    def _run(self) -> None:
        import heapq

        while True:
            with self._cond:
                while not self._due or self._due[0][0] > time.monotonic():
                    wait = self._due[0][0] - time.monotonic() if self._due else None
                    self._cond.wait(wait)
                _, handle = heapq.heappop(self._due)
                close = self._closes.pop(handle, None)
            if close is not None:
                with contextlib.suppress(Exception):  # a stream that cannot close has ended
                    close()


CLOSER = _Closer()


class UntilDeadline:
    """The chunks of a stream until its deadline, wherever reading is then: ``close``
    (the stream's own) is called at the deadline from a timer, so a read waiting for the
    next chunk ends there too, and the iteration ends with ``timed_out`` instead of the
    read's error. A slow stream is cut at the deadline like a fast one, not failed, and
    its text so far reaches the chat before the turn's end."""

    def __init__(
        self,
        chunks: Iterable[dict[str, Any]],
        deadline: Deadline | None,
        close: Callable[[], object] | None = None,
    ) -> None:
        self.chunks = chunks
        self.deadline = deadline
        self.close = close
        self.timed_out = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        timer = None
        if self.deadline is not None and self.close is not None:
            timer = CLOSER.at(time.monotonic() + max(self.deadline.left(), 0.0), self.close)
        try:
            iterator = iter(self.chunks)
            while True:
                try:
                    chunk = next(iterator)
                except StopIteration:
                    return
                except Exception:
                    if self.deadline is None or self.deadline.left() > DEADLINE_SLACK_SECONDS:
                        raise
                    self.timed_out = True
                    return
                yield chunk
        finally:
            if timer is not None:
                CLOSER.cancel(timer)


class HostProvider(abc.ABC):
    """One configured provider; made once per daemon and used by every group."""

    def __init__(self, definition: ProviderDef, key: str | None) -> None:
        self.definition = definition
        self.key = key

    @abc.abstractmethod
    def complete(
        self,
        call: ModelCall,
        *,
        model: str,
        timeout: float,
        deadline: Deadline | None = None,
        on_text: TextSink | None = None,
    ) -> ModelAnswer:
        """One completion within ``timeout`` seconds; ProviderFailure when it fails. A
        stream still going at ``deadline`` is closed: the answer so far comes back with
        stop reason STOP_CUT. ``on_text`` is given the answer's text as it streams."""

    def max_tokens(self, call: ModelCall) -> int:
        """The cap on this call's answer: the provider's, lowered by the call's own."""
        cap = self.definition.max_tokens
        return min(cap, call.max_tokens) if call.max_tokens else cap

    def close(self) -> None:
        """Release the client's connections."""
        client = getattr(self, "client", None)
        if client is not None:
            client.close()

    def scrub(self, text: str) -> str:
        """``text`` with the key (and any long prefix of it) taken out."""
        if self.key and len(self.key) >= 4:
            return mask(text, (self.key, self.key[:12]), "key")
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
    provider: HostProvider,
    status: int,
    headers: Mapping[str, str] | None,
    detail: str,
    body: object = None,
) -> ProviderFailure:
    """A failure for an HTTP error answer: 408, 409, 429 and 5xx are worth retrying; an
    answer that the request is over the context window says so (``overflow``)."""
    retryable = status in RETRYABLE_STATUS or status >= 500
    name = provider.definition.name
    return ProviderFailure(
        provider.scrub(f"provider {name!r} answered HTTP {status}: {detail}"[:500]),
        status=status,
        retry_after=retry_after_seconds(headers),
        retryable=retryable,
        overflow=is_overflow(status, body, detail),
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
        return status_failure(
            provider, exc.status_code, exc.response.headers, detail(exc), getattr(exc, "body", None)
        )
    if isinstance(exc, sdk.APITimeoutError):
        return ProviderFailure(
            provider.scrub(f"provider {name!r} did not answer within the turn's time: {exc}"),
            retryable=True,
        )
    if isinstance(exc, sdk.APIConnectionError):
        return ProviderFailure(
            provider.scrub(f"provider {name!r} unreachable: {exc}"), retryable=True
        )
    return ProviderFailure(
        provider.scrub(
            f"provider {name!r} sent a malformed answer: {type(exc).__name__}: {exc}"[:500]
        ),
        retryable=True,
    )
