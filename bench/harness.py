"""Measuring target against floor, interleaved, and reporting median, p99 and ratio."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS_DIR = Path(__file__).parent / "results"


@dataclass
class Series:
    label: str
    samples: list[float] = field(default_factory=list)  # seconds

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        ordered = sorted(self.samples)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


@dataclass
class Result:
    name: str
    target: Series
    floor: Series
    note: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.target.median / self.floor.median if self.floor.median else float("inf")

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "target": {
                "label": self.target.label,
                "median_s": self.target.median,
                "p99_s": self.target.p99,
                "n": len(self.target.samples),
            },
            "floor": {
                "label": self.floor.label,
                "median_s": self.floor.median,
                "p99_s": self.floor.p99,
                "n": len(self.floor.samples),
            },
            "ratio": self.ratio,
            "note": self.note,
            "extra": self.extra,
        }


def interleaved(
    target: Callable[[], object],
    floor: Callable[[], object],
    rounds: int,
    *,
    target_label: str,
    floor_label: str,
    warmup: int = 1,
) -> tuple[Series, Series]:
    """Alternate floor and target ``rounds`` times so both see the same machine state."""
    for _ in range(warmup):
        floor()
        target()
    t, f = Series(target_label), Series(floor_label)
    for _ in range(rounds):
        start = time.perf_counter()
        floor()
        f.samples.append(time.perf_counter() - start)
        start = time.perf_counter()
        target()
        t.samples.append(time.perf_counter() - start)
    return t, f


def fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def markdown(results: list[Result]) -> str:
    lines = [
        "| benchmark | target | median | p99 | floor | median | p99 | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.target.label} | {fmt(r.target.median)} | {fmt(r.target.p99)} "
            f"| {r.floor.label} | {fmt(r.floor.median)} | {fmt(r.floor.p99)} "
            f"| {r.ratio:.2f}x |"
        )
    for r in results:
        if r.note or r.extra:
            lines.append(f"\n{r.name}: {r.note} {json.dumps(r.extra) if r.extra else ''}".rstrip())
    return "\n".join(lines) + "\n"


def save(results: list[Result]) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    data = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": [r.to_dict() for r in results],
    }
    (RESULTS_DIR / "latest.json").write_text(json.dumps(data, indent=2) + "\n")
    (RESULTS_DIR / "latest.md").write_text(markdown(results))
    return RESULTS_DIR / "latest.json"


__all__ = ["Result", "Series", "asdict", "fmt", "interleaved", "markdown", "save"]
