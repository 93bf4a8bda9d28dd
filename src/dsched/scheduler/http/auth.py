"""Who may read the dashboard: the token rule and the read-only dashboard token.

On 127.0.0.1 (or ::1, localhost) the dashboard asks for nothing, like any local tool. Bound to
any other interface it requires the dashboard token: an HMAC-SHA256 of a fixed label keyed
with the cluster token. Whoever holds the cluster token can work the dashboard token out
(``sched-scheduler --print-dashboard-token``), but not the other way round, so the dashboard
token can be handed to people and to Prometheus without handing them the power to run code
on every worker. It is checked in an ``Authorization: Bearer`` header (API, metrics) or in a
cookie set by the login form (browsers). Rotating the cluster token rotates it too.

Without a token the dashboard answers only to loopback names in the ``Host`` header
(``host_allowed``): a web page the machine's browser opens could otherwise rebind its own DNS
name to 127.0.0.1 and read the dashboard as a page of its own origin (DNS rebinding). The
name a request was sent to is the one thing such a page cannot choose.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

#: Interfaces only this machine reaches: no token asked there.
LOCAL_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
#: What the cluster token signs to make the dashboard token; a new label makes a new token.
LABEL = b"dsched dashboard read-only v1"
COOKIE = "dsched_dashboard"


def dashboard_token(cluster_token: str) -> str:
    """The read-only dashboard token of ``cluster_token`` (64 hex digits)."""
    return hmac.new(cluster_token.encode(), LABEL, hashlib.sha256).hexdigest()


def token_required(host: str) -> bool:
    """Whether a dashboard bound to ``host`` must ask for the dashboard token."""
    return host.strip().lower() not in LOCAL_HOSTS


def host_name(header: str) -> str | None:
    """The name in a ``Host`` header, in lower case, without its port or an IPv6 address's
    brackets; None when it is not a name and an optional port."""
    text = header.strip().lower()
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port = text.partition(":")
        rest = colon + port
    if rest and not (rest[0] == ":" and rest[1:].isdigit()):
        return None
    return name or None


def is_loopback(name: str) -> bool:
    """Whether ``name`` (as ``host_name`` gives it) always means this machine: ``localhost``,
    127.x.y.z or ::1. A name a DNS server answers for is not, whatever it answers now."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_allowed(header: str, configured: str) -> bool:
    """Whether a tokenless dashboard bound to ``configured`` answers a request whose ``Host``
    header is ``header``: a loopback name, or the configured host itself, with any port."""
    name = host_name(header)
    return name is not None and (is_loopback(name)
                                 or name == configured.strip().lower().strip("[]"))


def matches(offered: str | None, expected: str) -> bool:
    """Whether ``offered`` is the dashboard token, in constant time."""
    return offered is not None and hmac.compare_digest(offered.strip().encode(),
                                                       expected.encode())


def bearer(header: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer ...`` header, or None."""
    if header is None:
        return None
    scheme, _, credential = header.partition(" ")
    return credential.strip() if scheme.lower() == "bearer" and credential.strip() else None
