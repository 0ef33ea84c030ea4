"""The guard every web request of a group passes: which URLs its policy allows, and which
addresses may be reached at all.

A URL must be ``http`` or ``https``, without credentials, on port 80 or 443 unless the
policy names others; its name must match the policy (``deny`` first, then ``allow`` when
it lists any); the host resolves the name itself, once, and every address of the answer
must be public: loopback, private, link-local, shared (CGNAT), multicast, reserved,
unspecified and cloud-metadata addresses are refused in IPv4 and IPv6, IPv4-mapped, NAT64,
6to4 and Teredo forms included. The caller connects to the address checked here (never a
second lookup: no DNS rebinding) and keeps the name for SNI and ``Host``. An operator may
open a private ``host:port`` on purpose (``allow_addresses``).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]  # (name, port) -> addresses as text
SCHEMES = {"http": 80, "https": 443}
NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
SIXTOFOUR = ipaddress.ip_network("2002::/16")
TEREDO = ipaddress.ip_network("2001::/32")
# addresses the standard library's is_global may let through, refused by name
EXTRA_BLOCKED = tuple(
    ipaddress.ip_network(n)
    for n in (
        "100.64.0.0/10",  # shared address space (CGNAT)
        "192.0.0.0/24",  # IETF protocol assignments
        "198.18.0.0/15",  # benchmarking
        "fd00:ec2::/32",  # a cloud's metadata service over IPv6
    )
)
HOST_NAME = re.compile(r"(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_-]{1,63}")


class Refused(Exception):
    """What the guard refuses, and why (for the model and the log)."""


@dataclass(frozen=True)
class Target:
    """A URL the guard allowed: what to connect to, and what to say to it."""

    url: str
    scheme: str
    host: str  # the name (or literal) for SNI and Host
    port: int
    address: str  # the checked address to connect to
    path: str  # with its query


def address_problem(ip: IP) -> str | None:
    """Why ``ip`` may not be reached from the host for a group, or None."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return _kind_problem(ip.ipv4_mapped, f"{ip} (IPv4-mapped)")
        for net in NAT64:
            if ip in net:
                embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
                return _kind_problem(embedded, f"{ip} (NAT64)") or f"{ip}, a NAT64 address"
        if ip in SIXTOFOUR:
            return f"{ip}, a 6to4 address"
        if ip in TEREDO:
            return f"{ip}, a Teredo address"
    return _kind_problem(ip, str(ip))


def _kind_problem(ip: IP, shown: str) -> str | None:
    for test, what in (
        (ip.is_unspecified, "an unspecified address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address (where cloud metadata lives)"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_reserved, "a reserved address"),
        (ip.is_private, "a private address"),
        (any(ip in net for net in EXTRA_BLOCKED if net.version == ip.version), "not public"),
        (not ip.is_global, "not public"),
    ):
        if test:
            return f"{shown}, {what}"
    return None


def literal_address(host: str) -> IP | None:
    """The address a host part names literally, in any form a resolver would take
    (``127.1``, ``2130706433``, ``0x7f000001``, ``0177.0.0.1``, ``[::1]``), or None."""
    text = host.strip("[]")
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fA-FxX.]+", text) and not re.fullmatch(r"[a-fA-F.]+", text):
        try:  # the legacy numeric forms inet_aton takes (and so would getaddrinfo)
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def system_resolver(name: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def matches(host: str, pattern: str) -> bool:
    """``example.org`` matches that name; ``*.example.org`` matches its subdomains and
    itself."""
    host, pattern = host.lower().rstrip("."), pattern.lower().rstrip(".")
    if pattern.startswith("*."):
        return host == pattern[2:] or host.endswith(pattern[1:])
    return host == pattern


@dataclass(frozen=True)
class Rules:
    """What one group's policy says of destinations (group.yaml ``web``)."""

    allow: tuple[str, ...] = ()  # name patterns; empty: any public name
    deny: tuple[str, ...] = ()
    ports: tuple[int, ...] = (80, 443)
    allow_addresses: tuple[str, ...] = ()  # host:port opened on purpose, private or not
    need_allow: bool = False  # the shell's gate: an empty allow list allows nothing


def check(url: str, rules: Rules, resolver: Resolver = system_resolver) -> Target:
    """The target ``url`` resolves to, if ``rules`` allow it; Refused says why."""
    if not isinstance(url, str) or len(url) > 2000 or any(ord(c) < 33 for c in url):
        raise Refused("the URL must be one line of at most 2000 characters, without spaces")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"the URL cannot be read: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise Refused(f"only http and https URLs are fetched, not {scheme or 'this'}:")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise Refused("URLs with credentials (user@host) are refused")
    host = (parts.hostname or "").lower()
    if not host:
        raise Refused("the URL names no host")
    port = port or SCHEMES[scheme]
    literal = literal_address(host)
    if literal is None and not HOST_NAME.fullmatch(host):
        raise Refused(f"{host!r} is not a host name")
    opened = _opened(host, port, rules)
    if any(matches(host, p) for p in rules.deny):
        raise Refused(f"{host} is on this group's deny list")
    if rules.allow and not opened and not any(matches(host, p) for p in rules.allow):
        raise Refused(f"{host} is not on this group's allow list")
    if rules.need_allow and not rules.allow and not opened:
        raise Refused("this group's allow list is empty: the shell reaches nothing")
    if port not in rules.ports and not opened:
        raise Refused(f"port {port} is not allowed (allowed: {', '.join(map(str, rules.ports))})")
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = list(resolver(host, port))
        except OSError as exc:
            raise Refused(f"{host} could not be resolved: {exc}") from None
        if not addresses:
            raise Refused(f"{host} resolves to nothing")
    for text in addresses:
        try:
            ip = ipaddress.ip_address(text.split("%")[0])
        except ValueError:
            raise Refused(f"{host} resolves to {text!r}, not an address") from None
        if _opened(str(ip), port, rules) or opened:
            continue
        if problem := address_problem(ip):
            how = "is" if literal is not None else "resolves to"
            raise Refused(f"{host} {how} {problem}: refused")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(url, scheme, host, port, addresses[0], path)


def _opened(host: str, port: int, rules: Rules) -> bool:
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return shown in rules.allow_addresses or f"{host}:{port}" in rules.allow_addresses
