"""Hosts for the partition test: network namespaces on a private /24, joined by a bridge.

Each host is a namespace with one interface, ``eth0``, whose other end is plugged into a bridge
in a *hub* namespace (the switch); the test's own process reaches them through one more veth
pair from the root namespace. :meth:`Network.cut` takes a host's port on the switch down, so
its packets vanish without a reset, as when a cable is pulled; :meth:`Network.restore` puts it
back. Everything is made under a name with this process's pid in it and removed by
:meth:`Network.close`; namespaces left behind by a test process that died are removed on the
next start. Needs root and iproute2 (``ip``); :func:`unavailable` says why not.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import subprocess
import sys

PREFIX = "dsched-test"
_OURS = re.compile(rf"^{PREFIX}-(\d+)-")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def unavailable() -> str | None:
    """Why this machine cannot host the test (None when it can)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "needs the ip command (Debian package iproute2)"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    try:
        for args in (("netns", "add", probe),
                     ("-n", probe, "link", "add", "name", "br0", "type", "bridge"),
                     ("-n", probe, "link", "add", "name", "a", "type", "veth", "peer",
                      "name", "b")):
            result = ip(*args, check=False)
            if result.returncode != 0:
                return f"cannot build a test network here: ip {' '.join(args)}: " \
                       f"{result.stderr.strip()}"
    finally:
        ip("netns", "del", probe, check=False)
    return None


def remove_leftovers() -> None:
    """Delete the namespaces of earlier test processes that are gone."""
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        match = _OURS.match(name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            ip("netns", "del", name, check=False)


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that no route of the root namespace touches."""
    taken = []
    for line in ip("-4", "route", "show", "table", "all").stdout.splitlines():
        target = line.split()[0] if line.strip() else ""
        if target[:1].isdigit():
            taken.append(ipaddress.ip_network(target, strict=False))
    for _ in range(1000):
        subnet = ipaddress.ip_network(f"10.{secrets.randbelow(155) + 100}."
                                      f"{secrets.randbelow(256)}.0/24")
        if not any(subnet.overlaps(other) for other in taken):
            return subnet
    raise RuntimeError("no free /24 in 10.0.0.0/8")


class Network:
    """Namespaced hosts named by ``hosts``, on one switch, reachable from this process."""

    def __init__(self, hosts: list[str]):
        remove_leftovers()
        self.tag = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
        self.hub = f"{self.tag}-hub"
        self.root_link = f"dst{secrets.token_hex(5)}"  # interface names: at most 15 bytes
        self.subnet = free_subnet()
        addresses = list(self.subnet.hosts())
        self.addresses = {host: str(addresses[i]) for i, host in enumerate(hosts)}
        self.namespaces: list[str] = []
        try:
            self._build(hosts, str(addresses[-1]))
        except BaseException:
            self.close()
            raise

    def _build(self, hosts: list[str], root_address: str) -> None:
        bits = self.subnet.prefixlen
        self._add_namespace(self.hub)
        ip("-n", self.hub, "link", "add", "name", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")
        for host in hosts:
            namespace = self.namespace(host)
            self._add_namespace(namespace)
            ip("-n", self.hub, "link", "add", "name", host, "type", "veth", "peer", "name", "eth0",
               "netns", namespace)
            ip("-n", self.hub, "link", "set", host, "master", "br0", "up")
            ip("-n", namespace, "addr", "add", f"{self.addresses[host]}/{bits}", "dev", "eth0")
            ip("-n", namespace, "link", "set", "eth0", "up")
            ip("-n", namespace, "link", "set", "lo", "up")
        ip("link", "add", "name", self.root_link, "type", "veth", "peer", "name", "root", "netns",
           self.hub)
        ip("-n", self.hub, "link", "set", "root", "master", "br0", "up")
        ip("addr", "add", f"{root_address}/{bits}", "dev", self.root_link)
        ip("link", "set", self.root_link, "up")

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self.namespaces.append(name)

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def run_in(self, host: str) -> tuple[str, ...]:
        """The command prefix that runs a program on ``host``."""
        return ("ip", "netns", "exec", self.namespace(host))

    def cut(self, host: str) -> None:
        ip("-n", self.hub, "link", "set", host, "down")

    def restore(self, host: str) -> None:
        ip("-n", self.hub, "link", "set", host, "up")

    def close(self) -> None:
        ip("link", "del", self.root_link, check=False)
        for namespace in reversed(self.namespaces):
            ip("netns", "del", namespace, check=False)
        self.namespaces.clear()
