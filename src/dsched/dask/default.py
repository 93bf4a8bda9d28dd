"""A blocking Client as Dask's default scheduler, where Dask is installed.

A new ``Client`` sets Dask's ``scheduler`` config to itself, so ``x.compute()`` and
``x.persist()`` run on dsched; closing it gives the setting back to the client made before
it that is still open, or to what it was before any. Finding out whether Dask is installed
does not import it, so a process without Dask never pays for it; one with Dask imports it
when its first client starts. Also teaches Dask to tokenize a dsched Future by its key.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Any

#: Dask releases before this hand a scheduler an optimised dict without annotations.
MIN_DASK = (2025, 4)

_lock = threading.Lock()
#: [client, the scheduler setting it replaced], oldest first.
_defaults: list[list[Any]] = []


def dask_usable() -> bool:
    """Whether a Dask this package works with is installed (imports it only if so)."""
    if importlib.util.find_spec("dask") is None:
        return False
    import dask

    try:
        version = tuple(int(part) for part in dask.__version__.split(".")[:2])
    except ValueError:  # a development build: assume recent
        return True
    return version >= MIN_DASK


def set_as_default(client: Any) -> bool:
    """Make ``client`` Dask's scheduler; False (and nothing done) without a usable Dask."""
    if not dask_usable():
        return False
    import dask

    tokenize_futures_by_key()
    with _lock:
        _defaults.append([client, dask.config.get("scheduler", None)])
        dask.config.set(scheduler=client)
    return True


def tokenize_futures_by_key() -> None:
    """Dask names a call by a hash of its arguments: a future's is its key (a future cannot
    be pickled, which is Dask's fallback)."""
    from dask.tokenize import normalize_token

    from ..client.future import Future

    normalize_token.register(Future)(lambda future: ("dsched-future", future.key))


def unset_default(client: Any) -> None:
    """``client`` closes: Dask's scheduler goes back to what ``client`` replaced."""
    with _lock:
        index = next((i for i, entry in enumerate(_defaults) if entry[0] is client), None)
        if index is None:
            return
        _, previous = _defaults.pop(index)
        if index < len(_defaults):  # a later client replaced this one: it gets `previous`
            _defaults[index][1] = previous
            return
        import dask

        if dask.config.get("scheduler", None) is client:  # unless the user set another since
            dask.config.set(scheduler=previous)
