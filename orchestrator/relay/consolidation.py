"""Memory consolidation on the host (orchestrator.memory.consolidate says what a run
does): the group's ``background`` model asked through the host's provider adapter (the
key never leaves the host) within the group's budgets, each call recorded in usage with
the purpose ``background``; the run's writes made with the group paused, so that no turn
writes memory meanwhile, as one change of its memory history.

``run_consolidation`` is what ``orchestrator memory consolidate`` calls, and what a
scheduler calls once a day for a group whose ``group.yaml`` says ``memory.consolidate:
daily``. A group whose provider is ``offline`` has no host model: its run promotes the
facts its notes repeat on two days or more, without one.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from orchestrator.agent import notes
from orchestrator.config import OrchestratorConfig, load_config
from orchestrator.config.providers import resolve_key
from orchestrator.groups import Group
from orchestrator.home import Home
from orchestrator.limits import (
    CONSOLIDATE_DEFAULT_DAYS,
    PAUSE_SLACK_SECONDS,
    RELAY_PROVIDER_ATTEMPTS,
)
from orchestrator.memory import consolidate
from orchestrator.memory.history import History
from orchestrator.money import Tokens, cost_of, day_start, month_start, worst_cost
from orchestrator.protocol import OFFLINE
from orchestrator.relay.budget import budget_refusal, cost_refusal
from orchestrator.relay.providers import adapter_for
from orchestrator.relay.providers.base import STOP_LENGTH, HostProvider, ModelCall, ProviderFailure
from orchestrator.relay.retry import call_with_retries
from orchestrator.secrets import MissingSecret
from orchestrator.store.messages import MessageQueue, open_queue
from orchestrator.store.usage import FAILED, OK, REFUSED, Call, UsageStore, utc_midnight

# the rules memory flushes sort lines by: a fact they call a duplicate is one here too
FACTS = consolidate.FactRules(notes.normalize, notes.same_fact, notes.is_fact, notes.ATTRIBUTION)
PURPOSE = "background"  # the group.yaml models key, and the purpose usage records
PAUSE_HOLDER = "memory-consolidate"


class BackgroundModel:
    """The group's ``background`` model (``models.background`` in group.yaml, else the
    chat's pair) as a consolidation's ``complete``: each call checked against the
    group's budgets (requests a minute, tokens a run and a day, money caps) before it is
    made, retried on transient failures within the group's ``turn_timeout``, and
    recorded in ``usage`` (tokens by kind, cost, latency, outcome) under ``run_id``.

    ``adapters`` gives a provider's client by name (a daemon's RelayContext.adapter);
    without it the client is made here from orchestrator.yaml, and closed by ``close``.
    ConsolidationError when the provider is not defined; MissingSecret when its key
    cannot be found: both before anything is read or asked.
    """

    def __init__(
        self,
        config: OrchestratorConfig,
        group: Group,
        usage: UsageStore,
        *,
        adapters: Callable[[str], HostProvider] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.group = group
        self.usage = usage
        self.clock = clock
        self.choice = group.config.model_for(PURPOSE)
        self.run_id = f"consolidation-{uuid.uuid4().hex[:12]}"
        self.calls = 0
        self.tokens = Tokens()
        self.cost: float | None = None
        self.prices = config.prices_of(self.choice.provider, self.choice.model)
        definition = config.providers.get(self.choice.provider)
        if definition is None:
            raise consolidate.ConsolidationError(
                f"groups/{group.folder}/group.yaml: the background model's provider "
                f"{self.choice.provider!r} is not defined in orchestrator.yaml; nothing was "
                "changed",
                hint="define it (orchestrator provider add), or set models.background in "
                "group.yaml to a provider that is",
            )
        self._own: HostProvider | None = None
        try:
            if adapters is not None:
                self.adapter = adapters(self.choice.provider)
            else:
                key = resolve_key(definition, config.secrets_file)
                self.adapter = self._own = adapter_for(definition, key)
        except MissingSecret as exc:
            self._record(FAILED, self.clock(), 0.0, None, exc.message)
            raise

    @property
    def label(self) -> str:
        return f"{self.choice.provider}/{self.choice.model}"

    def __call__(self, system: str, messages: list[dict[str, Any]], max_tokens: int) -> str:
        limits = self.group.config.limits
        cap = min(limits.max_tokens, max_tokens)
        now = self.clock()
        refusal = self._refusal(system, messages, cap, now)
        if refusal is not None:
            self._record(REFUSED, now, 0.0, None, refusal)
            raise consolidate.ConsolidationError(
                f"the background model was not asked: {refusal}; nothing was changed"
            )
        call = ModelCall(system, messages, purpose=PURPOSE, max_tokens=cap)
        started = time.monotonic()
        try:
            answer = call_with_retries(
                lambda timeout: self.adapter.complete(
                    call, model=self.choice.model, timeout=timeout
                ),
                started + self.group.config.turn_timeout_seconds,
                attempts=RELAY_PROVIDER_ATTEMPTS,
                on_failure=lambda failure: self._record(
                    FAILED, now, (time.monotonic() - started) * 1000, None, str(failure)
                ),
            )
        except ProviderFailure as exc:
            raise consolidate.ConsolidationError(
                f"the background model ({self.label}) failed: {exc}; nothing was changed"
            ) from None
        tokens = Tokens(
            answer.input_tokens,
            answer.output_tokens,
            answer.cache_read_tokens,
            answer.cache_write_tokens,
        )
        self._record(OK, now, (time.monotonic() - started) * 1000, tokens, None)
        if answer.stop_reason == STOP_LENGTH:
            raise consolidate.ConsolidationError(
                f"the background model's answer was cut at {cap:,} tokens; nothing was changed",
                hint="raise limits.max_tokens in group.yaml, or consolidate fewer days (--days)",
            )
        return answer.text or ""

    def _refusal(
        self, system: str, messages: list[dict[str, Any]], cap: int, now: float
    ) -> str | None:
        """Why the call may not be made under the group's budgets, or None."""
        folder, limits = self.group.folder, self.group.config.limits
        refusal = budget_refusal(
            limits,
            requests_last_minute=self.usage.requests_since(folder, now - 60),
            tokens_this_turn=self.usage.tokens_of_message(self.run_id),
            tokens_today=self.usage.tokens_since(folder, utc_midnight(now)),
        )
        if refusal is not None or not limits.capped:
            return refusal
        if self.prices is None:
            return "the model has no prices in orchestrator.yaml, so the money cap cannot be kept"
        zone = self.group.config.timezone
        chars = len(system) + sum(len(str(m.get("content", ""))) for m in messages)
        found = cost_refusal(
            limits,
            spent_today=self.usage.cost_since(folder, day_start(now, zone)),
            spent_this_month=self.usage.cost_since(folder, month_start(now, zone)),
            worst=worst_cost(self.prices, chars, cap),
            currency=self.config.currency,
        )
        return found[1] if found is not None else None

    def _record(
        self, outcome: str, started: float, latency: float, tokens: Tokens | None, error: str | None
    ) -> None:
        tokens = tokens or Tokens()
        cost = cost_of(self.prices, tokens)
        if outcome == OK:
            self.calls += 1
            self.tokens = Tokens(
                self.tokens.input + tokens.input,
                self.tokens.output + tokens.output,
                self.tokens.cache_read + tokens.cache_read,
                self.tokens.cache_write + tokens.cache_write,
            )
            if cost is not None:
                self.cost = (self.cost or 0.0) + cost
        self.usage.record(
            Call.priced(
                self.run_id,
                self.group.folder,
                self.choice.provider,
                self.choice.model,
                PURPOSE,
                started,
                latency,
                tokens,
                outcome,
                error,
                prices=self.prices,
                currency=self.config.currency,
            )
        )

    def summary(self) -> dict[str, object]:
        """The run's use of the model, for its report."""
        return {
            "usage_id": self.run_id,
            "provider": self.choice.provider,
            "model": self.choice.model,
            "calls": self.calls,
            "input_tokens": self.tokens.input,
            "output_tokens": self.tokens.output,
            "cache_read_tokens": self.tokens.cache_read,
            "cache_write_tokens": self.tokens.cache_write,
            "cost": self.cost,
            "currency": self.config.currency if self.cost is not None else None,
        }

    def close(self) -> None:
        if self._own is not None:
            self._own.close()


