"""Plain regression tests for what the fuzz harnesses (tests/test_fuzz_*.py) found, each
for the exact input that failed."""

from __future__ import annotations

from pathlib import Path

from orchestrator.agent.session import TRANSCRIPT, Session


def test_a_lone_surrogate_in_an_event_is_appended_and_rotated(tmp_path: Path) -> None:
    # A model's reply may hold a lone surrogate (JSON escapes one as \ud800), and a line
    # of the transcript may escape one: it had no UTF-8 form, and append and rotate
    # raised UnicodeEncodeError, so the session could not go on.
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / TRANSCRIPT).write_bytes(
        b'{"t":"context","context_id":1,"system":"\\ud800"}\n'
    )
    session = Session(tmp_path, "k", rotate_bytes=1)
    session.append({"t": "msg", "turn_id": "t9", "role": "assistant", "content": "a\udc00é"})
    again = Session(tmp_path, "k")
    context = again.current_context()
    assert context is not None and context.system == "\ud800"
    assert context.messages == [{"role": "assistant", "content": "a\udc00é"}]
