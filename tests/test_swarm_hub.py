"""The runner port and the runner that dials it, over real TLS on loopback (no engine):
turns with today's frames both ways, a forged, stale, foreign or missing credential
refused, one group's connections never handed to another's turn, the unused ones
bounded and the dead ones skipped, the relay for the home's other processes, and a
runner that finds the daemon again after it restarts."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import wire
from orchestrator.agent.dial import Dialer, client_context, split_address
from orchestrator.agent.serve import RunnerServer
from orchestrator.agent.settings import AgentSettings
from orchestrator.limits import RUNNER_IDLE_PER_GROUP, RUNNER_SPARE_CONNECTIONS
from orchestrator.memory.scaffold import scaffold_memory
from orchestrator.protocol import TurnRequest
from orchestrator.runtime.channel import RunnerClient, RunnerUnavailable
from orchestrator.runtime.swarm.credentials import Authority, Peer, fingerprint
from orchestrator.runtime.swarm.hub import HubEndpoint, RelayEndpoint, RunnerHub
from tests.swarmrig import forged_credential

HOME_ID = "0123456789abcdef"


def wait_until(check, seconds: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


class Rig:
    """A hub on 127.0.0.1 for the home HOME_ID, and what each group was issued."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.authority = Authority(tmp / "state" / "swarm", HOME_ID)
        self.issued: dict[str, str] = {}
        self.hub = self.make_hub(0)

    def make_hub(self, port: int) -> RunnerHub:
        hub = RunnerHub(
            self.authority,
            self.admit,
            server_name="localhost",
            hosts=["127.0.0.1"],
            port=port,
            relay_dir=self.tmp / "state" / "swarm",
        )
        hub.start()
        return hub

    def admit(self, peer: Peer, address: str) -> str | None:
        """As the Swarm backend: the credential its group's service was given."""
        if self.issued.get(peer.group) != peer.fingerprint:
            return f"not the credential group {peer.group!r} was given"
        return None

    @property
    def address(self) -> str:
        return f"localhost:{self.hub.bound[0][1]}"

    def credential(self, group: str) -> Path:
        """A credential issued to ``group`` (its service's), in a file as its secret."""
        issued = self.authority.issue(group)
        self.issued[group] = issued.fingerprint
        path = self.tmp / f"{group}-{issued.fingerprint[:8]}.pem"
        path.write_bytes(issued.bundle)
        return path

    def runner(self, group: str, credential: Path | None = None) -> tuple[RunnerServer, Dialer]:
        """A real runner (the offline provider) of ``group``, dialling the hub."""
        agent = self.tmp / group / "agent"
        scaffold_memory(agent)
        settings = AgentSettings(
            agent_dir=agent,
            runtime_dir=self.tmp / group / "run",
            provider="offline",
            model="offline-rules",
            hooks_file=None,
        )
        server = RunnerServer(settings)
        dialer = Dialer(server, self.address, credential or self.credential(group))
        threading.Thread(target=dialer.run, daemon=True).start()
        return server, dialer


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.hub.close()


def test_a_runner_dials_in_and_answers_turns_over_tls(rig: Rig) -> None:
    server, dialer = rig.runner("fam")
    try:
        wait_until(lambda: rig.hub.idle("fam") == RUNNER_SPARE_CONNECTIONS)
        client = RunnerClient(HubEndpoint(rig.hub, "fam"))
        assert client.ping()
        turn = TurnRequest("t1", "chat", "remember that the cat is called Tom").to_wire()
        answer = client.turn(turn, timeout=30)
        assert answer["ok"] and answer["replies"][0].startswith("Noted: the cat is called Tom.")
        answer = client.turn(
            TurnRequest("t2", "chat", "what do you know about the cat?").to_wire(), timeout=30
        )
        assert "The cat is called Tom" in answer["replies"][0]
        # the memory the runner wrote is where its folder is
        assert "Tom" in (rig.tmp / "fam/agent/memory/facts/the-cat.md").read_text()
        # a connection whose turn ended cleanly serves the next: no handshake per turn
        time.sleep(0.3)
        dialled = dialer.dialled
        for n in range(5):
            assert client.turn(TurnRequest(f"r{n}", "chat", "hello").to_wire(), timeout=30)["ok"]
        time.sleep(0.3)
        assert dialer.dialled == dialled
        assert RUNNER_SPARE_CONNECTIONS <= rig.hub.idle("fam") <= RUNNER_IDLE_PER_GROUP
    finally:
        server.stop()


