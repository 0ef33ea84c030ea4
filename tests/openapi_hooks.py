"""Schemathesis hooks for the HTTP API's contract test (tests/test_openapi_contract_docker.py),
loaded by the ``schemathesis run`` process through SCHEMATHESIS_HOOKS.

The setup file named by CONTRACT_SETUP (JSON) says what the test seeded in the daemon's
home: the messages (with their files) each token may and may not read, the chats and
groups, the bridge's sender prefix, and whether this run is the bridge's. With it:

- the fuzzing phase's path parameters are mostly the real ones (a random message id
  never exists, so without them a read of another's message would never be tried);
- before each call, half the bridge's senders are given its prefix (else it is refused
  before anything is stored), the operator's channels are the daemon's (any string is
  one to the description, as any string is a group's name), and a long poll's ``wait``
  is cut to a second (a message still in a turn would hold the run for up to a minute;
  long polls have tests of their own);
- every response is appended to the run's log (JSON lines), which the test reads;
- ``bridge_stays_within_its_senders`` fails the run when the bridge's token reads or
  writes anything outside its senders.
"""

from __future__ import annotations

import json
import os
import threading
import zlib
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import strategies as st

SETUP: dict[str, Any] = json.loads(Path(os.environ["CONTRACT_SETUP"]).read_text())
PREFIX: str = SETUP["prefix"]
BRIDGE_RUN: bool = SETUP["bridge_run"]
FOREIGN: set[str] = set(SETUP["foreign"])  # messages the bridge may not read
LOG = Path(SETUP["log"])
_LOG_LOCK = threading.Lock()


def _known_path_parameters(operation: object) -> st.SearchStrategy[dict[str, Any]] | None:
    """Path parameters naming what the home holds, for ``operation`` (None for an
    operation without path parameters)."""
    groups = st.sampled_from(SETUP["groups"])
    messages = st.sampled_from(list(SETUP["files"]))  # in the order seeded: the same every run
    if operation == "sendMessage":
        return st.fixed_dictionaries({"name": groups})
    if operation == "chatMessages":
        return st.fixed_dictionaries({"name": groups, "chat": st.sampled_from(SETUP["chats"])})
    if operation == "getMessage":
        return st.fixed_dictionaries({"id": messages})
    if operation == "getFile":
        return messages.flatmap(
            lambda mid: st.fixed_dictionaries(
                {"id": st.just(mid), "seq": st.sampled_from([*SETUP["files"][mid], 7])}
            )
        )
    return None


@schemathesis.hook
def before_generate_path_parameters(
    context: schemathesis.HookContext, strategy: st.SearchStrategy[dict[str, Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    operation = context.operation
    if operation is None:
        return strategy
    known = _known_path_parameters(operation.definition.raw.get("operationId"))
    # three in four name what is there (the coverage phase tries the odd names)
    return strategy if known is None else st.one_of(known, known, known, strategy)


HALF = ["as is", "prefixed"]


def _pick(value: str, choices: list[str]) -> str:
    """One of ``choices`` for ``value``, the same every run (no randomness of ours)."""
    return choices[zlib.crc32(value.encode("utf-8", "surrogatepass")) % len(choices)]


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: Any, kwargs: dict[str, Any]) -> None:
    """Cut a long poll's wait to a second; give the operator's channels the daemon's names
    and half the bridge's senders its prefix. Schemathesis judges the case again after
    (a value made valid, or invalid, is counted as such)."""
    query = case.query
    if isinstance(query, dict) and "wait" in query:
        try:
            wait = float(query["wait"])
        except (TypeError, ValueError):
            wait = 0.0  # not a number: the API refuses it at once
        if wait > 1:
            case.query = {**query, "wait": 1}
    body = case.body
    if not isinstance(body, dict):
        return
    if not BRIDGE_RUN and isinstance(body.get("channel"), str):
        case.body = {**body, "channel": _pick(body["channel"], SETUP["channels"])}
    sender = body.get("sender")
    if BRIDGE_RUN and isinstance(sender, str) and sender and _pick(sender, HALF) == "prefixed":
        case.body = {**body, "sender": PREFIX + sender}


@schemathesis.hook
def after_call(context: schemathesis.HookContext, case: Any, response: Any) -> None:
    try:
        body: Any = json.loads(response.content)
    except ValueError:
        body = None
    record = {
        "operation": case.operation.definition.raw.get("operationId"),
        "method": response.request.method,
        "url": response.request.url,
        "path_parameters": case.path_parameters,
        "request": case.body if isinstance(case.body, dict) else None,
        "status": response.status_code,
        "body": body,
    }
    with _LOG_LOCK, LOG.open("a") as log:
        log.write(json.dumps(record, default=str) + "\n")


def _message_id(case: Any) -> str | None:
    parameters = case.path_parameters or {}
    value = parameters.get("id")
    return value if isinstance(value, str) else None


@schemathesis.check
def bridge_stays_within_its_senders(ctx: Any, response: Any, case: Any) -> bool | None:
    """The bridge's token never names, nor reads, a sender outside its prefix."""
    if not BRIDGE_RUN or response.request.headers.get("Authorization") is None:
        return None
    status = response.status_code
    operation = case.operation.definition.raw.get("operationId")
    try:
        body: Any = json.loads(response.content)
    except ValueError:
        body = None
    if operation == "sendMessage" and status in (200, 202):  # 200: sent with ?wait
        sender = case.body.get("sender") if isinstance(case.body, dict) else None
        if not (isinstance(sender, str) and sender.startswith(PREFIX)):
            raise AssertionError(f"the bridge queued a message as {sender!r}")
    if operation in ("getMessage", "getFile") and _message_id(case) in FOREIGN and status < 400:
        raise AssertionError(f"the bridge read message {_message_id(case)} (HTTP {status})")
    reads_one = (
        operation in ("getMessage", "sendMessage") and status == 200 and isinstance(body, dict)
    )
    if reads_one and not str(body.get("sender")).startswith(PREFIX):
        raise AssertionError(f"the bridge read a message of {body.get('sender')!r}")
    if operation == "chatMessages" and status == 200 and isinstance(body, dict):
        for message in body.get("messages", []):
            if message.get("id") in FOREIGN or not str(message.get("sender")).startswith(PREFIX):
                raise AssertionError(
                    f"the bridge saw message {message.get('id')} of {message.get('sender')!r}"
                )
    return None
