"""Fuzzing the web guard (orchestrator/web/guard.py): the URLs a model asks web_fetch for,
and the request lines the shell sends the egress gate. For any URL and policy, check()
returns a Target or raises Refused ("Refused says why"), and a Target is safe: an http
or https URL without credentials, a name the policy allows and does not deny, an allowed
port, and an address that is public unless the operator opened that host:port
(allow_addresses), as the module's docstring says. Names resolve through a stand-in
that reads numeric hosts as the system's resolver does (getaddrinfo with
AI_NUMERICHOST, no network) and gives other names public and private addresses.
"""

from __future__ import annotations

import hashlib
import ipaddress
import socket
from urllib.parse import urlsplit

from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.web.guard import (
    HOST_NAME,
    Refused,
    Rules,
    address_problem,
    check,
    literal_address,
)
from tests.fuzzing import fuzz, mutated_text

ADDRESSES = [
    "93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "127.0.0.1", "10.1.2.3",
    "169.254.169.254", "100.64.0.1", "::1", "::ffff:127.0.0.1", "64:ff9b::a00:1",
    "2002:7f00:1::", "fe80::1%eth0", "0.0.0.0", "224.0.0.1", "fd00:ec2::254", "198.18.0.1",
    "192.0.0.170", "not an address",
]  # fmt: skip


def numeric(name: str, port: int) -> list[str] | None:
    """The addresses the system's resolver reads ``name`` as without a lookup, or None."""
    try:
        infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError, ValueError):
        return None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def resolver(name: str, port: int) -> list[str]:
    """Numeric names as the system reads them; other names get one or two addresses of
    ADDRESSES chosen by their hash (none for some: an answer with nothing in it)."""
    found = numeric(name, port)
    if found is not None:
        return found
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).digest()
    if digest[0] % 11 == 0:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return [ADDRESSES[b % len(ADDRESSES)] for b in digest[1 : 1 + digest[2] % 3]]


def hit(host: str, pattern: str) -> bool:
    """``host`` is named by a policy pattern (README: ``example.org``, ``*.example.org``,
    the latter for the name and its subdomains); names are matched without case."""
    host, pattern = host.lower(), pattern.lower()
    name = pattern.removeprefix("*.")
    return host == name or (pattern.startswith("*.") and host.endswith("." + name))


URL_SEEDS = [
    "https://en.wikipedia.org/wiki/Cat?action=raw",
    "http://example.org:8080/a/b",
    "http://127.0.0.1:8080/x",
    "http://[::1]/",
    "https://[fe80::1%25eth0]:443/",
    "http://0x7f000001/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "https://user:pw@example.org/",
    "http://169.254.169.254/latest/meta-data/",
    "http://[::ffff:169.254.169.254]/",
    "ftp://example.org/",
    "https://ads.example/",
    "https://a.b.wikipedia.org./",
]
hosts = st.sampled_from(
    ["example.org", "en.wikipedia.org", "ads.example", "127.0.0.1", "[::1]", "localhost",
     "0x7f.1", "0", "1e100", "xn--80ak6aa92e.com", "EXAMPLE.ORG", "a_b.org", "-x.org"]
)  # fmt: skip
urls = st.one_of(
    mutated_text(URL_SEEDS, max_edits=4),
    st.builds(
        "{}://{}{}{}".format,
        st.sampled_from(["http", "https", "HTTP", "file", ""]),
        hosts,
        st.sampled_from(["", ":80", ":443", ":8080", ":0", ":99999", ":-1", ": 80"]),
        st.sampled_from(["", "/", "/a?b=c", "#f", "/@x", "\\@127.0.0.1"]),
    ),
    st.text(max_size=40),
)
rules = st.builds(
    Rules,
    allow=st.lists(st.sampled_from(["*.wikipedia.org", "example.org", "*.org", "127.0.0.1"]),
                   max_size=2).map(tuple),
    deny=st.lists(st.sampled_from(["ads.example", "*.example.org", "en.wikipedia.org"]),
                  max_size=2).map(tuple),
    ports=st.sampled_from([(80, 443), (443,), (8080,)]),
    allow_addresses=st.lists(st.sampled_from(["127.0.0.1:8080", "[::1]:80", "localhost:80"]),
                             max_size=2).map(tuple),
    need_allow=st.booleans(),
)  # fmt: skip


@fuzz(500)
@given(url=urls, policy=rules)
@example(url="http://127.0.0.1:8080/x", policy=Rules(allow_addresses=("127.0.0.1:8080",)))
@example(url="http://[::ffff:127.0.0.1]/", policy=Rules())
@example(url="http://[fe80::1%25eth0]/", policy=Rules())
@example(url="http://0x7f.1/", policy=Rules())
@example(url="http://ads.example/", policy=Rules(deny=("ads.example",)))
@example(url="http://x" + ".x" * 200 + "/", policy=Rules())
@example(url="http://[v1.x]/", policy=Rules()).via("an IPvFuture literal")
@example(url="http://[::1]:80/", policy=Rules(allow_addresses=("[::1]:80",)))
def test_the_guard_allows_only_what_is_safe(url: str, policy: Rules) -> None:
    try:
        target = check(url, policy, resolver)
    except Refused as exc:
        assert str(exc)
        return
    parts = urlsplit(url)
    assert target.scheme in ("http", "https") and parts.scheme.lower() == target.scheme
    assert parts.username is None and parts.password is None and "@" not in parts.netloc
    assert target.host == (parts.hostname or "").lower()
    assert not any(ord(c) < 33 for c in target.path) and target.path.startswith("/")
    opened = any(
        f"{h}:{target.port}" in policy.allow_addresses
        for h in (target.host, f"[{target.host}]", target.address, f"[{target.address}]")
    )
    assert not any(hit(target.host, p) for p in policy.deny)
    if policy.allow and not opened:
        assert any(hit(target.host, p) for p in policy.allow)
    if policy.need_allow and not opened:
        assert policy.allow
    assert target.port in policy.ports or opened
    # the address connected to is the one checked, and public unless opened on purpose
    literal = literal_address(target.host)
    if literal is not None:
        assert target.address == str(literal)
    ip = ipaddress.ip_address(target.address.split("%")[0])
    assert opened or address_problem(ip) is None, (url, target)


@fuzz(500)
@given(
    host=st.one_of(
        st.text(alphabet="0123456789abcdefxX.:[]%", max_size=24),
        mutated_text(["127.0.0.1", "0x7f.1", "0177.1", "4294967295", "::ffff:1.2.3.4"]),
    )
)
@example(host="0x7f.1")
@example(host="4294967296")
@example(host="1.2.3.4.")
@example(host="0x")
@example(host="08.1")
@example(host="*")
def test_a_numeric_host_is_read_as_the_system_reads_it(host: str) -> None:
    # A host the system's resolver reads as an address is that address to the guard too
    # (literal_address: "in any form a resolver would take"), so allow and deny rules and
    # allow_addresses judge the address that is connected to.
    system = numeric(host.strip("[]"), 80)
    literal = literal_address(host)
    if system is None or "%" in host or any(ord(c) < 33 for c in host):
        return  # a zone (%eth0) is IPv6's; check() refuses controls and spaces first
    if literal is None:  # then check() must not take it as a name either ("*", which
        # getaddrinfo reads as this host, is "not a host name")
        assert not HOST_NAME.fullmatch(host.lower()), (host, system)
        return
    assert literal in [ipaddress.ip_address(a.split("%")[0]) for a in system], (host, system)
