"""``orchestrator provider``: the model providers groups may use, and ``usage``."""

from __future__ import annotations

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json, print_table
from orchestrator.config import load_config

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def provider() -> None:
    """Model providers (defined in orchestrator.yaml) that groups may use.

    The host calls them for the groups: keys stay on the host, in its environment or in
    a secrets file (mode 0600), and never reach a container. A group picks one with
    `group add NAME --provider P --model M`, or `provider:`/`model:` in its group.yaml.

    \b
    Examples:
      orchestrator provider add claude --kind anthropic --key-env ANTHROPIC_API_KEY \\
          --allow-model claude-sonnet-4-5
      orchestrator provider add local --kind openai \\
          --base-url http://127.0.0.1:11434/v1 --allow-model llama3.1
    """


@provider.command("add")
@click.argument("name")
@click.option(
    "--kind",
    type=click.Choice(["anthropic", "openai"]),
    required=True,
    help="anthropic: the Messages API; openai: any OpenAI-compatible Chat Completions "
    "server (OpenAI, Ollama, vLLM, llama.cpp server, LM Studio).",
)
@click.option("--base-url", default=None, help="The API's base URL (default: the vendor's).")
@click.option("--key-env", default=None, metavar="VAR", help="Read the key from $VAR.")
@click.option(
    "--key-secret",
    default=None,
    metavar="NAME",
    help="Read the key from entry NAME of the secrets file (secrets_file in "
    "orchestrator.yaml; mode 0600).",
)
@click.option(
    "--allow-model",
    "models",
    multiple=True,
    metavar="MODEL",
    help="A model groups may use (repeatable; none given: any).",
)
@click.option("--max-tokens", type=click.IntRange(1, 1_000_000), default=None, help="Per answer.")
@click.option("--no-stream", is_flag=True, help="Ask for whole answers, not streams.")
@click.option("--replace", is_flag=True, help="Replace a provider of that name.")
@pass_cli
def add(
    obj: CliContext,
    name: str,
    kind: str,
    base_url: str | None,
    key_env: str | None,
    key_secret: str | None,
    models: tuple[str, ...],
    max_tokens: int | None,
    no_stream: bool,
    replace: bool,
) -> None:
    """Define provider NAME in orchestrator.yaml (comments and order are kept).

    A server that needs no key (a local Ollama) needs no --key-env or --key-secret.
    """
    from orchestrator.config.edit import edit_config
    from orchestrator.errors import BadInput

    if key_env and key_secret:
        raise BadInput("give --key-env or --key-secret, not both")
    entry: dict[str, object] = {"kind": kind}
    if base_url:
        entry["base_url"] = base_url
    if key_env:
        entry["key_env"] = key_env
    if key_secret:
        entry["key_secret"] = key_secret
    if models:
        entry["models"] = list(models)
    if max_tokens:
        entry["max_tokens"] = max_tokens
    if no_stream:
        entry["stream"] = False

    def change(data: dict[str, object]) -> None:
        providers = data.setdefault("providers", {})
        if not isinstance(providers, dict):
            raise BadInput("providers in orchestrator.yaml is not a mapping")
        if name in providers and not replace:
            raise BadInput(f"a provider named {name!r} exists", hint="pass --replace to replace it")
        providers[name] = entry

    config = edit_config(obj.home, change)
    definition = config.providers[name]
    click.echo(f"provider {name} ({kind}, {definition.url}, key: {definition.key_reference()})")


@provider.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def list_(obj: CliContext, as_json: bool) -> None:
    """List providers: kind, URL, where the key comes from (never the key), models."""
    from orchestrator.groups import GroupStore

    config = load_config(obj.home)
    users: dict[str, list[str]] = {}
    for group in GroupStore(obj.home).groups():
        users.setdefault(group.config.provider, []).append(group.folder)
    definitions = sorted(config.providers.values(), key=lambda d: d.name)
    rows = [{**d.to_dict(), "groups": users.get(d.name, [])} for d in definitions]
    if as_json:
        print_json(rows)
        return
    if not rows:
        click.echo("no providers defined; groups use the offline stand-in (see: provider add)")
        return
    print_table(
        ("NAME", "KIND", "URL", "KEY", "MODELS", "GROUPS"),
        [
            (
                r["name"],
                r["kind"],
                r["base_url"],
                r["key"],
                ", ".join(d.models) or "any",
                ", ".join(users.get(d.name, [])) or "-",
            )
            for r, d in zip(rows, definitions, strict=True)
        ],
    )


