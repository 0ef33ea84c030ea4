"""OpenAI-compatible Chat Completions (OpenAI, Ollama, vLLM, llama.cpp server, LM
Studio), through the official SDK, streamed.

Tool calls map both ways: the runner's tool calls become ``tool_calls`` of assistant
messages (arguments as JSON text), its tool results ``tool`` messages; streamed
argument fragments are joined per call index. Servers that report no usage get an
estimate of four characters a token, so budgets still hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from orchestrator.relay.providers.base import (
    HostProvider,
    ModelAnswer,
    ModelCall,
    ProviderFailure,
    sdk_failure,
)


def to_openai(call: ModelCall) -> dict[str, Any]:
    """The request body (less model and stream) for a runner request."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": call.system}]
    for message in call.messages:
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            messages.append({"role": "user", "content": str(content or "")})
        elif role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": content or None}
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
            elif out["content"] is None:
                out["content"] = ""
            messages.append(out)
        elif role == "tool":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": message.get("tool_call_id"),
                    "content": str(content or ""),
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
    chunks.append({"choices": [], "usage": completion.get("usage")})
    return read_stream(chunks, call)


def read_stream(chunks: Iterable[dict[str, Any]], call: ModelCall | None = None) -> ModelAnswer:
    """Assemble a streamed answer from its chunks (as plain dicts)."""
    texts: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage: dict[str, Any] | None = None
    finish = None
    seen = 0
    for chunk in chunks:
        seen += 1
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                texts.append(str(delta["content"]))
            for part in delta.get("tool_calls") or []:
                slot = calls.setdefault(
                    int(part.get("index") or 0), {"id": "", "name": "", "args": ""}
                )
                if part.get("id"):
                    slot["id"] = str(part["id"])
                function = part.get("function") or {}
                if function.get("name"):
                    slot["name"] += str(function["name"])
                if function.get("arguments"):
                    slot["args"] += str(function["arguments"])
            finish = choice.get("finish_reason") or finish
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
    if usage is not None:
        input_tokens = int(usage.get("prompt_tokens") or 0)
        output_tokens = int(usage.get("completion_tokens") or 0)
    else:  # some servers report none: estimate, so budgets hold
        sent = len(json.dumps(to_openai(call), ensure_ascii=False)) if call is not None else 0
        input_tokens = -(-sent // 4)
        output_tokens = -(-(len(text) + sum(len(c["args"]) for c in calls.values())) // 4)
    return ModelAnswer(text or None, tool_calls, input_tokens, output_tokens, finish)


class OpenAIProvider(HostProvider):
    def __init__(self, definition: Any, key: str | None) -> None:
        super().__init__(definition, key)
        import openai

        self.sdk = openai
        # A server that needs no key gets a placeholder: the SDK insists on one.
        self.client = openai.OpenAI(api_key=key or "none", base_url=definition.url, max_retries=0)

    def complete(self, call: ModelCall, *, model: str, timeout: float) -> ModelAnswer:
        from openai.types.chat import ChatCompletion

        sdk = self.sdk
        body = {"model": model, "max_tokens": self.definition.max_tokens, **to_openai(call)}
        # The SDK's documented low-level post(): the body we built goes out as it is.
        # create() would first walk every message through its typed-parameter transform,
        # about 0.4 ms a message: 250 ms a call for a long conversation.
        client = self.client.with_options(timeout=timeout)
        try:
            if not self.definition.stream:
                whole = client.post("/chat/completions", body=body, cast_to=ChatCompletion)
                return read_completion(whole.model_dump(), call)
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            # Chunks as plain dicts: no model object built (and dumped again) per chunk.
            stream = client.post(
                "/chat/completions",
                body=body,
                cast_to=ChatCompletion,
                stream=True,
                stream_cls=sdk.Stream[dict[str, Any]],
            )
            with stream:
                return read_stream(stream, call)
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
