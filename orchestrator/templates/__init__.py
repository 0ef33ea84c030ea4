"""Jinja2 templates shipped in the package (scaffold files, group.yaml, instructions)."""

from __future__ import annotations

from functools import cache
from typing import Any

import jinja2


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("orchestrator", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(name: str, **context: Any) -> str:
    return _environment().get_template(name).render(**context)