@provider.command("remove")
@click.argument("name")
@pass_cli
def remove(obj: CliContext, name: str) -> None:
    """Remove provider NAME; refused while a group uses it."""
    from orchestrator.config.edit import edit_config
    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore

    using = [g.folder for g in GroupStore(obj.home).groups() if g.config.provider == name]
    if using:
        raise BadInput(
            f"provider {name!r} is used by {', '.join(using)}",
            hint="point those groups at another provider first",
        )

    def change(data: dict[str, object]) -> None:
        providers = data.get("providers")
        if not isinstance(providers, dict) or name not in providers:
            raise BadInput(f"no provider named {name!r}", hint="see: orchestrator provider list")
        del providers[name]
        if not providers:
            del data["providers"]

    edit_config(obj.home, change)
    click.echo(f"removed provider {name}")


@click.command()
@click.argument("name", required=False)
@click.option(
    "--since",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="How far back (90m, 24h, 7d).",
)
@click.option(
    "--by",
    type=click.Choice(["model", "purpose"]),
    default=None,
    help="One row per model (provider/model) or purpose (turn, tasks, flush, summary, "
    "web) of each day.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@pass_cli
def usage(obj: CliContext, name: str | None, since: str, by: str | None, as_json: bool) -> None:
    """Model use per group and day (the group's time zone, group.yaml timezone): calls,
    failures, calls refused by a budget, tokens in (cached parts apart) and out, cost
    in orchestrator.yaml's currency ("-" where the model has no prices), mean latency.
    NAME limits it to one group.

    \b
    Examples:
      orchestrator usage                      every group, the last 7 days
      orchestrator usage family --since 30d   one group, a month
      orchestrator usage --by purpose         what chats, tasks and flushes cost
    """
    import time

    from orchestrator.errors import BadInput
    from orchestrator.groups import GroupStore
    from orchestrator.money import format_money
    from orchestrator.store.messages import open_queue
    from orchestrator.store.usage import UsageStore
    from orchestrator.units import parse_duration

    seconds = parse_duration(since)
    if not seconds:
        raise BadInput(f"--since {since!r} is not a duration", hint="use 90m, 24h, 7d or seconds")
    store_of_groups = GroupStore(obj.home)
    folder = store_of_groups.find(name).folder if name else None
    zones = {g.folder: g.config.timezone for g in store_of_groups.groups()}
    queue = open_queue(obj.home)  # makes the database when there is none yet
    store = UsageStore(queue.path)
    try:
        days = store.by_day(folder, time.time() - seconds, zones, by)
    finally:
        store.close()
        queue.close()
    if as_json:
        print_json([d.to_dict() for d in days])
        return
    if not days:
        click.echo(f"no model calls in the last {since}")
        return
    from orchestrator.config import load_config

    currency = load_config(obj.home).currency
    head = ["GROUP", "DAY", *([by.upper()] if by else []), "CALLS", "FAILED", "REFUSED"]
    print_table(
        (*head, "TOKENS IN", "CACHED", "TOKENS OUT", "COST", "MEAN LATENCY"),
        [
            (
                d.group,
                d.day,
                *([d.key or "-"] if by else []),
                d.requests,
                d.failed,
                d.refused,
                f"{d.input_tokens:,}",
                f"{d.cache_read_tokens + d.cache_write_tokens:,}",
                f"{d.output_tokens:,}",
                format_money(d.cost, d.currency or currency),
                f"{d.mean_latency_ms:.0f} ms",
            )
            for d in days
        ],
    )