def test_frames_over_the_connection_keep_their_caps(rig: Rig) -> None:
    server, _ = rig.runner("fam")
    try:
        wait_until(lambda: rig.hub.idle("fam") > 0)
        sock = rig.hub.take("fam", 10)
        with sock:
            wire.send_frame(sock, {"op": "nonsense"})
            assert "unknown op" in (wire.recv_frame(sock, time.monotonic() + 10) or {})["error"]
            # a frame past the cap is a protocol violation: the runner closes this
            # connection (and this one only)
            sock.sendall((wire.MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
            assert wire.recv_frame(sock, time.monotonic() + 10) is None
        wait_until(lambda: rig.hub.idle("fam") > 0)
        assert RunnerClient(HubEndpoint(rig.hub, "fam")).ping()
    finally:
        server.stop()


def _forged_bundle(tmp: Path, group: str, home: str) -> Path:
    path = tmp / f"forged-{group}.pem"
    path.write_bytes(forged_credential(group, home, rig_ca(tmp)))
    return path


def rig_ca(tmp: Path) -> bytes:
    return (tmp / "state" / "swarm" / "ca.pem").read_bytes()


def _shown(rig: Rig, credential: Path) -> str:
    """Connect with ``credential`` and report what the daemon did with it: "kept" (the
    connection stays open, unused), "closed" or the TLS error."""
    context = client_context(credential)
    host, port = split_address(rig.address)
    raw = socket.create_connection((host, port), timeout=5)
    try:
        conn = context.wrap_socket(raw, server_hostname=host)
    except ssl.SSLError as exc:
        raw.close()
        return f"tls: {exc.reason}"
    with conn:
        conn.settimeout(1.0)
        try:
            data = conn.recv(1)
        except TimeoutError:
            return "kept"
        except (ssl.SSLError, OSError) as exc:
            return f"closed: {getattr(exc, 'reason', exc)}"
        return "kept" if data else "closed"


def test_forged_stale_foreign_and_missing_credentials_are_refused(rig: Rig) -> None:
    good = rig.credential("fam")
    assert _shown(rig, good) == "kept"  # the control: the credential its service has
    refused = rig.hub.refused
    # a credential of another CA naming the same group and home
    assert _shown(rig, _forged_bundle(rig.tmp, "fam", HOME_ID)) != "kept"
    # the group's earlier credential, once its service was made again with another
    stale = good
    rig.credential("fam")
    assert _shown(rig, stale) != "kept"
    # one of this CA for the same group name, but of another home
    other_home = Authority(rig.tmp / "state" / "swarm", "fedcba9876543210").issue("fam")
    path = rig.tmp / "other-home.pem"
    path.write_bytes(other_home.bundle)
    rig.issued["fam-other"] = other_home.fingerprint
    assert _shown(rig, path) != "kept"
    # a group with no service (nothing issued for it any more)
    gone = rig.credential("gone")
    del rig.issued["gone"]
    assert _shown(rig, gone) != "kept"
    assert rig.hub.refused == refused + 4
    # no certificate at all; and bytes that are not TLS
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=rig_ca(rig.tmp).decode())
    host, port = split_address(rig.address)
    with (
        socket.create_connection((host, port), timeout=5) as raw,
        contextlib.suppress(ssl.SSLError, OSError),
        context.wrap_socket(raw, server_hostname=host) as conn,
    ):
        conn.settimeout(2)
        assert conn.recv(1) == b""
    with socket.create_connection((host, port), timeout=5) as raw:
        raw.sendall(b"GET / HTTP/1.0\r\n\r\n")
        raw.settimeout(5)
        with contextlib.suppress(ConnectionResetError):  # closed with it unread: a reset
            assert raw.recv(100) == b""
    wait_until(lambda: rig.hub.refused == refused + 6)
    assert rig.hub.idle("fam") == 1  # only the control's connection was ever kept


def test_a_connection_of_one_group_never_takes_another_groups_turn(rig: Rig) -> None:
    beta, _ = rig.runner("beta")
    try:
        wait_until(lambda: rig.hub.idle("beta") == RUNNER_SPARE_CONNECTIONS)
        with pytest.raises(RunnerUnavailable):
            RunnerClient(HubEndpoint(rig.hub, "fam")).turn(
                TurnRequest("t1", "c", "remember that the code is 42").to_wire(), timeout=5
            )
        assert not RunnerClient(HubEndpoint(rig.hub, "fam")).ping()
        assert rig.hub.idle("beta") == RUNNER_SPARE_CONNECTIONS  # untouched
        assert not (rig.tmp / "beta/agent/memory/facts").exists() or not any(
            "42" in p.read_text() for p in (rig.tmp / "beta/agent/memory/facts").iterdir()
        )
    finally:
        beta.stop()


def test_unused_connections_are_bounded_and_dead_ones_skipped(rig: Rig) -> None:
    credential = rig.credential("fam")
    context = client_context(credential)
    host, port = split_address(rig.address)
    opened = []
    for _ in range(RUNNER_IDLE_PER_GROUP + 5):
        raw = socket.create_connection((host, port), timeout=5)
        opened.append(context.wrap_socket(raw, server_hostname=host))
    try:
        wait_until(lambda: rig.hub.idle("fam") == RUNNER_IDLE_PER_GROUP)
        time.sleep(0.2)
        assert rig.hub.idle("fam") == RUNNER_IDLE_PER_GROUP
    finally:
        for conn in opened:
            conn.close()  # every runner end goes away unseen by the hub
    with pytest.raises(RunnerUnavailable):
        rig.hub.take("fam", 1.0)  # none of the dead ones is handed out
    assert rig.hub.idle("fam") == 0


def test_the_homes_other_processes_reach_a_runner_through_the_relay(rig: Rig) -> None:
    server, _ = rig.runner("fam")
    try:
        wait_until(lambda: rig.hub.idle("fam") > 0)
        relay = RelayEndpoint(rig.tmp / "state" / "swarm" / "runners.sock", "fam")
        client = RunnerClient(relay)
        assert client.ping()
        answer = client.turn(
            TurnRequest("t1", "c", "remember that the boiler is in the cellar").to_wire(),
            timeout=30,
        )
        assert answer["replies"][0].startswith("Noted: the boiler is in the cellar.")
        with pytest.raises(RunnerUnavailable, match="no runner of group 'other'"):
            RelayEndpoint(relay.path, "other").connect(5)
    finally:
        server.stop()
    rig.hub.close()
    with pytest.raises(RunnerUnavailable, match="no daemon relays"):
        RelayEndpoint(rig.tmp / "state" / "swarm" / "runners.sock", "fam").connect(2)


def test_a_runner_finds_the_daemon_again_after_it_restarts(rig: Rig) -> None:
    server, _ = rig.runner("fam")
    try:
        wait_until(lambda: rig.hub.idle("fam") == RUNNER_SPARE_CONNECTIONS)
        port = rig.hub.bound[0][1]
        rig.hub.close()
        rig.hub = rig.make_hub(port)  # a new daemon: a new certificate, the same CA
        wait_until(lambda: rig.hub.idle("fam") == RUNNER_SPARE_CONNECTIONS, 20)
        assert RunnerClient(HubEndpoint(rig.hub, "fam")).ping()
    finally:
        server.stop()


def test_the_credential_names_its_group_and_home_and_is_pinned_by_fingerprint(
    tmp_path: Path,
) -> None:
    from cryptography import x509

    authority = Authority(tmp_path / "swarm", HOME_ID)
    first, second = authority.issue("fam"), authority.issue("fam")
    assert first.fingerprint != second.fingerprint  # a new key each time
    certificate = x509.load_pem_x509_certificate(first.bundle)
    subject = {a.oid._name: a.value for a in certificate.subject}
    assert subject == {"commonName": "fam", "organizationName": HOME_ID}
    from cryptography.hazmat.primitives import serialization

    assert fingerprint(certificate.public_bytes(serialization.Encoding.DER)) == first.fingerprint
    # the CA's key stays in the home, readable by its owner only
    assert (tmp_path / "swarm" / "ca.key").stat().st_mode & 0o777 == 0o600
    assert b"PRIVATE KEY" not in (tmp_path / "swarm" / "ca.pem").read_bytes()
    # the bundle holds the group's key, never the CA's
    ca_key = (tmp_path / "swarm" / "ca.key").read_bytes()
    assert ca_key not in first.bundle


def test_a_runner_that_says_more_after_its_answer_loses_the_connection(rig: Rig) -> None:
    context = client_context(rig.credential("fam"))
    host, port = split_address(rig.address)
    runner = context.wrap_socket(socket.create_connection((host, port)), server_hostname=host)
    wait_until(lambda: rig.hub.idle("fam") == 1)

    def answer_and_more() -> None:
        frame = wire.recv_frame(runner)
        assert frame is not None and frame["op"] == "ping"
        wire.send_frame(runner, {"ok": True})
        wire.send_frame(runner, {"ok": True, "turn_id": "a later turn's", "replies": ["forged"]})

    thread = threading.Thread(target=answer_and_more)
    thread.start()
    try:
        assert RunnerClient(HubEndpoint(rig.hub, "fam")).ping()
        thread.join(5)
        assert rig.hub.idle("fam") == 1  # given back after a clean answer...
        time.sleep(0.2)
        with pytest.raises(RunnerUnavailable):  # ...but it spoke out of turn: dropped
            rig.hub.take("fam", 1.0)
    finally:
        runner.close()
