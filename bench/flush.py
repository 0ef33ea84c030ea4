"""memory-flush: what saving facts as they go costs a day of conversation.

The family conversation of tests/test_memory_conversation.py (12 messages, 13 facts,
then a /clear) through the real runner, with a context budget that compacts it three times or more:
the target is the conversation with its early flushes, flushes at compaction and
summaries; the floor is the same conversation in a budget that never compacts or
flushes. Printed beside the ratio: the model calls each made (flush and summary), the
lines written to the daily note, and the facts kept, with the offline provider and
with a careless scripted model (one that replays what it sees)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.harness import Result, interleaved

NAME = "memory-flush"


class Counting:
    """Wraps a provider and counts its calls by purpose."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}

    def complete(self, request, host=None):  # type: ignore[no-untyped-def]
        self.calls[request.purpose] = self.calls.get(request.purpose, 0) + 1
        return self.inner.complete(request, host)


def _conversation(budget: int, careless: bool) -> dict[str, Any]:
    from orchestrator.agent.providers.offline import OfflineProvider
    from orchestrator.agent.runner import Runner
    from orchestrator.agent.settings import AgentSettings
    from orchestrator.memory.scaffold import scaffold_memory
    from orchestrator.protocol import TurnRequest
    from tests.test_memory_conversation import CONVERSATION, FACTS, ZONE, Careless

    with tempfile.TemporaryDirectory(prefix="bench-flush-") as tmp:
        agent = Path(tmp) / "groups" / "fam"
        agent.mkdir(parents=True)
        scaffold_memory(agent)
        (agent / "sessions").mkdir()
        (agent / "files").mkdir()
        provider = Counting(Careless() if careless else OfflineProvider("offline-rules"))
        settings = AgentSettings(agent_dir=agent, runtime_dir=Path(tmp) / "run")
        runner = Runner(replace(settings, context_budget_chars=budget), provider=provider, hooks=[])  # type: ignore[arg-type]
        compactions = 0
        for n, (sender, trust, text) in enumerate(CONVERSATION):
            turn = TurnRequest(f"t{n}", "k", text, sender=sender, trust=trust, timezone=ZONE)
            compactions += runner.handle(turn).compacted
        runner.handle(TurnRequest("end", "k", "/clear", sender="alice", timezone=ZONE))
        notes = "".join(p.read_text() for p in (agent / "memory" / "daily").glob("*.md"))
        lines = [x for x in notes.splitlines() if x.startswith("- ")]
        return {
            "compactions": compactions,
            "calls": dict(provider.calls),
            "lines": len(lines),
            "facts": sum(1 for phrase in FACTS.values() if phrase in notes),
        }


def run(quick: bool) -> Result:
    rounds = 5 if quick else 20
    figures = {}
    for label, careless, budget in (
        ("offline", False, 16_000),
        ("careless", True, 14_500),
    ):
        started = time.monotonic()
        figures[label] = {**_conversation(budget, careless)}
        figures[label]["seconds"] = round(time.monotonic() - started, 3)
    target, floor = interleaved(
        lambda: _conversation(16_000, False),
        lambda: _conversation(10_000_000, False),
        rounds,
        target_label="12 messages, flushed and compacted 3+ times (offline)",
        floor_label="the same 12 messages, never compacted",
    )
    offline = figures["offline"]
    careless = figures["careless"]
    note = (
        f"offline: {offline['compactions']} compactions, calls {offline['calls']}, "
        f"{offline['lines']} note lines, {offline['facts']}/13 facts; careless model: "
        f"{careless['compactions']} compactions, calls {careless['calls']}, "
        f"{careless['lines']} note lines, {careless['facts']}/13 facts"
    )
    return Result(NAME, target, floor, note=note, extra=figures)
