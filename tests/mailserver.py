"""Real mail servers for the email tests and benchmark: Debian's Dovecot (IMAP, LMTP
and the SMTP login's SASL) and Postfix (SMTP), installed by scripts/setup-mail and
started here on free loopback ports with configurations written to a temporary folder.

Mail sent to ``@example.test`` over SMTP goes Postfix -> LMTP -> Dovecot, into the
recipient's Maildir; each user logs in to IMAP and to SMTP with its password. Both
servers run in the foreground as children of this process and are ended with it; no
system-wide service is configured or started. They need root (Postfix's master starts
as root and gives its work to the ``postfix`` user): elsewhere ``unavailable`` says so.
"""

from __future__ import annotations

import contextlib
import email.utils
import imaplib
import os
import shutil
import smtplib
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path

DOMAIN = "example.test"
PROGRAMS = (
    "/usr/sbin/dovecot",
    "/usr/lib/dovecot/imap",
    "/usr/lib/dovecot/lmtp",
    "/usr/sbin/postfix",
)
# Dovecot without IDLE among its capabilities: the channel polls
NO_IDLE = "imap_capability = IMAP4rev1 LITERAL+ SASL-IR LOGIN-REFERRALS ID ENABLE UIDPLUS\n"


def unavailable() -> str | None:
    """Why the mail servers cannot run here, or None."""
    missing = [p for p in PROGRAMS if not os.access(p, os.X_OK)]
    if missing:
        return f"{', '.join(missing)} missing: run scripts/setup-mail (as root)"
    if os.geteuid() != 0:
        return "Postfix's master must start as root to run a test instance"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}): {_tail(log)}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port}: {_tail(log)}")


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-3000:]
    except OSError:
        return "(no log)"


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key (the tests' own CA)."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


@dataclass
class MailServers:
    """Dovecot and Postfix of one test: their ports, users and the CA file to trust."""

    root: Path
    imap_port: int
    imaps_port: int
    smtp_port: int
    smtps_port: int
    lmtp_port: int
    auth_port: int
    ca_file: Path
    idle: bool = True
    passwords: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    # users

    def add_user(self, local: str, password: str | None = None) -> str:
        """A mailbox ``local@example.test`` with ``password``; its address."""
        address = f"{local}@{DOMAIN}"
        self.passwords[address] = password or f"pw-{local}-{os.urandom(6).hex()}"
        lines = [f"{a}:{{PLAIN}}{p}::::::" for a, p in self.passwords.items()]
        passwd = self.root / "passwd"
        passwd.write_text("\n".join(lines) + "\n")
        shutil.chown(passwd, "dovecot", "dovecot")
        passwd.chmod(0o640)
        return address

    def imap_url(self, tls: bool = True) -> str:
        return (
            f"imaps://127.0.0.1:{self.imaps_port}" if tls else f"imap://127.0.0.1:{self.imap_port}"
        )

    def smtp_url(self, tls: bool = True) -> str:
        return (
            f"smtps://127.0.0.1:{self.smtps_port}" if tls else f"smtp://127.0.0.1:{self.smtp_port}"
        )

    # mail

    def send(self, message: EmailMessage, sender: str | None = None) -> None:
        """Deliver ``message`` over SMTP as a correspondent's client does (logged in as
        ``sender`` when it has a mailbox here; the envelope sender is ``sender``, ``<>``
        for a bounce)."""
        envelope = sender if sender is not None else str(message["From"] or "")
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=30) as client:
            client.ehlo()
            if envelope in self.passwords:
                client.login(envelope, self.passwords[envelope])
            client.send_message(message, from_addr=envelope or "<>")

    def send_raw(self, raw: bytes, sender: str, to: str) -> None:
        """Deliver ``raw`` bytes as they are (a signed mail must not be re-encoded)."""
        with smtplib.SMTP("127.0.0.1", self.smtp_port, timeout=30) as client:
            client.login(sender, self.passwords[sender])
            client.sendmail(sender, [to], raw)

    def imap(self, address: str) -> imaplib.IMAP4:
        client = imaplib.IMAP4("127.0.0.1", self.imap_port, timeout=30)
        client.login(address, self.passwords[address])
        return client

    def inbox(self, address: str) -> list[EmailMessage]:
        """Every message in ``address``'s INBOX, oldest first."""
        import email
        import email.policy

        client = self.imap(address)
        try:
            client.select("INBOX")
            _, data = client.uid("SEARCH", "ALL")
            out: list[EmailMessage] = []
            for uid in data[0].split():
                _, fetched = client.uid("FETCH", uid, "(BODY.PEEK[])")
                raw = next(part[1] for part in fetched if isinstance(part, tuple))
                parsed = email.message_from_bytes(raw, policy=email.policy.default)
                assert isinstance(parsed, EmailMessage)
                out.append(parsed)
            return out
        finally:
            client.logout()

    def wait_inbox(self, address: str, count: int, timeout: float = 60) -> list[EmailMessage]:
        """``address``'s INBOX once it holds at least ``count`` messages."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.inbox(address)
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    # life

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs.clear()


def message(
    sender: str,
    to: str,
    subject: str,
    body: str | None,
    *,
    html: str | None = None,
    headers: dict[str, str] | None = None,
    message_id: str | None = None,
) -> EmailMessage:
    """A mail as a person's client writes it."""
    made = EmailMessage()
    made["From"] = sender
    made["To"] = to
    made["Subject"] = subject
    made["Date"] = email.utils.formatdate(localtime=False)
    made["Message-ID"] = message_id or email.utils.make_msgid(domain=DOMAIN)
    for key, value in (headers or {}).items():
        made[key] = value
    if body is not None:
        made.set_content(body)
        if html is not None:
            made.add_alternative(html, subtype="html")
    elif html is not None:
        made.set_content(html, subtype="html")
    return made


