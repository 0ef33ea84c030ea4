"""This machine's (or container's) addresses, and which of them are on a network.

The daemon on Swarm is attached to the runner network and to others: its runner port
listens on its addresses on the runner network only, and a listener asked for on a
wildcard (the HTTP API, the metrics) on every address but those, so a group's
container on the runner network finds nothing else of the daemon to connect to.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import socket
import struct
from collections.abc import Iterable, Sequence

SIOCGIFADDR = 0x8915
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def local_addresses() -> list[str]:
    """Every IPv4 and IPv6 address of this network namespace's interfaces (Linux)."""
    found: list[str] = []
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            with contextlib.suppress(OSError):  # an interface without an IPv4 address
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)
                found.append(socket.inet_ntoa(answer[20:24]))
    finally:
        probe.close()
    with contextlib.suppress(OSError), open("/proc/net/if_inet6") as handle:
        for line in handle:
            raw = line.split()[0]
            found.append(str(ipaddress.IPv6Address(int(raw, 16))))
    return found


def networks(subnets: Iterable[str]) -> list[Network]:
    return [ipaddress.ip_network(s, strict=False) for s in subnets]


def inside(addresses: Sequence[str], subnets: Sequence[Network]) -> list[str]:
    """The addresses within any of ``subnets``."""
    return [a for a in addresses if any(ipaddress.ip_address(a) in n for n in subnets)]


def outside(addresses: Sequence[str], subnets: Sequence[Network], *, v6: bool) -> list[str]:
    """The addresses within none of ``subnets`` (IPv4 only unless ``v6``); link-local
    IPv6 addresses are left out (they need an interface named to bind)."""
    out = []
    for text in addresses:
        address = ipaddress.ip_address(text)
        if address.version == 6 and (not v6 or address.is_link_local):
            continue
        if not any(address in n for n in subnets):
            out.append(text)
    return out
