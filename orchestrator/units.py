"""Sizes and durations: parsed from configuration and flags, printed for people; and
counts of things, printed for people."""

from __future__ import annotations

import re
from typing import Any

_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _amount(value: Any, pattern: str, units: dict[str, int]) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        return None
    match = re.fullmatch(pattern, value.lower())
    return int(match[1]) * units[match[2]] if match else None


def parse_size(value: Any) -> int | None:
    """'512m', '1g', '1048576' or an int -> bytes; None when not a size."""
    return _amount(value, r"\s*(\d+)\s*([bkmg]?)i?b?\s*", _SIZE_UNITS)


def parse_duration(value: Any) -> int | None:
    """'30m', '2h', '90s', '90' or an int -> seconds; None when not a duration."""
    return _amount(value, r"\s*(\d+)\s*([smhd]?)\s*", _DURATION_UNITS)


def human_bytes(size: int) -> str:
    """1536 -> '1.5 KiB'."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def human_seconds(seconds: float) -> str:
    """90 -> '90s', 600 -> '10m', 7300 -> '2h01m', 200000 -> '2d'."""
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d"


def plural(count: int, word: str) -> str:
    """'1 finding', '2 findings'."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"