def _dovecot_conf(s: MailServers, cert: Path, key: Path) -> str:
    run = s.root / "run"
    caps = "" if s.idle else NO_IDLE
    return f"""
base_dir = {run}
state_dir = {s.root / "state"}
instance_name = orch-test-{s.imap_port}
log_path = {s.root / "dovecot.log"}
protocols = imap lmtp
listen = 127.0.0.1
ssl = yes
ssl_cert = <{cert}
ssl_key = <{key}
disable_plaintext_auth = no
auth_mechanisms = plain login
default_internal_user = dovecot
default_login_user = dovenull
first_valid_uid = 1
mail_location = maildir:~/Maildir
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {s.root / "passwd"}
}}
userdb {{
  driver = static
  args = uid=nobody gid=nogroup home={s.root / "mail"}/%u
}}
protocol lmtp {{
  postmaster_address = postmaster@{DOMAIN}
}}
lmtp_save_to_detail_mailbox = no
{caps}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {s.imap_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {s.imaps_port}
    ssl = yes
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {s.lmtp_port}
  }}
}}
service auth {{
  inet_listener {{
    address = 127.0.0.1
    port = {s.auth_port}
  }}
}}
service stats {{
  unix_listener stats-reader {{
    mode = 0600
  }}
  unix_listener stats-writer {{
    mode = 0660
  }}
}}
"""


def _postfix_main(s: MailServers, cert: Path, key: Path) -> str:
    pf = s.root / "postfix"
    return f"""
compatibility_level = 3.6
queue_directory = {pf / "queue"}
data_directory = {pf / "data"}
command_directory = /usr/sbin
daemon_directory = /usr/lib/postfix/sbin
meta_directory = /etc/postfix
shlib_directory = /usr/lib/postfix
mail_owner = postfix
setgid_group = postdrop
myhostname = mail.{DOMAIN}
mydomain = {DOMAIN}
myorigin = {DOMAIN}
mydestination =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
virtual_mailbox_domains = {DOMAIN}
virtual_transport = lmtp:inet:127.0.0.1:{s.lmtp_port}
default_transport = error:mail leaves {DOMAIN} only in tests
smtpd_relay_restrictions = permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination
smtpd_sasl_type = dovecot
smtpd_sasl_path = inet:127.0.0.1:{s.auth_port}
smtpd_sasl_auth_enable = yes
smtpd_tls_cert_file = {cert}
smtpd_tls_key_file = {key}
smtpd_tls_security_level = may
maillog_file = {s.root / "postfix.log"}
maillog_file_prefixes = {s.root}
alias_maps =
alias_database =
biff = no
smtputf8_enable = yes
in_flow_delay = 0
queue_run_delay = 1s
minimal_backoff_time = 1s
maximal_backoff_time = 2s
"""


