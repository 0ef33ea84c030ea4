"""OpenAI-compatible Chat Completions (OpenAI, Ollama, vLLM, llama.cpp server, LM
Studio), through the official SDK, streamed.

Tool calls map both ways: the runner's tool calls become ``tool_calls`` of assistant
messages (arguments as JSON text, ``content`` an empty string: some servers refuse
null), its tool results ``tool`` messages. Streamed tool-call deltas are merged by
index: the name is taken from the first delta that has one (servers such as
llama-cpp-python repeat it in every delta), the argument fragments are joined. Servers
that report no usage get an estimate of four characters a token, so budgets still hold.
Images the host attached (``relay.images``) make a user message's content a list of a
``text`` part and ``image_url`` parts (data URLs); a tool result's images follow it in a
user message (a tool message takes text only).
"""

from __future__ import annotations

import contextlib
import functools
import json
import socket
import time
from collections.abc import Iterable, Iterator
from typing import Any

from orchestrator.relay.providers.base import (
    CLOSER,
    STOP_CUT,
    STOP_END,
    STOP_TOOLS,
    Deadline,
    HostProvider,
    ModelAnswer,
    ModelCall,
    ProviderFailure,
    TextSink,
    UntilDeadline,
    sdk_failure,
    stop_reason,
)


def to_openai(call: ModelCall) -> dict[str, Any]:
    """The request body (less model and stream) for a runner request."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": call.system}]
    for message in call.messages:
        role = message.get("role")
        content = message.get("content")
        images = [_image_part(i) for i in message.get("image_data") or []]
        if role == "user":
            if images:
                messages.append(
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": str(content or "")}, *images],
                    }
                )
            else:
                messages.append({"role": "user", "content": str(content or "")})
        elif role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": str(content or "")}
            calls = message.get("tool_calls") or []
            if calls:
                out["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {
                            "name": c["name"],
                            "arguments": json.dumps(c.get("arguments") or {}, ensure_ascii=False),
                        },
                    }
                    for c in calls
                ]
            messages.append(out)
        elif role == "tool":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": message.get("tool_call_id"),
                    "content": str(content or ""),
                }
            )
            if images:  # a tool message takes text only: its images follow as the user's
                messages.append(
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "(the images of the tool result above)"},
                            *images,
                        ],
                    }
                )
    body: dict[str, Any] = {"messages": messages}
    if call.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["parameters"],
                },
            }
            for t in call.tools
        ]
    return body


def request_body(call: ModelCall, *, model: str, max_tokens: int, stream: bool) -> dict[str, Any]:
    """The body of the chat completions request for ``call``; a stream's asks for the
    usage in its last chunk."""
    body = {"model": model, "max_tokens": max_tokens, **to_openai(call)}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def _image_part(image: dict[str, str]) -> dict[str, Any]:
    """An image the host re-encoded, as a Chat Completions ``image_url`` part (a data
    URL: the only form every OpenAI-compatible server takes)."""
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{image['media_type']};base64,{image['base64']}"},
    }


def read_completion(completion: dict[str, Any], call: ModelCall | None = None) -> ModelAnswer:
    """An answer from a whole (not streamed) chat completion."""
    chunks: list[dict[str, Any]] = []
    for choice in completion.get("choices") or []:
        message = choice.get("message") or {}
        calls = [
            {"index": i, "id": c.get("id"), "function": c.get("function") or {}}
            for i, c in enumerate(message.get("tool_calls") or [])
        ]
        chunks.append(
            {
                "choices": [
                    {
                        "delta": {"content": message.get("content"), "tool_calls": calls},
                        "finish_reason": choice.get("finish_reason") or "stop",
                    }
                ]
            }
        )
    chunks.append(
        {"choices": [], "usage": completion.get("usage"), "timings": completion.get("timings")}
    )
    return read_stream(chunks, call)


def read_stream(
    chunks: Iterable[dict[str, Any]],
    call: ModelCall | None = None,
    *,
    deadline: Deadline | None = None,
    on_text: TextSink | None = None,
) -> ModelAnswer:
    """Assemble a streamed answer from its chunks (as plain dicts). Text goes to
    ``on_text`` as it arrives; at ``deadline`` reading stops and the text so far comes
    back cut (tool calls not finished are dropped)."""
    texts: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None
    finish = None
    seen = 0
    reading = UntilDeadline(chunks, deadline, getattr(chunks, "close", None))

    def cut() -> ModelAnswer:
        text = "".join(texts)
        return ModelAnswer(
            text or None, [], _estimate(call), -(-len(text) // 4), STOP_CUT, _server_ms(timings)
        )

    for chunk in reading:
        seen += 1
        if chunk.get("usage"):
            usage = chunk["usage"]
        if isinstance(chunk.get("timings"), dict):
            timings = chunk["timings"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                texts.append(str(delta["content"]))
                if on_text is not None:
                    on_text(str(delta["content"]))
            for part in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    int(part.get("index") or 0), {"id": "", "name": "", "args": ""}
                )
                if part.get("id") and not slot["id"]:
                    slot["id"] = str(part["id"])
                function = part.get("function") or {}
                if function.get("name") and not slot["name"]:
                    slot["name"] = str(function["name"])  # once: a repeat is not appended
                if function.get("arguments"):
                    slot["args"] += str(function["arguments"])
            finish = choice.get("finish_reason") or finish
        if deadline is not None and finish is None and deadline.passed():
            return cut()
    if reading.timed_out and finish is None:
        return cut()
    if not seen:
        raise ProviderFailure("the answer was malformed: no chunks in the stream", retryable=True)
    if finish is None:
        raise ProviderFailure("the stream ended before the answer did", retryable=True)
    tool_calls = []
    for index in sorted(calls):
        slot = calls[index]
        try:
            arguments = json.loads(slot["args"]) if slot["args"].strip() else {}
        except ValueError:
            arguments = {"_unparsed_arguments": slot["args"]}
        if not isinstance(arguments, dict):
            arguments = {"_unparsed_arguments": slot["args"]}
        tool_calls.append(
            {"id": slot["id"] or f"call_{index}", "name": slot["name"], "arguments": arguments}
        )
    text = "".join(texts)
    cached = 0
    if usage is not None:
        # prompt_tokens counts the cached part too (prompt_tokens_details.cached_tokens)
        details = usage.get("prompt_tokens_details") or {}
        cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        input_tokens = max(int(usage.get("prompt_tokens") or 0) - cached, 0)
        output_tokens = int(usage.get("completion_tokens") or 0)
    else:  # some servers report none: estimate, so budgets hold
        input_tokens = _estimate(call)
        output_tokens = -(-(len(text) + sum(len(c["args"]) for c in calls.values())) // 4)
    reason = stop_reason(finish)
    if tool_calls and reason == STOP_END:
        reason = STOP_TOOLS  # some servers end a tool call with "stop"
    return ModelAnswer(
        text or None,
        tool_calls,
        input_tokens,
        output_tokens,
        reason,
        _server_ms(timings),
        cache_read_tokens=cached,
    )


def _estimate(call: ModelCall | None) -> int:
    """Tokens of a request, estimated at four characters a token."""
    sent = len(json.dumps(to_openai(call), ensure_ascii=False)) if call is not None else 0
    return -(-sent // 4)


def _server_ms(timings: dict[str, Any] | None) -> float | None:
    """The server's own time for the answer (llama.cpp's ``timings``), in ms."""
    if not timings:
        return None
    try:
        return float(timings.get("prompt_ms") or 0) + float(timings.get("predicted_ms") or 0)
    except (TypeError, ValueError):
        return None


# How long the rest of a stream's body may take after its [DONE] (normally it is there
# already: the end of the chunked body comes with [DONE] or right after it)
DRAIN_SECONDS = 0.5


@functools.cache
def _chunks_class(sdk: Any) -> Any:
    """The SDK's stream of chunks as plain dicts, read to the end of the body.

    The SDK stops reading at [DONE] and closes the response, and a response closed
    before its body's end takes its connection down with it: every streamed call
    made a new connection (to a remote API, a TCP and TLS handshake each). Here what
    follows [DONE] is read first, so the connection goes back to the client's pool. A
    server that keeps the body open longer than DRAIN_SECONDS has its connection shut
    (the read waiting on it ends: closing the response from another thread would not
    end it) and the answer is whole all the same."""

    class Chunks(sdk.Stream[dict[str, Any]]):  # type: ignore[misc]
        def _iter_events(self) -> Iterator[Any]:
            events = super()._iter_events()  # the SDK's own, with its error mapping
            for event in events:
                if event.data.startswith("[DONE]"):
                    _drain(events, self.response)
                yield event

    return Chunks


def _drain(events: Iterator[Any], response: Any) -> None:
    """Read ``events`` to their end, for at most DRAIN_SECONDS; an error ends it (the
    answer is whole: only the connection is lost, as it was without the drain)."""
    network = response.extensions.get("network_stream")
    sock = network.get_extra_info("socket") if network is not None else None
    if not isinstance(sock, socket.socket):
        return  # no way to bound the wait: the connection goes, as the SDK leaves it

    def cut() -> None:
        with contextlib.suppress(OSError):
            # the descriptor only (an SSL socket's own shutdown() would drop its state
            # under the reading thread)
            socket.socket.shutdown(sock, socket.SHUT_RDWR)

    timer = CLOSER.at(time.monotonic() + DRAIN_SECONDS, cut)
    try:
        for _ in events:
            pass
    except Exception:  # the answer is whole: only the connection is lost
        pass
    finally:
        CLOSER.cancel(timer)


class OpenAIProvider(HostProvider):
    def __init__(self, definition: Any, key: str | None) -> None:
        super().__init__(definition, key)
        import openai

        self.sdk = openai
        # A server that needs no key gets a placeholder: the SDK insists on one.
        self.client = openai.OpenAI(api_key=key or "none", base_url=definition.url, max_retries=0)

    def complete(
        self,
        call: ModelCall,
        *,
        model: str,
        timeout: float,
        deadline: Deadline | None = None,
        on_text: TextSink | None = None,
    ) -> ModelAnswer:
        from openai.types.chat import ChatCompletion

        sdk = self.sdk
        streaming = self.definition.stream
        body = request_body(call, model=model, max_tokens=self.max_tokens(call), stream=streaming)
        # The SDK's documented low-level post(): the body we built goes out as it is.
        # create() would first walk every message through its typed-parameter transform,
        # about 0.4 ms a message: 250 ms a call for a long conversation.
        # the call's timeout as a request option: with_options() would copy the client
        client = self.client
        try:
            if not streaming:
                whole = client.post(
                    "/chat/completions",
                    body=body,
                    options={"timeout": timeout},
                    cast_to=ChatCompletion,
                )
                return read_completion(whole.model_dump(), call)
            # Chunks as plain dicts: no model object built (and dumped again) per chunk.
            stream = client.post(
                "/chat/completions",
                options={"timeout": timeout},
                body=body,
                cast_to=ChatCompletion,
                stream=True,
                stream_cls=_chunks_class(sdk),
            )
            with stream:  # closed on leaving: a cut stream stops the server's work
                return read_stream(stream, call, deadline=deadline, on_text=on_text)
        except Exception as exc:
            failure = sdk_failure(self, sdk, exc, _detail)
            if failure is exc:
                raise
            raise failure from None


def _detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(getattr(exc, "message", exc))
