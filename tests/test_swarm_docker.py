"""Groups on Docker Swarm, on this machine's engine put in swarm mode (and left as it
was found): stack.yaml runs the daemon as a service on the runner network; each group
is a service whose runner dials it. A group answers through that connection with its
memory on the host, is scaled to zero when idle and back at the next message; a forged,
stale or borrowed credential is refused; a group's container reaches nothing but the
daemon's runner port; a task killed is restarted by Swarm and the group answers again.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.groups import GroupStore
from orchestrator.groups.config import ContainerSettings, GroupConfig, set_option
from orchestrator.home import Home
from orchestrator.runtime.base import LABEL_CONFIG_HASH, LABEL_GROUP, LABEL_HOME
from orchestrator.runtime.swarm.credentials import Authority
from orchestrator.runtime.swarm.service import CREDENTIAL_PATH, LABEL_CREDENTIAL
from tests.engineclean import labelled_containers, remove_containers
from tests.swarmrig import ROOT, Deployment, forged_credential, inside, unavailable

pytestmark = [pytest.mark.docker, pytest.mark.swarm]
IDLE_SECONDS = 10  # alpha's idle timeout (the least group.yaml takes)


@pytest.fixture(scope="module")
def images(docker_client: Any, test_project: str) -> Iterator[tuple[str, str]]:
    """(the agent image, the daemon image) built from these sources, under tags of this
    test's own (a build elsewhere on the engine prunes the tags of its repositories)."""
    from docker.errors import ImageNotFound

    tags = (f"{test_project}-sw-agent:latest", f"{test_project}-sw-daemon:latest")
    hashed = ""  # the agent image also under the tag a checkout resolves (its inputs' hash)
    for _ in range(3):
        built = subprocess.run(
            [str(ROOT / ".venv/bin/orchestrator"), "image", "build", "--daemon", "--json"],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert built.returncode == 0, built.stderr[-2000:]
        result = json.loads(built.stdout)
        try:
            for source, tag in zip((result["tag"], result["daemon"]["tag"]), tags, strict=True):
                docker_client.images.get(source).tag(*tag.split(":"))
            hashed = f"{test_project}-sw-agent:{result['inputs_hash'][:12]}"
            docker_client.images.get(tags[0]).tag(*hashed.split(":"))
            break
        except ImageNotFound:
            continue  # pruned by another build between ours and the tag: build again
    else:
        pytest.fail("the images built were removed before they could be tagged, three times")
    yield tags
    for tag in (*tags, hashed):
        with contextlib.suppress(Exception):
            docker_client.images.remove(tag)


@pytest.fixture(scope="module")
def swarm(
    swarm_engine: Any, images: tuple[str, str], test_project: str, tmp_path_factory: Any
) -> Iterator[Deployment]:
    if subprocess.run(["docker", "stack", "ls"], capture_output=True).returncode != 0:
        unavailable("no docker CLI with `docker stack` on this machine")
    home = Path(tmp_path_factory.mktemp("swarm")) / "home"
    home.mkdir()
    project = f"{test_project}-sw"
    deployment = Deployment(swarm_engine, project, home, *images)
    home.joinpath("orchestrator.yaml").write_text(deployment.config())
    store = GroupStore(Home(home))
    store.add(
        GroupConfig(
            name="Alpha",
            creators=("operator",),
            container=ContainerSettings(idle_timeout_seconds=IDLE_SECONDS),
        )
    )
    store.add(GroupConfig(name="Beta", creators=("operator",)))
    evil = store.add(GroupConfig(name="Evil", creators=("operator",)))
    set_option(evil.config_file, "turn_timeout", "6s")
    try:
        deployment.up()
        yield deployment
    finally:
        deployment.down()


def test_a_groups_service_answers_through_the_overlay_with_its_memory_on_the_host(
    swarm: Deployment,
) -> None:
    told = swarm.send("alpha", "remember that the boiler is in the cellar")
    assert told.startswith("Noted: the boiler is in the cellar."), told
    marker = swarm.home / "groups/beta/memory/beta-only-7f3a.md"
    marker.write_text("only for beta")
    fact = swarm.home / "groups/alpha/memory/facts/the-boiler.md"
    assert "in the cellar" in fact.read_text()  # on the host, in the home
    assert fact.stat().st_uid == 10001  # the group's user (its folder is root's)

    service = swarm.service("alpha")
    labels = service["Spec"]["Labels"]
    home_id = Home(swarm.home).identity
    assert labels[LABEL_HOME] == home_id and labels[LABEL_GROUP] == "alpha"
    assert labels[LABEL_CONFIG_HASH] and len(labels[LABEL_CREDENTIAL]) == 64
    assert service["Spec"]["Mode"]["Replicated"]["Replicas"] == 1
    container = swarm.group_container("alpha")
    seen = inside(
        container,
        f"""
        import errno, json, os
        def writable(path):
            try:
                with open(path, 'a'):
                    return True
            except OSError as exc:
                return errno.errorcode[exc.errno]
        status = dict(l.split(':\\t', 1) for l in open('/proc/self/status') if ':\\t' in l)
        listening = []
        for table in ('/proc/net/tcp', '/proc/net/tcp6'):
            for line in open(table).read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == '0A':  # LISTEN: (address, owner's uid)
                    listening.append([fields[1], int(fields[7])])
        mounts = [line.split()[4] for line in open('/proc/self/mountinfo')]
        secret = os.stat({CREDENTIAL_PATH!r})
        print(json.dumps({{
            "uid": os.getuid(),
            "rootfs": writable('/etc/probe'),
            "capeff": status['CapEff'].strip(),
            "interfaces": sorted(os.listdir('/sys/class/net')),
            "routes": [l.split()[1] for l in open('/proc/net/route').read().splitlines()[1:]],
            "listening": listening,
            "mounts": mounts,
            "secret": [secret.st_uid, oct(secret.st_mode & 0o777)],
            "env": [k for k, v in os.environ.items() if 'BEGIN' in v],
            "docker_sock": [d for d, _, f in os.walk('/') if 'docker.sock' in f
                            and not d.startswith(('/proc', '/sys'))],
            "beta": [os.path.join(d, f) for d, dirs, files in os.walk('/')
                     if not d.startswith(('/proc', '/sys'))
                     for f in files + dirs if 'beta' in f],
        }}))
        """,
    )
    assert seen["uid"] == 10001
    assert seen["rootfs"] == "EROFS"
    assert seen["capeff"] == "0000000000000000"
    assert seen["interfaces"] == ["eth0", "lo"]  # the runner network, nothing else
    assert "00000000" not in seen["routes"]  # no default route: no way out
    # the runner listens nowhere; the engine's DNS resolver (127.0.0.11, root's) alone does
    assert seen["listening"] == [["0B00007F:" + seen["listening"][0][0][9:], 0]]
    assert "/run/orchestrator" not in seen["mounts"]
    assert seen["secret"] == [10001, "0o400"]  # the credential: its user's alone
    assert seen["env"] == [] and seen["docker_sock"] == []
    assert seen["beta"] == []  # nothing of another group is visible
    logs = swarm.client.api.service_logs(service["ID"], stdout=True, stderr=True)
    assert "runner dialling the daemon at orchestrator:7070" in b"".join(logs).decode()


def test_an_idle_group_is_scaled_to_zero_and_back_at_the_next_message(swarm: Deployment) -> None:
    swarm.send("alpha", "remember that the garden gate sticks")
    time.sleep(IDLE_SECONDS + 1)
    actions = json.loads(swarm.cli_inside("reconcile", "--json"))
    assert {"kind": "stop-idle", "folder": "alpha"}.items() <= next(
        a for a in actions if a["folder"] == "alpha"
    ).items()
    assert swarm.service("alpha")["Spec"]["Mode"]["Replicated"]["Replicas"] == 0
    rows = {r["folder"]: r for r in json.loads(swarm.cli_inside("status", "--json"))["groups"]}
    assert rows["alpha"]["state"] == "idle"
    # kept while idle: a later reconcile leaves it scaled to zero, not removed
    actions = json.loads(swarm.cli_inside("reconcile", "--json"))
    assert [a["kind"] for a in actions if a["folder"] == "alpha"] == ["keep-idle"]
    answer = swarm.send("alpha", "what do you know about the garden gate?")
    assert "sticks" in answer  # from its memory, in a new task
    assert swarm.service("alpha")["Spec"]["Mode"]["Replicated"]["Replicas"] == 1


def _probe(container: Any, credentials: dict[str, bytes], *, user: str = "") -> dict[str, str]:
    """Connect from ``container`` to the daemon's runner port with each credential;
    what the daemon did with each: "kept" (the connection stays open for turns),
    "closed", or the TLS error."""
    given = {name: pem.decode() for name, pem in credentials.items()}
    return dict(
        inside(
            container,
            f"""
            import json, os, socket, ssl, tempfile
            from orchestrator.agent.dial import client_context
            out = {{}}
            for name, pem in json.loads({json.dumps(json.dumps(given))}).items():
                path = os.path.join(tempfile.mkdtemp(), 'credential.pem')
                with open(path, 'w') as handle:
                    handle.write(pem)
                try:
                    raw = socket.create_connection(('orchestrator', 7070), timeout=5)
                    conn = client_context(__import__('pathlib').Path(path)).wrap_socket(
                        raw, server_hostname='orchestrator')
                    conn.settimeout(2)
                    try:
                        out[name] = 'closed' if not conn.recv(1) else 'data'
                    except (TimeoutError, socket.timeout):
                        out[name] = 'kept'
                    except (ssl.SSLError, OSError) as exc:
                        out[name] = 'closed: ' + str(getattr(exc, 'reason', exc))
                except (ssl.SSLError, OSError) as exc:
                    out[name] = 'refused: ' + str(getattr(exc, 'reason', exc))
            print(json.dumps(out))
            """,
            user=user,
        )
    )


def test_a_forged_stale_or_borrowed_credential_is_refused(swarm: Deployment) -> None:
    swarm.send("alpha", "remember that the stairs creak")
    swarm.send("beta", "remember that the kettle whistles")
    home_id = Home(swarm.home).identity
    state = swarm.home / "state" / "swarm"
    ca = (state / "ca.pem").read_bytes()
    alpha = swarm.group_container("alpha")
    beta = swarm.group_container("beta")
    real = alpha.exec_run(["cat", CREDENTIAL_PATH]).output  # alpha's own, as its user
    assert b"PRIVATE KEY" in real
    # signed by the home's CA, naming alpha, but not the one alpha's service was given
    stale = Authority(state, home_id).issue("alpha").bundle
    credentials = {
        "forged": forged_credential("alpha", home_id, ca),
        "stale": stale,
        "borrowed": real,
    }
    # the control: alpha's credential from alpha's own task is taken
    assert _probe(alpha, {"own": real}) == {"own": "kept"}
    # from beta's container (a group gone hostile), each is refused
    from_beta = _probe(beta, credentials)
    assert not any(v == "kept" for v in from_beta.values()), from_beta
    # and from a container attached to the runner network from outside the home
    attacker = swarm.client.containers.run(
        swarm.agent_repository + ":latest",
        ["sleep", "120"],
        network=swarm.network,
        labels={"org.orchestrator.project": swarm.project},
        detach=True,
        remove=True,
    )
    try:
        from_outside = _probe(attacker, credentials)
    finally:
        attacker.kill()
    assert not any(v == "kept" for v in from_outside.values()), from_outside
    logs = swarm.daemon_logs()
    assert "not the credential group 'alpha' was given (forged or stale)" in logs
    assert "group 'alpha''s credential from" in logs  # borrowed: not from its own task
    assert "certificate verify failed" in logs  # forged: not signed by the home's CA
    # alpha is still answered, by its own runner
    assert "creak" in swarm.send("alpha", "what do you know about the stairs?")


def test_a_groups_container_reaches_nothing_but_the_daemons_runner_port(
    swarm: Deployment,
) -> None:
    swarm.send("alpha", "remember that the window sticks")
    swarm.send("beta", "remember that the door squeaks")
    daemon = swarm.daemon_container()
    listening = inside(
        daemon,
        """
        import json
        ports = set()
        for table in ('/proc/net/tcp', '/proc/net/tcp6'):
            for line in open(table).read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == '0A':
                    ports.add(int(fields[1].rsplit(':', 1)[1], 16))
        print(json.dumps(sorted(ports)))
        """,
    )
    assert 7070 in listening and 8787 in listening
    attached = daemon.attrs["NetworkSettings"]["Networks"]
    public = next(v["IPAddress"] for k, v in attached.items() if k.endswith("_public"))
    beta_service = swarm.service("beta")["Spec"]["Name"]
    reached = inside(
        swarm.group_container("alpha"),
        f"""
        import errno, json, socket
        def connect(host, port):
            s = socket.socket()
            s.settimeout(3)
            try:
                s.connect((host, port))
                return 'connected'
            except OSError as exc:
                return errno.errorcode.get(exc.errno, str(exc))
            finally:
                s.close()
        daemon = socket.gethostbyname('orchestrator')
        beta = socket.gethostbyname('tasks.{beta_service}')
        ports = sorted(set({listening!r}) | {{22, 80, 443, 2375, 2376, 7070, 8787}})
        print(json.dumps({{
            'daemon': {{p: connect(daemon, p) for p in ports}},
            'beta': {{p: connect(beta, p) for p in ports + list(range(1, 1025, 7))}},
            'public': connect({public!r}, 8787),
            'outside': connect('1.1.1.1', 80),
        }}))
        """,
    )
    daemon_open = [int(p) for p, r in reached["daemon"].items() if r == "connected"]
    assert daemon_open == [7070], reached["daemon"]  # the runner port, and nothing else
    assert not any(r == "connected" for r in reached["beta"].values())  # nothing listens
    assert reached["public"] in ("ENETUNREACH", "EHOSTUNREACH", "ETIMEDOUT")
    assert reached["outside"] in ("ENETUNREACH", "EHOSTUNREACH", "ETIMEDOUT")


# Code in a group's container, as its user, beside its runner: it reads the group's
# credential (its own) and opens connections to the runner port from the group's task,
# which the daemon admits; on each it answers pings and drips a turn's answer forever.
DRIPPING_RUNNER = r"""
import json, socket, ssl, struct, threading, time
from pathlib import Path
from orchestrator.agent.dial import client_context
context = client_context(Path("/run/secrets/orchestrator-runner"))
def serve(conn):
    with conn:
        while True:
            head = conn.recv(4)
            if len(head) < 4:
                return
            body = json.loads(conn.recv(struct.unpack(">I", head)[0]))
            if body.get("op") == "ping":
                out = json.dumps({"ok": True}).encode()
                conn.sendall(struct.pack(">I", len(out)) + out)
                continue
            conn.sendall(struct.pack(">I", 100000))
            try:
                while True:
                    time.sleep(1)
                    conn.sendall(b" ")
            except OSError:
                return
while True:
    try:
        raw = socket.create_connection(("orchestrator", 7070), timeout=5)
        conn = context.wrap_socket(raw, server_hostname="orchestrator")
        conn.settimeout(None)
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
    except OSError:
        pass
    time.sleep(0.2)
"""


def test_a_dripping_runner_holds_nothing_but_its_own_groups_turns(swarm: Deployment) -> None:
    from orchestrator.home import Home as HomePaths
    from orchestrator.service import control_request

    def request(**message: Any) -> dict[str, Any]:
        return control_request(HomePaths(swarm.home), message, timeout=120)

    swarm.send("evil", "hello")
    swarm.send("beta", "hello")
    swarm.group_container("evil").exec_run(["python3", "-c", DRIPPING_RUNNER], detach=True)
    time.sleep(3)  # its connections are at the runner port beside the runner's own
    sent = [
        request(op="send", group="evil", text="hi", chat=f"x{i}", sender="operator", wait=False)
        for i in range(3)
    ]
    evil_ids = [answer["message"]["id"] for answer in sent]
    started = time.monotonic()
    good = swarm.send("beta", "what do you know about anything?")
    assert good, "beta is answered while evil's turns drip"
    print(f"another group's turn while one group drips: {time.monotonic() - started:.2f} s")
    # a turn given a dripping connection is cut at its deadline and tried again (its group's
    # own runner may answer it then); none holds a worker
    deadline = time.monotonic() + 90
    errors: set[str] = set()
    while True:
        messages = [request(op="get", id=i)["message"] for i in evil_ids]
        errors.update(str(m["error"]) for m in messages if m["error"])
        if all(m["state"] == "done" or m["attempts"] >= 2 for m in messages) and errors:
            break
        assert time.monotonic() < deadline, messages
        time.sleep(0.5)
    assert any("did not finish within 6s" in e for e in errors), errors
    assert swarm.send("beta", "hello again")  # still answered


def test_a_killed_task_is_restarted_by_swarm_and_the_group_answers_again(
    swarm: Deployment,
) -> None:
    swarm.send("beta", "remember that the lamp flickers")
    service = swarm.service("beta")
    killed = swarm.group_container("beta")
    killed.kill()
    deadline = time.monotonic() + 60
    while True:  # Swarm makes another task on its own (restart on failure)
        tasks = swarm.client.api.tasks(filters={"service": service["ID"]})
        states = sorted(t["Status"]["State"] for t in tasks)
        if "running" in states and "failed" in states:
            break
        assert time.monotonic() < deadline, states
        time.sleep(0.2)
    assert swarm.group_container("beta").id != killed.id
    assert "flickers" in swarm.send("beta", "what do you know about the lamp?")
    # the same service, not one made again by the daemon
    assert swarm.service("beta")["ID"] == service["ID"]


def test_storage_is_checked_on_every_node_by_doctor(swarm: Deployment) -> None:
    out = swarm.cli_inside("doctor", "--json", check=False)
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["swarm"]["status"] == "ok", checks["swarm"]
    assert checks["swarm storage"]["status"] == "ok", checks["swarm storage"]
    assert "1 node" in checks["swarm storage"]["detail"]
    assert os.path.exists(swarm.home / "state/swarm/ca.key")


def test_a_home_moves_from_docker_to_swarm_and_back_keeping_everything(
    swarm_engine: Any, images: tuple[str, str], test_project: str, tmp_path: Path
) -> None:
    """The README's steps, as an operator runs them: what the group knew, its session
    and its queue's records are there on the other backend, both ways."""
    from orchestrator.runtime.base import LABEL_HOME as HOME_LABEL

    home = tmp_path / "home"
    home.mkdir()
    project = f"{test_project}-mv"
    moving = Deployment(swarm_engine, project, home, *images)
    docker_config = f"project: {project}\nimage: {moving.agent_repository}\n"
    home.joinpath("orchestrator.yaml").write_text(docker_config)
    GroupStore(Home(home)).add(GroupConfig(name="Mover", creators=("operator",)))
    identity = Home(home).identity

    def cli(*args: str) -> str:
        done = subprocess.run(
            [str(ROOT / ".venv/bin/orchestrator"), "--home", str(home), *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def containers() -> list[str]:
        return labelled_containers(swarm_engine, f"{HOME_LABEL}={identity}")

    try:
        # on the docker backend: the daemon on the host, a container for the group
        cli("up")
        first = moving.send("mover", "remember that the piano is out of tune")
        assert first.startswith("Noted: the piano is out of tune."), first
        (row,) = json.loads(cli("status", "--json"))["groups"]
        assert row["state"] == "running" and len(containers()) == 1
        transcript = sorted((home / "groups/mover/sessions").rglob("transcript.jsonl"))
        assert transcript, "a session transcript on the docker backend"
        # to swarm: the daemon and the containers stopped, the stopped ones removed
        cli("down", "--all")
        cli("reconcile")
        assert containers() == []
        home.joinpath("orchestrator.yaml").write_text(moving.config())
        moving.up()
        answer = moving.send("mover", "what do you know about the piano?")
        assert "out of tune" in answer  # its memory
        assert sorted((home / "groups/mover/sessions").rglob("transcript.jsonl")) == transcript
        counts = json.loads(moving.cli_inside("status", "--json"))["queue"]["counts"]
        assert counts["done"] == 2  # the queue's records of both backends' turns
        # and back to docker: the stack and the home's services and secrets removed (the
        # stack's runner network stays while groups' services are on it: removed last)
        subprocess.run(["docker", "stack", "rm", project], capture_output=True)
        for service in swarm_engine.api.services(filters={"label": f"{HOME_LABEL}={identity}"}):
            swarm_engine.api.remove_service(service["ID"])
        deadline = time.monotonic() + 60
        while swarm_engine.api.tasks(
            filters={"label": f"{HOME_LABEL}={identity}"}
        ) or labelled_containers(swarm_engine, f"com.docker.stack.namespace={project}", all=False):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        for secret in swarm_engine.api.secrets(filters={"label": f"{HOME_LABEL}={identity}"}):
            for _ in range(40):
                try:
                    swarm_engine.api.remove_secret(secret["ID"])
                    break
                except Exception:
                    time.sleep(0.5)
        subprocess.run(["docker", "network", "rm", moving.network], capture_output=True)
        home.joinpath("orchestrator.yaml").write_text(docker_config)
        deadline = time.monotonic() + 60
        while True:  # the stack's daemon lets go of the home's lock when it has drained
            try:
                cli("up")
                break
            except AssertionError:
                assert time.monotonic() < deadline
                time.sleep(1)
        answer = moving.send("mover", "what do you know about the piano?")
        assert "out of tune" in answer
        assert len(containers()) == 1  # a container again, made at this message
    finally:
        subprocess.run(
            [str(ROOT / ".venv/bin/orchestrator"), "--home", str(home), "down", "--all"],
            capture_output=True,
            timeout=300,
        )
        remove_containers(swarm_engine, f"{HOME_LABEL}={identity}")
        moving.down()
