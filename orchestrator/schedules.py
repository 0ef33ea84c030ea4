"""Schedules of tasks: once (``at``: an ISO 8601 time, or a delay such as ``20m``), every
interval (``every``, at least the group's ``tasks.min_interval``) or a cron expression
in a time zone (``cron``, computed by croniter; a time in a daylight-saving gap runs at
the first time after it, a time in a repeated hour runs in both). Pure: times in,
times out; the store keeps tasks and the daemon's scheduler runs them.
"""

from __future__ import annotations

import itertools
import math
import re
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from orchestrator.errors import BadInput
from orchestrator.units import parse_duration

AT, EVERY, CRON = "at", "every", "cron"
KINDS = (AT, EVERY, CRON)


class TaskRefused(BadInput):
    """A task that cannot be made or changed as asked."""


def local_time(stamp: float | None, tz: str) -> str:
    """``stamp`` in zone ``tz`` for people ("-" for none)."""
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise TaskRefused(
            f"unknown time zone {name!r}", hint="use an IANA name such as Europe/Lisbon or UTC"
        ) from None


def parse_at(value: str, tz: str, now: float) -> float:
    """When a one-off task is due: a delay (``20m``, ``2h``, ``1d``, ``90s``) from ``now``,
    or an ISO 8601 time (without an offset, in ``tz``); TaskRefused otherwise."""
    text = value.strip()
    delay = parse_duration(text) if re.fullmatch(r"\d+\s*[smhd]", text) else None
    if delay is not None:
        if delay <= 0:
            raise TaskRefused(f"--at {value!r}: a delay must be more than 0")
        return now + delay
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise TaskRefused(
            f"--at {value!r}: not a time",
            hint="give a delay such as 20m or 2h, or a time such as 2026-12-24T18:00",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone(tz))
    stamp = when.timestamp()
    if stamp <= now:
        raise TaskRefused(f"--at {value!r}: that time has passed")
    return stamp


def cron_next(spec: str, tz: str, after: float) -> float:
    """The first time after ``after`` that ``spec`` names, in zone ``tz``."""
    from croniter import croniter

    start = datetime.fromtimestamp(after, zone(tz))
    nxt: datetime = croniter(spec, start).get_next(datetime)
    return nxt.timestamp()


def check_schedule(
    kind: str, spec: str, tz: str, now: float, min_interval: int
) -> tuple[str, float]:
    """(the spec as stored, the first due time); TaskRefused naming what is wrong."""
    zone(tz)
    if kind == AT:
        due = parse_at(spec, tz, now)
        if due - now < min_interval:
            raise TaskRefused(
                f"--at {spec!r}: sooner than this group allows (at least {min_interval}s from now)",
                hint="give a later time, or lower tasks.min_interval in its group.yaml",
            )
        return spec.strip(), due
    if kind == EVERY:
        seconds = parse_duration(spec)
        if seconds is None or seconds <= 0:
            raise TaskRefused(
                f"--every {spec!r}: not a duration", hint="give one such as 30m, 2h or 1d"
            )
        if seconds < min_interval:
            raise TaskRefused(
                f"--every {spec!r}: more often than this group allows "
                f"(at least {min_interval}s apart)",
                hint="raise the interval, or tasks.min_interval in its group.yaml",
            )
        return spec.strip(), now + seconds
    if kind == CRON:
        from croniter import croniter

        if not croniter.is_valid(spec):
            raise TaskRefused(
                f"--cron {spec!r}: not a cron expression",
                hint="five fields: minute hour day month weekday, such as '0 8 * * 1-5'",
            )
        first = cron_next(spec, tz, now)
        times = [first]
        for _ in range(4):
            times.append(cron_next(spec, tz, times[-1]))
        gap = min(b - a for a, b in itertools.pairwise(times))
        if gap < min_interval:
            raise TaskRefused(
                f"--cron {spec!r}: runs {gap:g}s apart, more often than this group allows "
                f"(at least {min_interval}s)",
                hint="raise tasks.min_interval in its group.yaml, or run less often",
            )
        return " ".join(spec.split()), first
    raise TaskRefused(f"unknown schedule kind {kind!r}; known: {', '.join(KINDS)}")


def next_due(kind: str, spec: str, tz: str, next_run: float | None, after: float) -> float | None:
    """A schedule's next due time strictly after ``after`` (None for a one-off);
    ``next_run`` is the due time it had (intervals keep to their grid)."""
    if kind == AT:
        return None
    if kind == EVERY:
        seconds = parse_duration(spec) or 60
        due = next_run if next_run is not None else after
        if due <= after:  # whole intervals on from the last due time (no loop: a long
            due += (math.floor((after - due) / seconds) + 1) * seconds  # downtime is cheap)
        return due
    return cron_next(spec, tz, after)
