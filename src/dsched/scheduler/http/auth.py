"""Who may read the dashboard: the token rule and the read-only dashboard token.

On 127.0.0.1 (or ::1, localhost) the dashboard asks for nothing, like any local tool. Bound to
any other interface it requires the dashboard token: an HMAC-SHA256 of a fixed label keyed
with the cluster token. Whoever holds the cluster token can work the dashboard token out
(``sched-scheduler --print-dashboard-token``), but not the other way round, so the dashboard
token can be handed to people and to Prometheus without handing them the power to run code
on every worker. It is checked in an ``Authorization: Bearer`` header (API, metrics) or in a
cookie set by the login form (browsers). Rotating the cluster token rotates it too.

Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac

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
