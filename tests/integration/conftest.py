"""Fixtures of the integration tests; the helpers behind them live in cluster_helpers.py."""

import pytest

from cluster_helpers import TWO_WORKERS, Daemons, NotifySocket, running_cluster


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    """One cluster shared by a module's tests: its ``CLUSTER_WORKERS``, else TWO_WORKERS."""
    workers = getattr(request.module, "CLUSTER_WORKERS", TWO_WORKERS)
    with running_cluster(tmp_path_factory.mktemp("cluster"), workers) as daemons:
        yield daemons


@pytest.fixture
def client(cluster):
    """A client of the module's cluster, once all its workers have registered."""
    from dsched import Client

    with Client(cluster.address, token=cluster.token) as client:
        client.wait_for_workers(len(cluster.workers), timeout=30)
        yield client


@pytest.fixture
def daemons(tmp_path):
    d = Daemons(tmp_path)
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture
def notify():
    """A socket listening as systemd would; its ``name`` goes in a daemon's NOTIFY_SOCKET."""
    sock = NotifySocket()
    try:
        yield sock
    finally:
        sock.close()
