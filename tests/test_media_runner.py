"""The runner's side of images by reference: a turn's images are named on its user
message (paths only), and at compaction each becomes a line naming it and its size."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from orchestrator.agent.providers.offline import OfflineProvider
from orchestrator.agent.runner import Runner, image_lines
from orchestrator.agent.settings import AgentSettings
from orchestrator.memory.scaffold import scaffold_memory
from orchestrator.protocol import TurnRequest


def _runner(tmp_path: Path, budget: int | None = None) -> Runner:
    agent = tmp_path / "agent"
    agent.mkdir()
    scaffold_memory(agent)
    (agent / "sessions").mkdir()
    (agent / "files" / "inbox").mkdir(parents=True)
    (agent / "files" / "inbox" / "cat.jpg").write_bytes(b"\xff\xd8" + b"x" * 2046)
    settings = AgentSettings(agent_dir=agent, runtime_dir=tmp_path / "run")
    if budget is not None:
        settings = replace(settings, context_budget_chars=budget)
    return Runner(settings, provider=OfflineProvider("offline-rules"), hooks=[])


def test_a_turns_images_are_named_on_its_user_message(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    runner.handle(TurnRequest("t1", "c", "look", sender="ann", images=("files/inbox/cat.jpg",)))
    lines = [
        json.loads(line)
        for path in (tmp_path / "agent" / "sessions").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    (user,) = [e for e in lines if e.get("role") == "user"]
    assert user["images"] == ["files/inbox/cat.jpg"]
    wire = TurnRequest("t", "c", "x", images=("files/inbox/cat.jpg",)).to_wire()
    assert TurnRequest.from_wire(wire).images == ("files/inbox/cat.jpg",)
    assert "images" not in TurnRequest("t", "c", "x").to_wire()


def test_at_compaction_an_image_becomes_a_line(tmp_path: Path) -> None:
    agent = _runner(tmp_path).settings.agent_dir
    message = {"role": "user", "content": "look", "images": ["files/inbox/cat.jpg",
                                                            "files/inbox/gone.png"]}  # fmt: skip
    lined = image_lines(message, agent)
    assert "images" not in lined
    assert lined["content"] == (
        "look\n[image files/inbox/cat.jpg, 2.0 KiB: shown earlier, not kept in this context]\n"
        "[image files/inbox/gone.png, no longer there: shown earlier, not kept in this context]"
    )
    assert image_lines({"role": "user", "content": "x"}, agent) == {"role": "user", "content": "x"}


def test_a_compacted_context_keeps_no_image_reference(tmp_path: Path) -> None:
    runner = _runner(tmp_path, budget=4_000)
    for n in range(12):
        images = ("files/inbox/cat.jpg",)
        runner.handle(TurnRequest(f"t{n}", "c", f"message {n} " + "words " * 60, sender="ann",
                                  images=images))  # fmt: skip
    session = next(iter(runner._sessions.values()))
    context = session.current_context()
    assert context is not None and context.source == "compact"
    kept = context.messages[: context.kept]  # carried over from before the compaction
    users = [m for m in kept if m.get("role") == "user"]
    assert users and not [m for m in kept if m.get("images")]
    assert all("[image files/inbox/cat.jpg, 2.0 KiB: shown earlier" in m["content"] for m in users)
