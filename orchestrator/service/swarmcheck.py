"""``doctor``'s checks of a home on Docker Swarm (``runtime.backend: swarm``): the swarm
and its runner network, the groups' storage seen alike on every node that may run them
(a probe file written here, read by a service on each node), and the daemon's runner
port."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.config import OrchestratorConfig
from orchestrator.errors import OrchestratorError
from orchestrator.home import Home
from orchestrator.service.doctor import FAIL, OK, WARN, Check

if TYPE_CHECKING:
    import docker


def check_swarm(home: Home, config: OrchestratorConfig, client: docker.DockerClient) -> list[Check]:
    from orchestrator.image.agent import agent_image_ref
    from orchestrator.runtime import open_backend
    from orchestrator.runtime.swarm import SwarmBackend
    from orchestrator.runtime.swarm.storage import check_storage, host_groups_dir

    backend = open_backend(config, client=client, home=home)
    assert isinstance(backend, SwarmBackend)
    settings = config.runtime.swarm
    try:
        backend.node()
        subnets = backend.network_subnets()
    except OrchestratorError as exc:
        return [Check("swarm", FAIL, exc.message, exc.hint or "")]
    facts = backend.engine_facts()
    checks = [
        Check(
            "swarm",
            OK,
            f"manager of a swarm of {facts.get('nodes')} nodes; runner network "
            f"{settings.network} ({', '.join(str(s) for s in subnets)}), internal; runners "
            f"dial {settings.address}",
        )
    ]
    try:
        image = agent_image_ref(client, config.image)
        problems = check_storage(backend, image)
    except OrchestratorError as exc:
        checks.append(Check("swarm storage", FAIL, f"cannot check: {exc.message}", exc.hint or ""))
        problems = None
    if problems:
        checks.append(
            Check(
                "swarm storage",
                FAIL,
                "; ".join(problems),
                "mount the home at the same path on every node (NFS, CephFS), or pin the "
                "groups to the nodes that have it (runtime.swarm.constraints)",
            )
        )
    elif problems is not None:
        nodes = int(str(facts.get("nodes") or 1))
        constraints = ", ".join(settings.constraints)
        where = f" (constraints: {constraints})" if constraints else ""
        checks.append(
            Check(
                "swarm storage",
                OK,
                f"{host_groups_dir(backend)} is the same on the {nodes} node"
                f"{'' if nodes == 1 else 's'} that may run the groups{where}",
            )
        )
    relay = home.state_dir / "swarm" / "runners.sock"
    if not relay.exists():
        checks.append(
            Check(
                "runner port",
                WARN,
                "no daemon serves the runner port for this home: groups cannot be reached",
                "deploy the daemon on the swarm (stack.yaml)",
            )
        )
    return checks
