"""A whole cluster over TLS: scheduler, workers (peer transfers included) and a client; and a
side without TLS meeting one with it, or the reverse: one line naming the settings that give
each program TLS (a worker without it exits 78, as for a wrong token)."""

import shutil
import subprocess
import sys

import cloudpickle
import pytest

from dsched import Client
from dsched.auth import client_ssl_context
from dsched.daemon import EXIT_CONFIG
from dsched.errors import TlsMismatchError

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None,
                                   reason="needs the openssl command")

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


@needs_openssl
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

    # A client without TLS gets no further than the handshake, and is told TLS is the cause.
    with pytest.raises(TlsMismatchError, match="as a TLS server does.*this side needs TLS too"):
        Client(address, token=daemons.token, timeout=10)


def run_sched(daemons, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsched.cli.sched", "-s", daemons.address,
                           *args], env={**daemons.env, **(env or {})}, capture_output=True,
                          text=True, timeout=60)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@needs_openssl
def test_sched_without_tls_is_told_the_setting_it_has(daemons, tmp_path):
    cert, key = make_cert(tmp_path)
    daemons.scheduler("--tls-cert", cert, "--tls-key", key)

    done = run_sched(daemons, "status")

    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith("sched: error: ") and "needs TLS too" in line
    # sched has no --tls-ca: the hint names what it has, and that works.
    assert "sched and Client: the client.tls.ca setting or SCHED_CLIENT__TLS__CA" in line
    done = run_sched(daemons, "status", env={"SCHED_CLIENT__TLS__CA": cert})
    assert (done.returncode, done.stdout) == (0, "no jobs\n"), done.stderr


@needs_openssl
def test_sched_with_tls_against_a_scheduler_without_it_is_told_so(daemons, tmp_path):
    cert, _ = make_cert(tmp_path)
    daemons.scheduler()

    done = run_sched(daemons, "status", env={"SCHED_CLIENT__TLS__CA": cert})

    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "during the TLS handshake, as a server without TLS does" in line
    assert "must not use TLS either: leave out its CA file" in line and "client.tls.ca" in line


@needs_openssl
@pytest.mark.parametrize("nanny", ["--nanny", "--no-nanny"])
def test_a_worker_without_tls_against_a_tls_scheduler_exits_78(daemons, tmp_path, nanny):
    # As a wrong token does: trying again for ever would meet the same TLS.
    cert, key = make_cert(tmp_path)
    address = daemons.scheduler("--tls-cert", cert, "--tls-key", key)

    done = subprocess.run([sys.executable, "-m", "dsched.cli.worker", address, nanny,
                           "--log-level", "warning"], env=daemons.env, capture_output=True,
                          text=True, timeout=60)

    assert done.returncode == EXIT_CONFIG
    line = one_line(done.stderr)
    assert "refused this worker" in line and "as a TLS server does" in line
    assert "this side needs TLS too" in line and "sched-worker: --tls-ca" in line
