"""``orchestrator deploy``: manifests to run this home elsewhere."""

from __future__ import annotations

import click

from orchestrator.cli import CliContext
from orchestrator.config import load_config

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def deploy() -> None:
    """Manifests to run this home on a cluster.

    \b
    Examples:
      orchestrator deploy kubernetes --print > orchestrator.yaml
      orchestrator deploy kubernetes --print --sandbox --runtime-class gvisor
    """


@deploy.command("kubernetes")
@click.option("--print", "show", is_flag=True, help="Print the manifests (the only mode).")
@click.option("--namespace", default="orchestrator", show_default=True, help="Their namespace.")
@click.option(
    "--registry",
    default="",
    help="Prefix of every image, such as registry.example.org/team/ (push them there).",
)
@click.option("--tag", default="latest", show_default=True, help="Tag of every image.")
@click.option(
    "--storage-class",
    default=None,
    help="A storage class that offers ReadWriteMany (the daemon and a group share a claim).",
)
@click.option("--home-size", default="10Gi", show_default=True, help="The home's claim.")
@click.option(
    "--runtime-class", default=None, help="A RuntimeClass for the group pods, such as gvisor."
)
@click.option(
    "--sandbox",
    is_flag=True,
    help="Each group as a Sandbox of kubernetes-sigs/agent-sandbox, not a StatefulSet.",
)
@pass_cli
def kubernetes(
    obj: CliContext,
    show: bool,
    namespace: str,
    registry: str,
    tag: str,
    storage_class: str | None,
    home_size: str,
    runtime_class: str | None,
    sandbox: bool,
) -> None:
    """Print Kubernetes manifests of this home: the daemon (a Deployment with a
    ReadWriteMany claim for the home), each group as one pod in the shape the Docker
    backend enforces with a claim for its folder, and a NetworkPolicy that lets group
    pods reach the cluster's DNS and the daemon's runner port only.

    Nothing is applied: there is no Kubernetes backend yet, so each group's credential
    Secret (<group>-runner, key orchestrator-runner) and scaling are left to you; see
    the README.
    """
    from orchestrator.errors import BadInput
    from orchestrator.service.kubernetes import (
        KubernetesOptions,
        manifests,
        shapes_of,
        to_yaml,
    )

    if not show:
        raise BadInput(
            "only --print is supported: nothing is applied to a cluster",
            hint="orchestrator deploy kubernetes --print | kubectl apply -f -",
        )
    config = load_config(obj.home)
    options = KubernetesOptions(
        namespace=namespace,
        daemon_image=f"{registry}orchestrator-daemon:{tag}",
        home_size=home_size,
        storage_class=storage_class,
        runtime_class=runtime_class,
        sandbox=sandbox,
        runner_port=config.runtime.swarm.port,
    )
    shapes = shapes_of(
        obj.home, config, registry=registry, tag=tag, runner_port=options.runner_port
    )
    click.echo(to_yaml(manifests(config.project, shapes, options)), nl=False)
