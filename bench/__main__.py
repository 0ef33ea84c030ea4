"""python -m bench [--quick] [NAME ...]: run benchmarks, print and save their results."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from bench import (
    backup,
    consolidate,
    discord,
    email,
    flush,
    group_image,
    history,
    hook,
    hostile,
    image,
    matrix,
    mcp,
    media,
    memory,
    messages,
    model_server,
    relay,
    runtime,
    scale,
    search,
    shell,
    slack,
    store,
    swarm,
    tasks,
    telegram,
    web,
)
from bench.harness import Result, fmt, markdown, save

BENCHMARKS: dict[str, Callable[[bool], Result]] = {
    image.NAME: image.run,
    memory.SCAFFOLD: memory.scaffold_complete,
    memory.SCAFFOLD_CREATE: memory.scaffold_create,
    memory.LINT: memory.lint_large,
    flush.NAME: flush.run,
    consolidate.NAME: consolidate.run,
    hook.NAME: hook.run,
    runtime.COLD: runtime.cold_start,
    runtime.IDLE: runtime.idle_cost,
    swarm.COLD: swarm.cold_start,
    swarm.WARM: swarm.warm_turn,
    messages.WARM: messages.warm_turn,
    messages.THROUGHPUT: messages.throughput,
    messages.METRICS: messages.warm_turn_metrics,
    messages.DURABLE: messages.warm_turn_durable,
    store.NAME: store.run,
    scale.NAME: scale.run,
    hostile.NAME: hostile.run,
    relay.NAME: relay.run,
    model_server.NAME: model_server.run,
    search.BUILD: search.build,
    search.SEARCH_1K: search.search_1k,
    search.SEARCH_10K: search.search_10k,
    tasks.NAME: tasks.run,
    shell.NAME: shell.run,
    mcp.NAME: mcp.run,
    web.FETCH: web.fetch,
    web.GATE: web.gate,
    group_image.NAME: group_image.run,
    telegram.INBOUND: telegram.inbound,
    telegram.OUTBOUND: telegram.outbound,
    matrix.NAME: matrix.run,
    email.INBOUND: email.inbound,
    email.OUTBOUND: email.outbound,
    email.ROUND_TRIP: email.round_trip,
    media.TRANSCRIBE: media.transcribe,
    media.IMAGE: media.image,
    slack.INBOUND: slack.run_inbound,
    slack.OUTBOUND: slack.run_outbound,
    discord.INBOUND: discord.run_inbound,
    discord.OUTBOUND: discord.run_outbound,
    history.NAMES[100]: history.check_100,
    history.NAMES[1000]: history.check_1k,
    history.NAMES[10_000]: history.check_10k,
    backup.BACKUP: backup.backup,
    backup.RESTORE: backup.restore,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer rounds (under 2 minutes)")
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    results = []
    for name in args.names or list(BENCHMARKS):
        started = time.monotonic()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        result = BENCHMARKS[name](args.quick)
        print(
            f"  {name}: target {fmt(result.target.median)}, floor "
            f"{fmt(result.floor.median)}, ratio {result.ratio:.2f}x "
            f"({time.monotonic() - started:.0f}s)",
            file=sys.stderr,
            flush=True,
        )
        results.append(result)
    path = save(results)
    print(markdown(results))
    print(f"saved {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
