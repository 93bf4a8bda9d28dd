"""Storage that fails on purpose, for the tests of what the daemons do about it: a file that
cannot be written, and a filesystem that is full. Each is undone on leaving, also when the test
fails; where it cannot be had here the test is skipped, saying why.
(``from storage_helpers import ...``: a unique name, as ``cluster_helpers``.)"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)


def _umount(path: Path) -> None:
    # Lazily if something still holds it open: a mount must never outlive the test.
    if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@contextmanager
def read_only_file(path: Path):
    """``path`` cannot be written while inside: mode 0444 for a user; root, whom modes do not
    stop, gets a read-only bind mount of the file over itself."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    done = _mount("--bind", str(path), str(path))
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount {path} read-only here: {done.stderr.strip()}")
    try:
        done = _mount("-o", "remount,ro,bind", str(path))
        if done.returncode != 0:
            pytest.skip(f"cannot remount {path} read-only here: {done.stderr.strip()}")
        yield
    finally:
        _umount(path)


@contextmanager
def tiny_filesystem(path: Path, size: str):
    """A tmpfs of ``size`` (``"256k"``) at ``path`` (made), to be filled; root only."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = _mount("-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        _umount(path)