def run_consolidation(
    home: Home,
    group: Group,
    *,
    dry_run: bool = False,
    days: int = CONSOLIDATE_DEFAULT_DAYS,
    complete: consolidate.Complete | None = None,
    usage: UsageStore | None = None,
    queue: MessageQueue | None = None,
    config: OrchestratorConfig | None = None,
    adapters: Callable[[str], HostProvider] | None = None,
    sender: str = "",
    progress: Callable[[int], None] | None = None,
    now: float | None = None,
) -> consolidate.Report:
    """Consolidate ``group``'s daily notes of the last ``days`` days (the group's days:
    its ``timezone``) into its core memory, and say what was done.

    ``complete`` is the model to ask (a fake, in tests); by default the group's
    background model (a BackgroundModel on ``adapters``, its calls recorded in
    ``usage``), or for a group whose provider is ``offline`` none: facts repeated on two
    days go to memory/notes/recurring.md. The writes happen with the group paused under
    ``queue`` (its turns in flight finished first, ``progress`` hearing how many still
    run); ``queue`` and ``usage`` are the home's own, opened here, when not given.
    ``sender`` names who asked in the history (the CLI: ``operator``). ``dry_run``
    writes nothing (a model is still asked, and its call recorded).

    Blocks for up to the group's ``turn_timeout`` twice (the model's answer, the turns
    in flight): call it off a dispatching thread. NoNotes when the days hold no note;
    ConsolidationError (nothing changed) for a malformed answer, a refused budget, a
    failed model, or a target the confined file layer refuses; MissingSecret when the
    provider's key cannot be found.
    """
    config = config or load_config(home)
    when = time.time() if now is None else now
    zone = group.config.timezone
    today = datetime.fromtimestamp(when, ZoneInfo(zone)).date()
    history = History(home.groups_dir, group.folder, config.history_max_file_bytes)
    choice = group.config.model_for(PURPOSE)
    stack = contextlib.ExitStack()  # what this call opens, closed however it ends
    try:
        background: BackgroundModel | None = None
        if complete is None and group.config.provider != OFFLINE:
            if usage is None:
                if queue is None:
                    queue = stack.enter_context(contextlib.closing(open_queue(home)))
                usage = stack.enter_context(contextlib.closing(UsageStore(queue.path)))
            background = stack.enter_context(
                contextlib.closing(BackgroundModel(config, group, usage, adapters=adapters))
            )
            complete = background
        report = consolidate.prepare(
            home.groups_dir,
            group.folder,
            facts=FACTS,
            today=today,
            days=days,
            complete=complete,
            model=f"{choice.provider}/{choice.model}" if complete is not None else "",
            max_tokens=group.config.limits.max_tokens,
            history=history,
        )
        if background is not None:
            report.usage = background.summary()
        if dry_run or not report.proposals:  # nothing is written: no pause needed
            return consolidate.commit(
                home.groups_dir, report, facts=FACTS, history=history, when=when, zone=zone,
                sender=sender, dry_run=dry_run,
            )  # fmt: skip
        if queue is None:
            queue = stack.enter_context(contextlib.closing(open_queue(home)))
        with queue.paused(
            group.folder,
            PAUSE_HOLDER,
            "memory consolidation in progress",
            wait=group.config.turn_timeout_seconds + PAUSE_SLACK_SECONDS,
            progress=progress,
        ):
            return consolidate.commit(
                home.groups_dir, report, facts=FACTS, history=history, when=when, zone=zone,
                sender=sender,
            )  # fmt: skip
    finally:
        stack.close()
