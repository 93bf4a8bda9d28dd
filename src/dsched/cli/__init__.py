"""The command-line programs: ``sched`` (``sched.py``, its fast path ``quick.py``),
``sched-scheduler`` and ``sched-worker``.

Click-free on purpose: ``sched submit`` and ``sched status`` from a shell loop start in
``quick.py``, which must load neither click nor asyncio, and importing it imports this
package. What the click commands share (option types, common options, building the config)
is in ``params.py``; its names are still found here, loaded when first asked for.
"""

from __future__ import annotations

from ..lazy import lazy_names


#: The names of ``params`` this package gave before it moved there. Listed, since Python asks
#: this module for each submodule too (``from . import calls``), which must not load click.
_PARAMS = frozenset({
    "CONTEXT_SETTINGS", "ConfigValue", "ResourceSpec", "Duration", "EnvVar", "JobRef", "JobIds",
    "JOB_ID", "PRIORITY", "Decorator", "config_option", "log_level_option", "tls_options",
    "address_problem", "build_config",
})


__getattr__, __dir__ = lazy_names(__name__, dict.fromkeys(_PARAMS, ".params"), globals())
