"""A fake host link for the runner's tools: it records every request and answers each
from a script, in order."""

from __future__ import annotations

from typing import Any


class FakeHost:
    """The host's side of the link: each request is recorded in ``requests`` and answered
    with the next of ``answers`` (an exception among them is raised instead). A request
    past the script fails the test: the tool asked the host more than it should."""

    def __init__(self, *answers: dict[str, Any] | Exception, closed: bool = False) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.is_closed = closed

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self.requests.append((op, fields))
        assert self.answers, f"the host was asked {op} {fields} with no answer left"
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def closed(self) -> bool:
        return self.is_closed
