"""Addresses as users write them (``tcp://host:port``, ``host:port``) and as we print them."""

from __future__ import annotations


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"tcp://host:port"``, ``"tls://host:port"``, ``"host:port"``, ``"[::1]:port"`` or
    ``(host, port)``."""
    if isinstance(address, tuple):
        host, port = address
        return str(host), int(port)
    text = address.split("://", 1)[-1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not of the form host:port")
    if int(port) > 65535:
        raise ValueError(f"address {address!r}: port {port} is out of range (0 to 65535)")
    return host.strip("[]") or "127.0.0.1", int(port)


def format_address(host: str, port: int, *, tls: bool = False) -> str:
    host = f"[{host}]" if ":" in host else host
    return f"{'tls' if tls else 'tcp'}://{host}:{port}"


#: Hosts that mean "every interface": nobody can connect to them.
WILDCARD_HOSTS = frozenset(("", "0.0.0.0", "::"))


def reachable_host(host: str) -> str:
    """The host others should use to reach a socket bound to ``host``: ``host`` itself, or for
    a wildcard, this machine's first non-loopback IPv4 address (of an interface that is up),
    else its host name. Reads the interface table; sends nothing."""
    if host not in WILDCARD_HOSTS:
        return host
    import socket

    import psutil

    try:
        stats = psutil.net_if_stats()
        interfaces = psutil.net_if_addrs()
    except OSError:
        # A sandbox may hide the table (no netlink sockets, no /proc/net: the systemd unit
        # allows neither); the host name is what a deployment's workers use anyway.
        return socket.gethostname()
    for name, addresses in sorted(interfaces.items()):
        if not stats.get(name) or not stats[name].isup:
            continue
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return socket.gethostname()
