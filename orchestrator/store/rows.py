"""Typed reading of a row's columns: each store turns its rows into dataclasses with
these, so a column of the wrong type is an error here rather than an ignored type."""

from __future__ import annotations


def text(value: object) -> str:
    return value if isinstance(value, str) else str(value)


def opt_text(value: object) -> str | None:
    return None if value is None else text(value)


def whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"expected a whole number in the state database, got {value!r}")
    return int(value)


def real(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(f"expected a number in the state database, got {value!r}")
    return float(value)


def opt_real(value: object) -> float | None:
    return None if value is None else real(value)


def flag(value: object) -> bool:
    return bool(whole(value)) if value is not None else False
