"""The Anthropic Messages API, through the official SDK, streamed.

Tool calls map both ways: the runner's assistant tool calls become ``tool_use`` blocks,
its tool results ``tool_result`` blocks in a user message; streamed ``input_json_delta``
fragments are joined into each call's arguments. Images the host attached
(``relay.images``) become ``image`` blocks with a base64 source, after the text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from orchestrator.relay.providers.base import (
    STOP_CUT,
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


def to_anthropic(call: ModelCall) -> dict[str, Any]:
    """The request body (less model, max_tokens and stream) for a runner request."""
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:  # roles must alternate
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for message in call.messages:
        role = message.get("role")
        content = message.get("content")
        images = [_image_block(i) for i in message.get("image_data") or []]
        if role == "user":
            add("user", [{"type": "text", "text": str(content or "")}, *images])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if content:
                blocks.append({"type": "text", "text": str(content)})
            for tool_call in message.get("tool_calls") or []:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": tool_call["id"],
                        "name": tool_call["name"],
                        "input": tool_call.get("arguments") or {},
                    }
                )
            add("assistant", blocks or [{"type": "text", "text": "(no reply)"}])
        elif role == "tool":
            result: str | list[dict[str, Any]] = str(content or "")
            if images:  # a tool result may carry images beside its text
                result = [{"type": "text", "text": result or "(image)"}, *images]
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": message.get("tool_call_id"),
                        "content": result,
                    }
                ],
            )
    if messages and messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": "(start)"}]})
    body: dict[str, Any] = {"system": call.system, "messages": messages}
    if call.tools:
        body["tools"] = [
            {"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
            for t in call.tools
        ]
    return body


def _image_block(image: dict[str, str]) -> dict[str, Any]:
    """An image the host re-encoded, as a Messages API image block."""
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": image["media_type"], "data": image["base64"]},
    }


def read_message(message: dict[str, Any]) -> ModelAnswer:
    """An answer from a whole (not streamed) Messages API response."""
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for index, block in enumerate(message.get("content") or []):
        start = dict(block)
        if start.get("type") == "tool_use":
            start["json"] = json.dumps(start.get("input") or {})
        events.append({"type": "content_block_start", "index": index, "content_block": start})
    events.append({"type": "message_delta", "delta": {"stop_reason": message.get("stop_reason")}})
    events.append({"type": "message_stop"})
    return read_stream(events)


def read_stream(
    events: Iterable[dict[str, Any]],
    *,
    deadline: Deadline | None = None,
    on_text: TextSink | None = None,
) -> ModelAnswer:
    """Assemble a streamed answer from its events (as plain dicts). Text goes to
    ``on_text`` as it arrives; at ``deadline`` reading stops and the text so far comes
    back cut (tool calls not finished are dropped)."""
    texts: list[str] = []
    blocks: dict[int, dict[str, Any]] = {}
    input_tokens = output_tokens = cache_read = cache_write = 0
    raw_stop = None
    finished = False
    seen = 0
    reading = UntilDeadline(events, deadline, getattr(events, "close", None))

    def cut() -> ModelAnswer:
        text = "".join(
            str(b.get("text", "")) for _, b in sorted(blocks.items()) if b.get("type") == "text"
        )
        return ModelAnswer(
            text or None,
            [],
            input_tokens,
            output_tokens,
            STOP_CUT,
            cache_read_tokens=cache_read,
            cache_write_tokens=cache_write,
        )

    for event in reading:
        seen += 1
        kind = event.get("type")
        if kind == "message_start":
            usage = (event.get("message") or {}).get("usage") or {}
            input_tokens = int(usage.get("input_tokens") or 0)
            output_tokens = int(usage.get("output_tokens") or 0)
            cache_read = int(usage.get("cache_read_input_tokens") or 0)
            cache_write = int(usage.get("cache_creation_input_tokens") or 0)
        elif kind == "content_block_start":
            block = dict(event.get("content_block") or {})
            block.setdefault("json", "")
            blocks[int(event.get("index", len(blocks)))] = block
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            block = blocks.setdefault(int(event.get("index", 0)), {"type": "text", "json": ""})
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + str(delta.get("text", ""))
                if on_text is not None and delta.get("text"):
                    on_text(str(delta["text"]))
            elif delta.get("type") == "input_json_delta":
                block["json"] += str(delta.get("partial_json", ""))
        elif kind == "message_delta":
            # the final counts (cumulative); input and cache counts only where it repeats them
            usage = event.get("usage") or {}
            output_tokens = int(usage.get("output_tokens") or output_tokens)
            input_tokens = int(usage.get("input_tokens") or input_tokens)
            cache_read = int(usage.get("cache_read_input_tokens") or cache_read)
            cache_write = int(usage.get("cache_creation_input_tokens") or cache_write)
            raw_stop = (event.get("delta") or {}).get("stop_reason") or raw_stop
        elif kind == "message_stop":
            finished = True
        elif kind == "error":
            error = event.get("error") or {}
            raise ProviderFailure(
                f"the stream reported an error: {error.get('message', error)}", retryable=True
            )
        if deadline is not None and not finished and deadline.passed():
            return cut()
    if reading.timed_out and not finished:
        return cut()
    if not seen:
        raise ProviderFailure("the answer was malformed: no events in the stream", retryable=True)
    if not finished:
        raise ProviderFailure("the stream ended before the message did", retryable=True)
    calls = []
    for index in sorted(blocks):
        block = blocks[index]
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            raw = block["json"]
            try:
                arguments = json.loads(raw) if raw.strip() else dict(block.get("input") or {})
            except ValueError:
                arguments = {"_unparsed_arguments": raw}
            if not isinstance(arguments, dict):
                arguments = {"_unparsed_arguments": raw}
            calls.append(
                {"id": str(block.get("id")), "name": str(block.get("name")), "arguments": arguments}
            )
    text = "".join(texts)
    return ModelAnswer(
        text or None,
        calls,
        input_tokens,
        output_tokens,
        stop_reason(raw_stop),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )


class AnthropicProvider(HostProvider):
    def __init__(self, definition: Any, key: str | None) -> None:
        super().__init__(definition, key)
        import anthropic

        self.sdk = anthropic
        self.client = anthropic.Anthropic(
            api_key=key or "none", base_url=definition.url, max_retries=0
        )

    def complete(
        self,
        call: ModelCall,
        *,
        model: str,
        timeout: float,
        deadline: Deadline | None = None,
        on_text: TextSink | None = None,
    ) -> ModelAnswer:
        from anthropic.types import Message

        sdk = self.sdk
        body = {"model": model, "max_tokens": self.max_tokens(call), **to_anthropic(call)}
        # The SDK's documented low-level post(): the body we built goes out as it is,
        # without create()'s per-message typed-parameter transform.
        # the call's timeout as a request option: with_options() would copy the client
        client = self.client
        try:
            if not self.definition.stream:
                whole = client.post(
                    "/v1/messages", body=body, options={"timeout": timeout}, cast_to=Message
                )
                return read_message(whole.model_dump())
            # Events as plain dicts: no model object built (and dumped again) per event.
            stream = client.post(
                "/v1/messages",
                options={"timeout": timeout},
                body={**body, "stream": True},
                cast_to=Message,
                stream=True,
                stream_cls=sdk.Stream[dict[str, Any]],
            )
            with stream:  # closed on leaving: a cut stream stops the server's work
                return read_stream(stream, deadline=deadline, on_text=on_text)
        except Exception as exc:
            failure = sdk_failure(self, sdk, exc, _detail)
            if failure is exc:
                raise
            raise failure from None


def _detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(getattr(exc, "message", exc))
