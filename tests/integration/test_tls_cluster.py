"""A whole cluster over TLS: scheduler, workers (peer transfers included) and a client."""

import shutil
import subprocess
import sys

import cloudpickle
import pytest

from dsched import Client
from dsched.auth import client_ssl_context
from dsched.errors import RemoteProtocolError

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def make_cert(directory) -> tuple[str, str]:
    cert, key = directory / "cluster.pem", directory / "cluster.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=cluster", "-keyout", str(key), "-out", str(cert),
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True,
    )
    return str(cert), str(key)


def block(n):
    return bytes(range(256)) * n


def checksum(left, right):
    import hashlib

    return hashlib.sha256(left + right).hexdigest()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tasks_and_peer_transfers_run_over_tls(daemons, tmp_path):
    import hashlib

    cert, key = make_cert(tmp_path)
    tls = ("--tls-cert", cert, "--tls-key", key, "--tls-ca", cert)
    address = daemons.scheduler(*tls)
    daemons.worker("--name", "w1", "--nthreads", "1", *tls)
    daemons.worker("--name", "w2", "--nthreads", "1", *tls)
    with Client(address, token=daemons.token, ssl=client_ssl_context(ca=cert)) as client:
        client.wait_for_workers(2, timeout=30)
        left = client.submit(block, 1000, workers=["w1"])
        right = client.submit(block, 2000, workers=["w2"])
        both = client.submit(checksum, left, right, workers=["w2"])  # fetches left from w1
        expected = hashlib.sha256(block(1000) + block(2000)).hexdigest()
        assert both.result(timeout=30) == expected
        assert len(left.result(timeout=30)) == 256_000  # fetched from w1 by the client

    # A client without TLS gets no further than the handshake, and is told TLS is the likely
    # cause.
    with pytest.raises(RemoteProtocolError, match="handshake.*uses TLS, this side needs TLS"):
        Client(address, token=daemons.token, timeout=10)
