"""Exact behaviour of the Swarm backend's parts that need no engine: the runner CA
(swarm/credentials.py) with real certificates in a temp folder, the storage check
(swarm/storage.py) against a recorded fake of the engine's API, and this machine's
addresses and the ones on a network (swarm/addresses.py)."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import os
import ssl
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from orchestrator.errors import InvalidConfig
from orchestrator.limits import RUNNER_CREDENTIAL_DAYS
from orchestrator.runtime.base import LABEL_HOME
from orchestrator.runtime.swarm import addresses, storage
from orchestrator.runtime.swarm.credentials import (
    Authority,
    Credential,
    Peer,
    fingerprint,
)

HOME_ID = "0123456789abcdef"
VALIDITY = datetime.timedelta(days=RUNNER_CREDENTIAL_DAYS, minutes=5)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def names(name: x509.Name) -> list[tuple[str, str]]:
    return [(a.oid.dotted_string, str(a.value)) for a in name]


def split_bundle(bundle: bytes) -> tuple[x509.Certificate, Any, x509.Certificate]:
    certs = x509.load_pem_x509_certificates(bundle)
    key = serialization.load_pem_private_key(bundle, None)
    return certs[0], key, certs[1]


# credentials: the CA


def test_the_ca_is_made_once_with_private_files_in_a_private_folder(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "swarm"
    folder.mkdir(parents=True, mode=0o755)
    os.chmod(folder, 0o755)
    authority = Authority(folder, HOME_ID)
    pem = authority.ca_pem()
    assert mode(folder) == 0o700
    assert mode(folder / "ca.key") == 0o600
    assert mode(folder / "ca.pem") == 0o644
    assert mode(folder / ".lock") == 0o600
    assert (folder / "ca.pem").read_bytes() == pem
    assert (folder / "ca.key").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----\n")
    # a second authority on the folder reads the same CA; the first keeps the one it read
    assert Authority(folder, HOME_ID).ca_pem() == pem
    (folder / "ca.pem").unlink()
    (folder / "ca.key").unlink()
    assert authority.ca_pem() == pem


def test_a_new_folders_parents_are_made_private(tmp_path: Path) -> None:
    folder = tmp_path / "a" / "b"
    Authority(folder, HOME_ID).ca_pem()
    assert mode(folder) == 0o700


def test_the_ca_certificate_is_a_p256_ca_for_the_home_for_the_credential_days(
    tmp_path: Path,
) -> None:
    authority = Authority(tmp_path, HOME_ID)
    cert = x509.load_pem_x509_certificate(authority.ca_pem())
    key = serialization.load_pem_private_key((tmp_path / "ca.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp256r1"
    assert names(cert.subject) == [
        (NameOID.ORGANIZATION_NAME.dotted_string, HOME_ID),
        (NameOID.COMMON_NAME.dotted_string, f"orchestrator runner CA {HOME_ID}"),
    ]
    assert cert.issuer == cert.subject
    assert cert.public_key() == key.public_key()
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == VALIDITY
    assert cert.signature_hash_algorithm is not None
    assert cert.signature_hash_algorithm.name == "sha256"
    cert.verify_directly_issued_by(cert)
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical is True
    assert basic.value == x509.BasicConstraints(ca=True, path_length=0)
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical is True
    assert usage.value == x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    assert len(cert.extensions) == 2


def test_the_ca_is_made_and_the_server_file_written_under_an_exclusive_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    from orchestrator.runtime.swarm import credentials

    held: list[str] = []

    def try_lock(what: str) -> None:
        fd = os.open(tmp_path / ".lock", os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            held.append(what)
        finally:
            os.close(fd)

    make_ca = Authority._make_ca
    write_atomic = credentials.write_atomic

    def making(self: Authority, cert_path: Path, key_path: Path) -> None:
        try_lock("ca")
        make_ca(self, cert_path, key_path)

    def writing(path: Path, data: bytes, **kwargs: Any) -> None:
        if path.name == "server.pem":
            try_lock("server")
        write_atomic(path, data, **kwargs)

    monkeypatch.setattr(Authority, "_make_ca", making)
    monkeypatch.setattr(credentials, "write_atomic", writing)
    authority = Authority(tmp_path, HOME_ID)
    authority.server_context("daemon")
    assert held == ["ca", "server"]
    try_lock("after")
    assert held == ["ca", "server"]


class FixedNow(datetime.datetime):
    """datetime at a fixed instant: the UTC one when asked with the UTC zone, the same
    wall time an hour ahead when asked for the local time."""

    NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=datetime.UTC)

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
        if tz is datetime.UTC:
            return cls.NOW
        return cls.NOW.replace(tzinfo=None) + datetime.timedelta(hours=1)


def test_certificates_are_valid_from_five_minutes_ago_in_utc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runtime.swarm import credentials

    monkeypatch.setattr(
        credentials,
        "datetime",
        SimpleNamespace(datetime=FixedNow, timedelta=datetime.timedelta, UTC=datetime.UTC),
    )
    authority = Authority(tmp_path, HOME_ID)
    start = datetime.datetime(2026, 1, 2, 2, 59, 5, tzinfo=datetime.UTC)
    end = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC) + datetime.timedelta(
        days=RUNNER_CREDENTIAL_DAYS
    )
    ca = x509.load_pem_x509_certificate(authority.ca_pem())
    leaf = x509.load_pem_x509_certificate(authority.issue("family").bundle)
    for cert in (ca, leaf):
        assert cert.not_valid_before_utc == start
        assert cert.not_valid_after_utc == end


@pytest.mark.parametrize("missing", ["ca.pem", "ca.key"])
def test_a_ca_missing_either_file_is_made_again(tmp_path: Path, missing: str) -> None:
    first = Authority(tmp_path, HOME_ID).ca_pem()
    (tmp_path / missing).unlink()
    again = Authority(tmp_path, HOME_ID).ca_pem()
    assert again != first
    assert (tmp_path / "ca.pem").read_bytes() == again


def test_an_unreadable_ca_says_where_and_what_to_do(tmp_path: Path) -> None:
    Authority(tmp_path, HOME_ID).ca_pem()
    (tmp_path / "ca.key").write_bytes(b"not a key")
    with pytest.raises(InvalidConfig) as info:
        Authority(tmp_path, HOME_ID).ca_pem()
    assert info.value.message.startswith(f"the runner CA in {tmp_path} cannot be read (")
    assert info.value.message.endswith(")")
    assert info.value.hint == (
        f"move {tmp_path} aside: a new CA is made and every group's service is made "
        "again with a new credential at its next start"
    )
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_unreadable_ca_file_is_reported_not_raised_as_an_os_error(tmp_path: Path) -> None:
    Authority(tmp_path, HOME_ID).ca_pem()
    (tmp_path / "ca.pem").unlink()
    (tmp_path / "ca.pem").mkdir()
    with pytest.raises(InvalidConfig) as info:
        Authority(tmp_path, HOME_ID).ca_pem()
    assert info.value.message == (
        f"the runner CA in {tmp_path} cannot be read "
        f"([Errno 21] Is a directory: '{tmp_path / 'ca.pem'}')"
    )


def test_a_ca_key_of_another_kind_is_refused(tmp_path: Path) -> None:
    Authority(tmp_path, HOME_ID).ca_pem()
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "ca.key").write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(InvalidConfig) as info:
        Authority(tmp_path, HOME_ID).ca_pem()
    assert info.value.message == f"{tmp_path / 'ca.key'} is not the key this CA makes (EC P-256)"
    assert info.value.hint is None


# credentials: a group's credential


def test_a_groups_credential_is_its_client_certificate_its_key_and_the_ca(
    tmp_path: Path,
) -> None:
    authority = Authority(tmp_path, HOME_ID)
    issued = authority.issue("family")
    assert isinstance(issued, Credential)
    cert, key, ca = split_bundle(issued.bundle)
    ca_pem = authority.ca_pem()
    assert issued.bundle == (
        cert.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + ca_pem
    )
    assert ca.public_bytes(serialization.Encoding.PEM) == ca_pem
    der = cert.public_bytes(serialization.Encoding.DER)
    assert issued.fingerprint == hashlib.sha256(der).hexdigest()
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp256r1"
    assert cert.public_key() == key.public_key()
    assert names(cert.subject) == [
        (NameOID.ORGANIZATION_NAME.dotted_string, HOME_ID),
        (NameOID.COMMON_NAME.dotted_string, "family"),
    ]
    assert cert.issuer == ca.subject
    cert.verify_directly_issued_by(ca)
    assert cert.signature_hash_algorithm is not None
    assert cert.signature_hash_algorithm.name == "sha256"
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == VALIDITY
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical is True
    assert basic.value == x509.BasicConstraints(ca=False, path_length=None)
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert usage.critical is False
    assert list(usage.value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert len(cert.extensions) == 2
    # each credential is new: another key, another certificate
    assert authority.issue("family").fingerprint != issued.fingerprint


def test_the_fingerprint_is_the_sha256_of_the_der() -> None:
    assert fingerprint(b"") == ("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")


# credentials: the daemon's side


def test_the_servers_context_is_tls13_with_a_certificate_for_its_name_and_clients_required(
    tmp_path: Path,
) -> None:
    authority = Authority(tmp_path, HOME_ID)
    context = authority.server_context("orchestrator-daemon")
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.num_tickets == 0
    assert context.protocol == ssl.PROTOCOL_TLS_SERVER
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("organizationName", HOME_ID),), (("commonName", f"orchestrator runner CA {HOME_ID}"),))
    ]
    server = tmp_path / "server.pem"
    assert mode(server) == 0o600
    cert, key, _ = split_bundle(server.read_bytes() + authority.ca_pem())
    assert cert.public_key() == key.public_key()
    assert names(cert.subject) == [(NameOID.COMMON_NAME.dotted_string, "orchestrator-daemon")]
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(authority.ca_pem()))
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == VALIDITY
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert list(usage.value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert alt.critical is False
    assert alt.value.get_values_for_type(x509.DNSName) == ["orchestrator-daemon"]
    basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert basic.critical is True
    assert basic.value == x509.BasicConstraints(ca=False, path_length=None)
    assert len(cert.extensions) == 3


class Conn:
    """What identify reads of a TLS connection."""

    def __init__(self, der: bytes | None, details: dict[str, Any] | None) -> None:
        self.der, self.details = der, details

    def getpeercert(self, binary_form: bool = False) -> Any:
        return self.der if binary_form else self.details


def subject(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"subject": tuple(((k, v),) for k, v in pairs)}


def test_identify_names_the_group_and_home_of_a_certificate(tmp_path: Path) -> None:
    authority = Authority(tmp_path, HOME_ID)
    details = subject(("organizationName", HOME_ID), ("commonName", "family"))
    assert authority.identify(Conn(b"der", details)) == Peer(  # type: ignore[arg-type]
        "family", HOME_ID, fingerprint(b"der")
    )
    # several pairs in one relative name are each read
    both = {"subject": ((("organizationName", HOME_ID), ("commonName", "team")),)}
    assert authority.identify(Conn(b"x", both)).group == "team"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("der", "details", "error"),
    [
        (None, subject(("organizationName", HOME_ID), ("commonName", "g")), "no certificate"),
        (b"", subject(("organizationName", HOME_ID), ("commonName", "g")), "no certificate"),
        (b"der", {}, "no certificate"),
        (b"der", None, "no certificate"),
        (b"der", {"issuer": ((("commonName", "x"),),)}, "a credential of another home (none)"),
        (
            b"der",
            subject(("organizationName", "fedcba9876543210"), ("commonName", "g")),
            "a credential of another home (fedcba9876543210)",
        ),
        (b"der", subject(("commonName", "g")), "a credential of another home (none)"),
        (
            b"der",
            subject(("organizationName", HOME_ID)),
            f"a credential of another home ({HOME_ID})",
        ),
        (
            b"der",
            subject(("organizationName", HOME_ID), ("commonName", "")),
            f"a credential of another home ({HOME_ID})",
        ),
    ],
)
def test_identify_refuses_no_certificate_another_home_or_no_group(
    tmp_path: Path, der: bytes | None, details: dict[str, Any] | None, error: str
) -> None:
    with pytest.raises(ValueError) as info:
        Authority(tmp_path, HOME_ID).identify(Conn(der, details))  # type: ignore[arg-type]
    assert str(info.value) == error


# storage


class Api:
    """The engine API calls of the storage check, recorded; each node's task reads what
    ``reads`` says (the probe's token when absent from it)."""

    def __init__(self, groups: Path, nodes: list[dict[str, Any]]) -> None:
        self.groups = groups
        self.node_list = nodes
        self.calls: list[tuple[Any, ...]] = []
        self.tasks_answer: list[dict[str, Any]] | None = None
        self.logs: list[Any] | None = None
        self.probe_seen: str | None = None

    def create_service(self, task: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("create", task, kwargs))
        probe = self.groups / ".orchestrator-storage-probe"
        self.probe_seen = probe.read_text()
        self.probe_mode = probe.stat().st_mode & 0o777
        return {"ID": "svc1"}

    def remove_service(self, service: str) -> None:
        self.calls.append(("remove", service))

    def tasks(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.calls.append(("tasks", filters))
        assert self.tasks_answer is not None
        return self.tasks_answer

    def service_logs(self, service: str, **kwargs: Any) -> list[Any]:
        self.calls.append(("logs", service, kwargs))
        assert self.probe_seen is not None
        token = self.probe_seen.strip()
        if self.logs is None:
            return [f"probe {n['ID']} {token}\n".encode() for n in self.node_list]
        return [
            chunk.replace(b"TOKEN", token.encode())
            if isinstance(chunk, bytes)
            else chunk.replace("TOKEN", token)
            for chunk in self.logs
        ]

    def nodes(self) -> list[dict[str, Any]]:
        return self.node_list


def backend(
    tmp: Path, constraints: tuple[str, ...] = (), host_home: str | None = None
) -> tuple[Any, Api]:
    root = tmp / "home"
    groups = root / "groups"
    nodes = [
        {"ID": "n1", "Description": {"Hostname": "alpha"}},
        {"ID": "n2", "Description": {"Hostname": "beta"}},
        {"ID": "n3"},
    ]
    api = Api(groups, nodes)
    made = SimpleNamespace(
        config=SimpleNamespace(host_home=host_home),
        home=SimpleNamespace(root=root, groups_dir=groups, identity=HOME_ID),
        settings=SimpleNamespace(constraints=list(constraints)),
        api=api,
    )
    return made, api


def ended(node: str, state: str = "complete", err: str = "", created: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"State": state}
    if err:
        status["Err"] = err
    task: dict[str, Any] = {"NodeID": node, "Status": status}
    if created:
        task["CreatedAt"] = created
    return task


def test_the_groups_folder_is_where_the_engines_see_the_home(tmp_path: Path) -> None:
    made, _ = backend(tmp_path)
    assert storage.host_groups_dir(made) == tmp_path / "home" / "groups"
    made, _ = backend(tmp_path, host_home="/srv/orch")
    assert storage.host_groups_dir(made) == Path("/srv/orch/groups")


def test_every_node_seeing_the_token_is_no_problem_and_the_probe_service_is_exact(
    tmp_path: Path,
) -> None:
    made, api = backend(tmp_path, constraints=("node.role==worker",), host_home="/srv/o")
    api.tasks_answer = [ended("n1"), ended("n2"), ended("n3")]
    assert storage.check_storage(made, "agent:1") == []
    create, tasks, logs, remove = api.calls
    assert api.probe_seen is not None
    token = api.probe_seen.removesuffix("\n")
    assert len(token) == 32 and int(token, 16) >= 0
    assert api.probe_seen == token + "\n"
    assert api.probe_mode == 0o644
    name = f"orchestrator-probe-{HOME_ID}-{token[:8]}"
    assert create == (
        "create",
        {
            "ContainerSpec": {
                "Image": "agent:1",
                "Args": ["python3", "-c", storage.READER],
                "Env": ["NODE={{.Node.ID}}"],
                "User": "0:0",
                "ReadOnly": True,
                "CapabilityDrop": ["ALL"],
                "Mounts": [
                    {
                        "Type": "bind",
                        "Source": "/srv/o/groups",
                        "Target": "/probe",
                        "ReadOnly": True,
                    }
                ],
            },
            "RestartPolicy": {"Condition": "none"},
            "Placement": {"Constraints": ["node.role==worker"]},
        },
        {"name": name, "labels": {LABEL_HOME: HOME_ID}, "mode": {"Global": {}}},
    )
    assert tasks == ("tasks", {"service": "svc1"})
    assert logs == ("logs", "svc1", {"stdout": True, "stderr": True, "follow": False})
    assert remove == ("remove", "svc1")
    assert not (tmp_path / "home" / "groups" / storage.PROBE_FILE).exists()


def test_the_reader_prints_the_node_and_what_it_read(tmp_path: Path) -> None:
    import subprocess
    import sys

    groups = tmp_path / "probe"
    groups.mkdir()
    reader = storage.READER.replace("/probe/", f"{groups}/")
    env = {**os.environ, "NODE": "n7"}
    run = subprocess.run([sys.executable, "-c", reader], env=env, capture_output=True, text=True)
    assert run.stdout == "probe n7 unreadable: No such file or directory\n"
    (groups / storage.PROBE_FILE).write_text("abc\n")
    run = subprocess.run([sys.executable, "-c", reader], env=env, capture_output=True, text=True)
    assert run.stdout == "probe n7 abc\n"


def test_each_node_that_sees_something_else_is_named_by_its_host_name(tmp_path: Path) -> None:
    made, api = backend(tmp_path)
    api.tasks_answer = [
        ended("n1"),
        ended("n2"),
        ended("n3", "failed", "starting container failed"),
        ended("n4", "rejected"),
    ]
    api.logs = [
        b"probe n1 TOKEN\nprobe n2 0f0f\n",
        "probe n4 unreadable: Permission denied\n",
        b"noise\n",
    ]
    groups = tmp_path / "home" / "groups"
    assert storage.check_storage(made, "agent:1") == [
        f"node beta: {groups} is another folder there",
        "node n3: the probe did not run (failed: starting container failed)",
        f"node n4: {groups} is unreadable: Permission denied there",
    ]


def test_a_node_whose_task_said_nothing_is_named_with_no_output(tmp_path: Path) -> None:
    made, api = backend(tmp_path)
    api.tasks_answer = [ended("n1", "shutdown")]
    api.logs = []
    assert storage.check_storage(made, "agent:1") == [
        "node alpha: the probe did not run (shutdown: no output)"
    ]


def test_no_node_to_run_on_names_the_constraints(tmp_path: Path) -> None:
    made, api = backend(tmp_path, constraints=("node.labels.a==1", "node.role==worker"))
    api.tasks_answer = []
    clock = Clock()
    original = storage.time
    storage.time = clock  # type: ignore[assignment]
    try:
        problems = storage.check_storage(made, "agent:1")
    finally:
        storage.time = original
    assert problems == [
        "no node may run the groups (constraints: node.labels.a==1, node.role==worker)"
    ]
    made, api = backend(tmp_path)
    api.tasks_answer = []
    storage.time = clock  # type: ignore[assignment]
    try:
        assert storage.check_storage(made, "agent:1") == ["no node may run the groups"]
    finally:
        storage.time = original


class Clock:
    """time for storage._wait: each sleep moves the clock on."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class TaskList:
    """The tasks of a service as the engine lists them, one answer per poll."""

    def __init__(self, *answers: list[dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.polls = 0

    def __call__(self, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.polls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def wait_with(monkeypatch: pytest.MonkeyPatch, tasks: TaskList) -> tuple[Any, Clock]:
    clock = Clock()
    monkeypatch.setattr(storage, "time", clock)
    return SimpleNamespace(api=SimpleNamespace(tasks=tasks)), clock


def test_the_wait_polls_until_every_task_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = TaskList(
        [],
        [ended("n1"), {"NodeID": "n2", "Status": {"State": "running"}}],
        [ended("n1"), ended("n2", "failed", "boom")],
    )
    made, clock = wait_with(monkeypatch, tasks)
    assert storage._wait(made, "svc") == [("n1", "complete", ""), ("n2", "failed", "boom")]
    assert tasks.polls == 3
    assert clock.slept == [0.2, 0.2]


def test_the_wait_gives_up_after_the_probe_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = TaskList([{"NodeID": "n1", "Status": {"State": "running"}}, {"NodeID": "n2"}])
    made, clock = wait_with(monkeypatch, tasks)
    monkeypatch.setattr(storage, "POLL_SECONDS", 1.0)
    monkeypatch.setattr(storage, "STORAGE_PROBE_TIMEOUT_SECONDS", 3.0)
    assert storage._wait(made, "svc") == [("n1", "running", ""), ("n2", "None", "")]
    # polled at 0, 1, 2 and 3 seconds (not yet past the deadline), and at 4 it is
    assert tasks.polls == 5
    assert clock.slept == [1.0, 1.0, 1.0, 1.0]


def test_the_wait_keeps_each_nodes_newest_task_and_skips_tasks_of_no_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks = TaskList(
        [
            ended("n2", "failed", "old", "2026-01-01T00:00:02.5Z"),
            ended("n2", "complete", "", "2026-01-01T00:00:03.1Z"),
            ended("n2", "rejected", "older", "2026-01-01T00:00:01Z"),
            ended("n1", "failed", "first", "2026-01-01T00:00:05Z"),
            ended("n1", "complete", "", "2026-01-01T00:00:05Z"),
            ended("n3", "failed", "undated"),
            ended("n3", "complete", "", "1970-01-01T00:00:00.5Z"),
            ended("n4", "complete", "", "1970-01-01T00:00:00.5Z"),
            ended("n4", "failed", "undated"),
            ended("", "failed", "no node"),
            {"Status": {"State": "complete"}},
        ]
    )
    made, _ = wait_with(monkeypatch, tasks)
    assert storage._wait(made, "svc") == [
        ("n1", "failed", "first"),
        ("n2", "complete", ""),
        ("n3", "complete", ""),
        ("n4", "complete", ""),
    ]


def test_a_task_with_no_status_is_not_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = TaskList([{"NodeID": "n1"}], [ended("n1")])
    made, _ = wait_with(monkeypatch, tasks)
    assert storage._wait(made, "svc") == [("n1", "complete", "")]
    assert tasks.polls == 2


def test_the_seen_tokens_are_read_from_the_log_lines(tmp_path: Path) -> None:
    log = [
        b"probe n1 abc  \r\nprobe n2 unreadable: No such file or directory\n",
        "2026-01-01 stamp probe n3 def\n",
        b"probe \n",
        b"probe n4\n",
        b"\xff probe n5 g\xffh\n",
        b"nothing here\n",
    ]
    made = SimpleNamespace(api=SimpleNamespace(service_logs=lambda *a, **k: log))
    assert storage._seen(made, "svc") == {
        "n1": "abc",
        "n2": "unreadable: No such file or directory",
        "n3": "def",
        "n4": "",
        "n5": "g\ufffdh",
    }


def test_the_probe_service_is_removed_and_the_token_too_when_the_wait_fails(
    tmp_path: Path,
) -> None:
    made, api = backend(tmp_path)

    def tasks(filters: dict[str, Any]) -> list[dict[str, Any]]:
        raise RuntimeError("engine gone")

    api.tasks = tasks  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="engine gone"):
        storage.check_storage(made, "agent:1")
    assert api.calls[-1] == ("remove", "svc1")
    assert not (tmp_path / "home" / "groups" / storage.PROBE_FILE).exists()


def test_a_refused_probe_service_names_it(tmp_path: Path) -> None:
    from docker.errors import APIError

    made, api = backend(tmp_path)

    def refuse(task: dict[str, Any], **kwargs: Any) -> None:
        api.probe_seen = (tmp_path / "home" / "groups" / storage.PROBE_FILE).read_text()
        raise APIError("Conflict", explanation="name in use")

    api.create_service = refuse  # type: ignore[method-assign]
    from orchestrator.errors import EngineError

    with pytest.raises(EngineError) as info:
        storage.check_storage(made, "agent:1")
    assert api.probe_seen is not None
    name = f"orchestrator-probe-{HOME_ID}-{api.probe_seen[:8]}"
    assert info.value.message == f"engine refused create service {name}: name in use"
    assert api.calls == []
    assert not (tmp_path / "home" / "groups" / storage.PROBE_FILE).exists()


@pytest.mark.parametrize(
    ("call", "what"),
    [
        ("tasks", "list the tasks of service svc1"),
        ("service_logs", "read the log of service svc1"),
        ("nodes", "list nodes"),
    ],
)
def test_an_engine_refusal_while_probing_names_the_call(
    tmp_path: Path, call: str, what: str
) -> None:
    from docker.errors import APIError

    from orchestrator.errors import EngineError

    made, api = backend(tmp_path)
    api.tasks_answer = [{"NodeID": n["ID"], "Status": {"State": "complete"}} for n in api.node_list]

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise APIError("Bad Request", explanation="node is not a swarm manager")

    setattr(api, call, refuse)
    with pytest.raises(EngineError) as info:
        storage.check_storage(made, "agent:1")
    assert info.value.message == f"engine refused {what}: node is not a swarm manager"
    assert ("remove", "svc1") in api.calls
    assert not (tmp_path / "home" / "groups" / storage.PROBE_FILE).exists()


def test_a_probe_service_that_cannot_be_removed_still_gives_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    import requests
    import tenacity

    monkeypatch.setattr(tenacity.nap, "time", SimpleNamespace(sleep=lambda _: None))
    made, api = backend(tmp_path)
    api.tasks_answer = [ended("n1")]

    def away(service: str) -> None:
        raise requests.ConnectionError("connection reset")

    api.remove_service = away  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="orchestrator.runtime.engine"):
        assert storage.check_storage(made, "agent:1") == []
    assert api.probe_seen is not None
    name = f"orchestrator-probe-{HOME_ID}-{api.probe_seen[:8]}"
    assert caplog.records[0].getMessage() == (
        f"engine call remove service {name} failed (connection reset); retry 1 of 4"
    )


def test_a_probe_file_removed_meanwhile_is_no_error(tmp_path: Path) -> None:
    made, api = backend(tmp_path)
    api.tasks_answer = [ended("n1")]
    create = api.create_service

    def create_then_remove(task: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        made_service = create(task, **kwargs)
        (tmp_path / "home" / "groups" / storage.PROBE_FILE).unlink()
        return made_service

    api.create_service = create_then_remove  # type: ignore[method-assign]
    assert storage.check_storage(made, "agent:1") == []


# addresses


def test_this_machines_addresses_include_the_loopback() -> None:
    found = addresses.local_addresses()
    assert "127.0.0.1" in found
    inet6 = Path("/proc/net/if_inet6")
    has_v6 = inet6.exists() and any(
        line.split()[0] == "0" * 31 + "1" for line in inet6.read_text().splitlines()
    )
    assert ("::1" in found) == has_v6
    assert all(ipaddress.ip_address(a) for a in found)


def test_the_addresses_are_each_interfaces_ipv4_then_the_ipv6_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    # an interface the kernel does not know has no IPv4 address: it is skipped
    monkeypatch.setattr(
        addresses.socket, "if_nameindex", lambda: [(1, "lo"), (9, "absent0"), (1, "lo")]
    )
    opened: list[str] = []

    def fake_open(path: str) -> io.StringIO:
        opened.append(path)
        return io.StringIO(
            "fe8000000000000000fc00fffe000001 04 40 20 80     eth0\n"
            "00000000000000000000000000000001 01 80 10 80       lo\n"
        )

    monkeypatch.setattr(addresses, "open", fake_open, raising=False)
    assert addresses.local_addresses() == ["127.0.0.1", "127.0.0.1", "fe80::fc:ff:fe00:1", "::1"]
    assert opened == ["/proc/net/if_inet6"]


def test_without_ipv6_the_addresses_are_the_ipv4_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_file(path: str) -> None:
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(addresses.socket, "if_nameindex", lambda: [(1, "lo")])
    monkeypatch.setattr(addresses, "open", no_file, raising=False)
    assert addresses.local_addresses() == ["127.0.0.1"]


def test_networks_take_a_host_address_as_its_network() -> None:
    assert addresses.networks(["10.0.2.7/24", "fd00::1/64"]) == [
        ipaddress.ip_network("10.0.2.0/24"),
        ipaddress.ip_network("fd00::/64"),
    ]


def test_inside_and_outside_split_the_addresses_by_network() -> None:
    subnets = addresses.networks(["10.0.2.0/24", "fd00::/64"])
    found = ["10.0.2.7", "10.0.3.1", "127.0.0.1", "fd00::5", "fd01::5", "fe80::1", "::1"]
    assert addresses.inside(found, subnets) == ["10.0.2.7", "fd00::5"]
    assert addresses.inside(found, []) == []
    assert addresses.outside(found, subnets, v6=False) == ["10.0.3.1", "127.0.0.1"]
    assert addresses.outside(found, subnets, v6=True) == ["10.0.3.1", "127.0.0.1", "fd01::5", "::1"]
    assert addresses.outside(["169.254.1.1"], [], v6=False) == ["169.254.1.1"]
