"""Packages that load their parts when a name is first asked for.

A program pays for what it imports: ``sched --version`` must not load the client, nor a job's
supervisor the worker's core, nor ``dsched.settings`` msgpack. So ``dsched`` and several of
its packages name their public names in a table and load each from its module on first use
(PEP 562), through the one pair of functions made here.

Pure: no I/O.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is for type checkers only (see ``protocol/ints.py``)
if TYPE_CHECKING:
    from typing import Any, Callable, Mapping


def lazy_names(package: str, public: Mapping[str, str], namespace: dict[str, Any],
               modules: frozenset[str] = frozenset()) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for the package named ``package``: the name ``name``
    is taken from the module ``public[name]`` (relative to the package: ``".framing"``) the
    first time it is asked for, and kept in ``namespace`` (the package's globals); a name in
    ``modules`` is that module itself."""

    def __getattr__(name: str) -> Any:
        where = public.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = _load(where, package)
        value = module if name in modules else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__


def _load(where: str, package: str) -> Any:
    """The module ``where`` (``".framing"``, ``"..errors"``) relative to ``package``, as
    ``importlib.import_module(where, package)`` gives it, without loading ``importlib``
    (about 1 ms of each ``sched`` call)."""
    name = where.lstrip(".")
    up = len(where) - len(name) - 1  # ".x" is in the package itself, "..x" one above it
    absolute = f"{package.rsplit('.', up)[0] if up else package}.{name}"
    __import__(absolute)
    return sys.modules[absolute]
