"""``orchestrator web``: what a group's web policy decides."""

from __future__ import annotations

import click

from orchestrator.cli import CliContext
from orchestrator.cli.output import print_json
from orchestrator.groups import GroupStore

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def web() -> None:
    """The web, through the host: a group's policy (group.yaml web).

    With web.enabled, the group's agent has web_fetch and web_search, answered by the
    host, and its shell an egress gate (HTTP_PROXY) to the names of web.allow only.
    The host resolves every name itself and refuses private, loopback, link-local and
    metadata addresses unless web.allow_addresses opens a host:port on purpose.

    \b
    Examples:
      orchestrator web test family https://en.wikipedia.org/wiki/Lisbon
      orchestrator web test family http://127.0.0.1:8080/ --shell
    """


@web.command("test")
@click.argument("group_name", metavar="GROUP")
@click.argument("url")
@click.option("--shell", is_flag=True, help="Decide as the shell's gate does (allow list only).")
@click.option("--json", "as_json", is_flag=True, help="Print the decision as JSON.")
@pass_cli
def test(obj: CliContext, group_name: str, url: str, shell: bool, as_json: bool) -> None:
    """Show what GROUP's web policy decides for URL, and why (nothing is fetched; the
    name is resolved)."""
    from orchestrator.web.guard import Refused, check

    group = GroupStore(obj.home).find(group_name)
    policy = group.config.web
    decision: dict[str, object] = {"group": group.folder, "url": url, "enabled": policy.enabled}
    # the shell's gate also takes HOST:PORT, as a CONNECT names it
    url_checked = url if not shell or "://" in url else f"https://{url}/"
    try:
        target = check(url_checked, policy.rules(gate=shell))
        allowed = policy.enabled
        why = (
            f"allowed: {target.host} port {target.port} at {target.address}"
            if allowed
            else f"the address is allowed ({target.address}), but web.enabled is false"
        )
        decision.update(allowed=allowed, address=target.address, port=target.port)
    except Refused as exc:
        decision.update(allowed=False)
        why = f"refused: {exc}"
    decision["why"] = why
    decision["trust"] = list(policy.trust)
    if as_json:
        print_json(decision)
    else:
        click.echo(why)
        if policy.enabled:
            click.echo(f"open to: {', '.join(policy.trust)}")
    if not decision["allowed"]:
        raise SystemExit(1)
