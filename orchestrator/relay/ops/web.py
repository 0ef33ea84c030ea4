"""``web.fetch`` and ``web.search``: the web, fetched by the host for a group, under its
policy (group.yaml ``web``).

The host decides from its own record of the turn: the policy must be enabled and open to
the sender's trust, and the group under its hourly count. A page passes the guard at
every hop (``orchestrator.web.guard``); a search goes to the backend the operator defined
(orchestrator.yaml ``web_search``), with its key read here. Each request is logged and
counted in ``usage`` (purpose ``web``). What comes back is others' words: marked so for
the model, and the turn's conversation then holds learned-behavior writes for a
creator's approval. A refusal is an answer for the model, not a failed turn.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from orchestrator import protocol
from orchestrator.errors import OrchestratorError
from orchestrator.relay.errors import RelayViolation
from orchestrator.relay.ops.base import FixedCap
from orchestrator.store.usage import FAILED, OK, REFUSED, WEB, Call

if TYPE_CHECKING:
    from orchestrator.relay.turn import TurnRelay

log = logging.getLogger("orchestrator.web")
QUERY_MAX_CHARS = 400


class Refused(Exception):
    pass


def _allowed(turn: TurnRelay, what: str) -> None:
    web, message = turn.group.config.web, turn.message
    if not web.enabled:
        raise Refused(f"{what} is off for this group (group.yaml web.enabled)")
    if not web.open_to(message.trust):
        raise Refused(f"{what} is not open to a {message.trust}'s turn in this group")
    used = turn.context.usage.web_since(turn.group.folder, time.time() - 3600)
    if used >= web.max_fetches_per_hour:
        raise Refused(
            f"this group made {used} web requests in the last hour, its limit "
            "(web.max_fetches_per_hour); try later"
        )


def _record(
    turn: TurnRelay,
    model: str,
    started: float,
    outcome: str,
    error: str | None,
    cost: float | None = None,
) -> None:
    turn.context.usage.record(
        Call(
            message_id=turn.message.id,
            group=turn.group.folder,
            provider=WEB,
            model=model,
            purpose=WEB,
            started=started,
            latency_ms=(time.time() - started) * 1000,
            input_tokens=0,
            output_tokens=0,
            outcome=outcome,
            error=error,
            cost=cost,
            currency=turn.context.config.currency if cost is not None else None,
        )
    )


class WebFetch(FixedCap):
    name = protocol.WEB_FETCH

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        from orchestrator.web.fetch import FetchFailed, fetch
        from orchestrator.web.guard import Refused as GuardRefused

        url = frame.get("url")
        if not isinstance(url, str):
            raise RelayViolation("web.fetch needs a url")
        started = time.time()
        folder = turn.group.folder
        try:
            _allowed(turn, "web_fetch")
        except Refused as exc:
            _record(turn, "fetch", started, REFUSED, str(exc))
            return {"ok": False, "error": str(exc)}
        seconds = min(turn.context.web.timeout, max(turn.deadline - time.monotonic() - 1, 0))
        if seconds < 1:
            return {"ok": False, "error": "the turn's time is up: no fetch can start now"}
        try:
            page = fetch(
                url,
                turn.group.config.web.rules(),
                resolver=turn.context.web.resolver,
                connector=turn.context.web.connector,
                timeout=seconds,
            )
        except (GuardRefused, FetchFailed) as exc:
            refused = isinstance(exc, GuardRefused)
            log.info("group %s: web_fetch %s %s: %s", folder, "refused" if refused else
                     "failed", url[:200], exc)  # fmt: skip
            _record(turn, "fetch", started, REFUSED if refused else FAILED, str(exc)[:500])
            return {"ok": False, "error": f"{'refused' if refused else 'failed'}: {exc}"}
        turn.context.queue.mark_others_words(turn.message.id)
        _record(turn, "fetch", started, OK, None)
        log.info("group %s: web_fetch by %r: %s -> %s (%d, %s, %d bytes%s)", folder,
                 turn.message.sender, url[:200], page.url[:200], page.status, page.content_type,
                 page.downloaded, ", cut" if page.cut else "")  # fmt: skip
        return {"ok": True, "result": page.text}


class WebSearch(FixedCap):
    name = protocol.WEB_SEARCH

    def handle(self, turn: TurnRelay, frame: dict[str, Any]) -> dict[str, Any]:
        from orchestrator.web.search import SearchFailed, render_results, search

        query = frame.get("query")
        if not isinstance(query, str) or not query.strip() or len(query) > QUERY_MAX_CHARS:
            return {"ok": False, "error": f"give a query of 1 to {QUERY_MAX_CHARS} characters"}
        started = time.time()
        folder = turn.group.folder
        try:
            _allowed(turn, "web_search")
            backends = turn.context.config.web_search
            name = turn.group.config.web.search or (
                next(iter(backends)) if len(backends) == 1 else None
            )
            if name is None or name not in backends:
                raise Refused(
                    "no search backend for this group (group.yaml web.search names one of "
                    f"orchestrator.yaml web_search: {', '.join(sorted(backends)) or 'none'})"
                )
        except Refused as exc:
            _record(turn, "search", started, REFUSED, str(exc))
            return {"ok": False, "error": str(exc)}
        backend = backends[name]
        try:
            key = backend.key.resolve(f"web_search.{name}", turn.context.config.secrets_file)
            results = search(backend, query.strip(), key)
        except (SearchFailed, OrchestratorError) as exc:
            message = exc.message if isinstance(exc, OrchestratorError) else str(exc)
            log.warning("group %s: web_search on %s failed: %s", folder, name, message)
            _record(turn, f"search:{name}", started, FAILED, message[:500])
            return {"ok": False, "error": f"the search failed: {message}"}
        turn.context.queue.mark_others_words(turn.message.id)
        _record(turn, f"search:{name}", started, OK, None, backend.price)
        log.info("group %s: web_search by %r on %s: %d results", folder, turn.message.sender,
                 name, len(results))  # fmt: skip
        return {"ok": True, "result": render_results(name, results)}
