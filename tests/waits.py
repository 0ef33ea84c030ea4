"""The bound a wait is asked for, recorded rather than measured."""

from __future__ import annotations

import threading

import pytest

NOT_GIVEN = "none given"


def record_joins(monkeypatch: pytest.MonkeyPatch, thread: threading.Thread) -> list[object]:
    """``thread``'s joins from now on, each as the timeout it was given (NOT_GIVEN when
    none was); each still joins, within that timeout."""
    asked: list[object] = []
    real = thread.join

    def join(timeout: object = NOT_GIVEN) -> None:
        asked.append(timeout)
        real(None if timeout is NOT_GIVEN else timeout)  # type: ignore[arg-type]

    monkeypatch.setattr(thread, "join", join)
    return asked
