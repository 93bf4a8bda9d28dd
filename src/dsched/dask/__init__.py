"""Dask collections on dsched: ``client.compute``, ``client.persist``, ``dask.compute(x,
scheduler=client)``, with annotations that survive Dask's graph optimisation.

The modules that need Dask import it themselves (``import dask`` here is the real Dask); this
package and ``requires``, ``keys`` and ``execute`` do not, so ``import dsched`` never loads
Dask. See ``docs/dask.md``.
"""

from .requires import requires

__all__ = ["requires"]
