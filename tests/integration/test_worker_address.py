"""--host and --port choose where a worker serves results to its peers and clients."""

import socket

from cluster_helpers import free_ports


def test_a_worker_serves_on_the_host_and_port_it_is_given(daemons):
    port = free_ports()
    daemons.scheduler()
    daemons.worker("--port", str(port), "--name", "fixed")
    client = daemons.client()
    info = daemons.wait_for_workers(client, 1)
    assert list(info["workers"]) == [f"127.0.0.1:{port}"]
    assert info["workers"][f"127.0.0.1:{port}"]["name"] == "fixed"
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass


def test_under_a_nanny_a_fixed_port_is_the_first_of_a_range(daemons):
    port = free_ports(2)
    daemons.scheduler()
    daemons.worker("--port", str(port), "--nworkers", "2", "--nthreads", "1")
    client = daemons.client()
    info = daemons.wait_for_workers(client, 2)
    assert sorted(info["workers"]) == [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
