"""A family conversation of 12 messages holding 13 facts (early and late in messages,
chatter between), through the real runner with the offline provider and a context
budget small enough to compact three times or more: the facts are saved as they go,
once each, found by memory search and given to a fresh context of the chat."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from orchestrator.agent.runner import Runner
from orchestrator.agent.settings import AgentSettings
from orchestrator.memory.scaffold import scaffold_memory
from orchestrator.memory.search import MemoryIndex
from orchestrator.protocol import TurnRequest

ZONE = "Asia/Hong_Kong"
FILLER = (
    "Anyway, the weather has been grey all week and the kids keep asking about the "
    "holidays, which nobody has planned yet, and the neighbours are painting again. "
) * 8

# (sender, trust, message): each fact's sentence is marked by its search words below
CONVERSATION = [
    ("alice", "creator", "Grandma Rosa is allergic to penicillin. " + FILLER * 2),
    ("bob", "member", FILLER + "Tom's violin lesson moved to Tuesday at 5pm."),
    ("alice", "creator", "How was your day? " + FILLER * 3),
    (
        "bob",
        "member",
        "The car's insurance renews on March 3. " + FILLER + "Rex the dog weighs 31 kg.",
    ),
    ("alice", "creator", FILLER * 2 + "The spare key is under the blue flowerpot."),
    ("bob", "member", "Lunch was fine. " + FILLER * 2),
    ("alice", "creator", "Mia's dentist appointment is on Friday at 9. " + FILLER),
    ("bob", "member", FILLER * 3 + "The wifi password is now heron-lantern-42."),
    ("alice", "creator", "We pay the plumber Wong 800 dollars on the 15th. " + FILLER),
    ("bob", "member", FILLER + "Grandpa takes his blood pressure pills at 8am. " + FILLER),
    ("alice", "creator", "The school trip to the aquarium is on May 20. " + FILLER * 2),
    ("bob", "member", FILLER * 2 + "Tom's shoe size is 36 now. The library books are due Monday."),
]
FACTS = {  # a query for each fact -> a phrase its line holds
    "penicillin allergy": "allergic to penicillin",
    "violin lesson": "violin lesson moved",
    "insurance renews": "insurance renews",
    "Rex weighs": "weighs 31 kg",
    "spare key flowerpot": "spare key",
    "dentist appointment": "dentist appointment",
    "wifi password": "heron-lantern-42",
    "plumber Wong": "plumber Wong",
    "blood pressure pills": "blood pressure pills",
    "aquarium trip": "aquarium",
    "shoe size": "shoe size is 36",
    "library books due": "library books",
    "Mia dentist": "Mia's dentist",
}


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    folder = tmp_path / "groups" / "fam"
    folder.mkdir(parents=True)
    scaffold_memory(folder)
    (folder / "sessions").mkdir()
    (folder / "files").mkdir()
    return folder


class Careless:
    """A scripted model that flushes carelessly: every sentence it can see, the system
    text's summary included, and the same facts again in other bullets and cases; its
    summaries repeat the previous summary whole."""

    def complete(self, request, host=None):  # type: ignore[no-untyped-def]
        from orchestrator.agent.providers.base import Completion, ToolCall
        from orchestrator.agent.providers.offline import _sentences

        if request.purpose == "flush":
            if any(m.get("role") == "tool" for m in request.messages):
                return Completion(None)
            said = [
                x
                for m in request.messages
                if m.get("role") == "user"
                for x in _sentences(str(m.get("content", "")))
            ]
            replay = [f"* {x.upper()}" for x in said[:3]]  # a copy in other clothes
            header = ["[Summary of the earlier conversation]", "Did you get all that?"]
            content = "\n".join([*header, *(f"- {x}" for x in said), *replay])
            return Completion(None, (ToolCall("f", "append_daily", {"content": content}),))
        if request.purpose == "summary":
            before = request.messages[-1]["content"]
            return Completion("[Summary of the earlier conversation] " + before[-300:])
        return Completion("Noted.")


@pytest.mark.parametrize("model", ["offline", "careless"])
def test_facts_are_kept_once_found_and_given_to_a_fresh_context(agent: Path, model: str) -> None:
    settings = AgentSettings(agent_dir=agent, runtime_dir=agent.parent.parent / "run")
    provider = Careless() if model == "careless" else None
    runner = Runner(
        replace(settings, context_budget_chars=16_000 if model == "offline" else 14_500),
        provider=provider,  # type: ignore[arg-type]
        hooks=[],
    )
    results = []
    for n, (sender, trust, text) in enumerate(CONVERSATION):
        turn = TurnRequest(f"t{n}", "kitchen", text, sender=sender, trust=trust, timezone=ZONE)
        results.append(runner.handle(turn))
    compactions = sum(1 for r in results if r.compacted)
    assert compactions >= 3, compactions
    # /clear saves what the live context holds before it goes
    runner.handle(TurnRequest("t-clear", "kitchen", "/clear", sender="alice", trust="creator",
                              timezone=ZONE))  # fmt: skip

    today = datetime.now(ZoneInfo(ZONE)).strftime("%Y-%m-%d")
    note = (agent / "memory" / "daily" / f"{today}.md").read_text()
    lines = [x for x in note.splitlines() if x.startswith("- ")]
    kept = {query for query, phrase in FACTS.items() if phrase in note}
    assert len(kept) >= 12, sorted(set(FACTS) - kept)
    # each fact once, chatter and questions aside: at most 1.5 lines per fact
    facts_lines = [x for x in lines if any(p in x for p in FACTS.values())]
    assert len(facts_lines) <= 1.5 * len(FACTS) and len(set(lines)) == len(lines)
    assert "Summary of the earlier conversation" not in note and "[compaction]" not in note
    assert not any(x.split(" — ")[0].rstrip().endswith("?") for x in lines)
    assert all(" — " in x and "; chat kitchen; " in x for x in lines)

    # memory search finds them
    index = MemoryIndex(agent.parent.parent / "state", agent.parent, "fam")
    try:
        index.update(force=True)
        found = {
            query
            for query, phrase in FACTS.items()
            if any(phrase in hit.snippet or hit.path.startswith("memory/daily/")
                   for hit in index.search(query, 3))
        }  # fmt: skip
    finally:
        index.close()
    assert len(found) >= 12, sorted(set(FACTS) - found)

    # a fresh context of the same chat is given them
    context = runner._sessions["cli.chat-kitchen"].current_context()
    assert context is not None
    given = {query for query, phrase in FACTS.items() if phrase in context.system}
    assert len(given) >= 12, sorted(set(FACTS) - given)