_MASTER = """
127.0.0.1:{smtp} inet n - n - - smtpd
127.0.0.1:{smtps} inet n - n - - smtpd
  -o smtpd_tls_wrappermode=yes
  -o smtpd_tls_security_level=encrypt
cleanup   unix  n - n - 0 cleanup
qmgr      unix  n - n 300 1 qmgr
rewrite   unix  - - n - - trivial-rewrite
bounce    unix  - - n - 0 bounce
defer     unix  - - n - 0 bounce
trace     unix  - - n - 0 bounce
verify    unix  - - n - 1 verify
flush     unix  n - n 1000? 0 flush
proxymap  unix  - - n - - proxymap
smtp      unix  - - n - - smtp
relay     unix  - - n - - smtp
showq     unix  n - n - - showq
error     unix  - - n - - error
retry     unix  - - n - - error
discard   unix  - - n - - discard
lmtp      unix  - - n - - lmtp
anvil     unix  - - n - 1 anvil
scache    unix  - - n - 1 scache
postlog   unix-dgram n - n - 1 postlogd
tlsmgr    unix  - - n 1000? 1 tlsmgr
"""


def start(*, idle: bool = True) -> MailServers:
    """Dovecot and Postfix on free loopback ports (RuntimeError with their logs when
    either does not come up). ``idle``: whether Dovecot offers IMAP IDLE."""
    root = Path(tempfile.mkdtemp(prefix="orch-mail-"))
    root.chmod(0o755)  # the servers' own users read their configurations here
    servers = MailServers(
        root,
        *(free_port() for _ in range(6)),
        ca_file=root / "cert.pem",
        idle=idle,
    )
    try:
        cert, key = _self_signed(root)
        (root / "mail").mkdir()
        shutil.chown(root / "mail", "nobody", "nogroup")
        (root / "passwd").touch()
        servers.add_user("postmaster")
        conf = root / "dovecot.conf"
        conf.write_text(_dovecot_conf(servers, cert, key))
        dovecot_log = root / "dovecot.log"
        with open(root / "dovecot.err", "wb") as err:
            dovecot = subprocess.Popen(
                ["/usr/sbin/dovecot", "-F", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=err
            )
        servers.procs.append(dovecot)
        _wait_port(servers.imap_port, dovecot, dovecot_log, "dovecot")
        _wait_port(servers.auth_port, dovecot, dovecot_log, "dovecot")
        pf = root / "postfix"
        pf.mkdir()
        (pf / "main.cf").write_text(_postfix_main(servers, cert, key))
        (pf / "master.cf").write_text(
            _MASTER.format(smtp=servers.smtp_port, smtps=servers.smtps_port)
        )
        for sub in ("queue", "data"):
            (pf / sub).mkdir()
        shutil.chown(pf / "data", "postfix", "postfix")
        postfix_log = root / "postfix.log"
        checked = subprocess.run(
            ["/usr/sbin/postfix", "-c", str(pf), "check"], capture_output=True, timeout=60
        )
        if checked.returncode != 0:
            raise RuntimeError(f"postfix check failed: {_tail(postfix_log)}")
        with open(root / "postfix.err", "wb") as err:
            postfix = subprocess.Popen(
                ["/usr/sbin/postfix", "-c", str(pf), "start-fg"],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        servers.procs.append(postfix)
        _wait_port(servers.smtp_port, postfix, postfix_log, "postfix")
        _wait_port(servers.smtps_port, postfix, postfix_log, "postfix")
    except BaseException:
        servers.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return servers


@contextlib.contextmanager
def running(*, idle: bool = True) -> Iterator[MailServers]:
    servers = start(idle=idle)
    try:
        yield servers
    finally:
        servers.stop()
        shutil.rmtree(servers.root, ignore_errors=True)
