"""The ``sched`` command's connection is opened as ``socket.create_connection`` opens one (it
is made from ``_socket``, without the ``socket`` module): each address the resolver gives is
tried in turn, and where none connects, the last one's error is raised."""

from __future__ import annotations

import socket

import pytest

from dsched.client.plain import _open


def test_a_host_name_connects_to_whichever_of_its_addresses_listens():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        # localhost may resolve to ::1 first, where nothing listens: the next one is tried.
        for host in (b"127.0.0.1", b"localhost", "localhost"):
            sock = _open(host, port, 5.0)
            try:
                accepted, _ = server.accept()
                assert sock.getsockname() == accepted.getpeername()
                assert sock.gettimeout() == 5.0
                accepted.close()
            finally:
                sock.close()


def test_no_address_that_connects_raises_the_error_create_connection_raises():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectionRefusedError) as ours:
        _open(b"127.0.0.1", port, 5.0)
    with pytest.raises(ConnectionRefusedError) as theirs:
        socket.create_connection(("127.0.0.1", port), timeout=5.0)
    assert ours.value.errno == theirs.value.errno


def test_where_no_address_connects_the_last_ones_error_is_raised(monkeypatch):
    import _socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    addresses = [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("fe80::1", port, 0, 0)),
                 (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
    monkeypatch.setattr(_socket, "getaddrinfo", lambda *args: addresses)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *args: addresses)
    with pytest.raises(ConnectionRefusedError):  # not the link-local address's EINVAL
        _open(b"somewhere", port, 5.0)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("somewhere", port), timeout=5.0)
