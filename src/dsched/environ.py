"""Every environment variable dsched reads or sets, named once, each with what it means.

Code that reads or sets one imports its constant from here; a test fails on a ``SCHED_`` name
written anywhere else in the package. The variables of the settings are not listed one by one:
each is made from its setting's key by :func:`setting_variable`
(``worker.job_lease`` -> ``SCHED_WORKER__JOB_LEASE``), and the config loader takes every other
``SCHED_`` variable here (:data:`NOT_SETTINGS`) for one that is not a setting.

Pure: names only, no I/O.
"""

from __future__ import annotations

#: Every variable below -> what it means (the configuration reference lists them).
VARIABLES: dict[str, str] = {}


def _variable(name: str, meaning: str) -> str:
    VARIABLES[name] = meaning
    return name


#: The start of every variable of dsched's own.
PREFIX = "SCHED_"
#: What separates the levels of a setting's key in its variable.
LEVEL = "__"


def setting_variable(key: str) -> str:
    """The variable of a setting, its levels in capitals: ``"scheduler.prefetch"`` ->
    ``SCHED_SCHEDULER__PREFETCH``, ``"worker.resources.GPU"`` -> ``SCHED_WORKER__RESOURCES__GPU``
    (the loader reads levels in any case, and a resource's name as it is written)."""
    return PREFIX + LEVEL.join(part.upper() for part in key.split("."))


# -- read by every program ----------------------------------------------------------------------

CONFIG_ENV = _variable("SCHED_CONFIG", "Read: the config file, where no --config names one")
TOKEN_ENV = _variable("SCHED_TOKEN", "Read: the shared token, before any token file (a "
                      "LocalCluster sets it for the processes it starts)")
HOME_ENV = _variable("HOME", "Read: the home directory, under which the config and state "
                     "directories are looked for")
XDG_CONFIG_HOME_ENV = _variable("XDG_CONFIG_HOME", "Read: where sched/config.toml is looked "
                                "for (~/.config without it)")
XDG_STATE_HOME_ENV = _variable("XDG_STATE_HOME", "Read: where the scheduler's state directory "
                               "is (~/.local/state without it), and the default job directory")

# -- what a worker tells its tasks and jobs -------------------------------------------------------

WORKER_NAME_ENV = _variable("SCHED_WORKER_NAME", "Set in every task and job: the name of the "
                            "worker running it")
LOCAL_DIRECTORY_ENV = _variable("SCHED_LOCAL_DIRECTORY", "Set in every task and job: the "
                                "worker's scratch directory")
TASK_GPUS_ENV = _variable("SCHED_TASK_GPUS", "Set in every task and job: the GPUs it holds, as "
                          "NVML indices (empty for none); dsched's own copy of the grant, read "
                          "by dsched.get_gpu_ids(), since task code may change "
                          "CUDA_VISIBLE_DEVICES")
JOB_ID_ENV = _variable("SCHED_JOB_ID", "Set in a job's command: its job id")
JOB_ATTEMPT_ENV = _variable("SCHED_JOB_ATTEMPT", "Set in a job's command: its attempt number")
ARRAY_ID_ENV = _variable("SCHED_ARRAY_ID", "Set in an array element's command: the array's "
                         "job id (the 12 of 12_3)")
ARRAY_INDEX_ENV = _variable("SCHED_ARRAY_INDEX", "Set in an array element's command: its index "
                            "(the 3 of 12_3; the line number from 0 for --array-file)")
ARRAY_SIZE_ENV = _variable("SCHED_ARRAY_SIZE", "Set in an array element's command: how many "
                           "elements the array has")
CUDA_VISIBLE_DEVICES_ENV = _variable("CUDA_VISIBLE_DEVICES", "Set in every task and job: "
                                     "exactly the GPUs it holds (empty for none); read by a "
                                     "worker as it starts: the GPUs it may use")
CUDA_DEVICE_ORDER_ENV = _variable("CUDA_DEVICE_ORDER", "Set (PCI_BUS_ID) with "
                                  "CUDA_VISIBLE_DEVICES, so that CUDA numbers the GPUs as "
                                  "NVML does")
PATH_ENV = _variable("PATH", "Read from a job's environment: where its command is looked for")

# -- between a nanny and its worker processes ----------------------------------------------------

NANNY_PID_ENV = _variable("SCHED_NANNY_PID", "Set by a nanny in its worker processes: its pid "
                          "(the process dies with it, and its GPUs are already found)")
PREVIOUS_EXIT_ENV = _variable("SCHED_PREVIOUS_EXIT", "Set by a nanny in a worker process it "
                              "starts again: how the one before ended")

# -- from a service manager (systemd), taken out of the environment ------------------------------

NOTIFY_SOCKET_ENV = _variable("NOTIFY_SOCKET", "Read and removed by a daemon: where to say that "
                              "it is ready, stopping, and alive (a nanny sets it in its "
                              "processes: its relay)")
WATCHDOG_USEC_ENV = _variable("WATCHDOG_USEC", "Read and removed by a daemon: how often the "
                              "service manager wants to hear that it is alive")
WATCHDOG_PID_ENV = _variable("WATCHDOG_PID", "Read and removed by a daemon: the process the "
                             "watchdog is for")

# -- for tests ----------------------------------------------------------------------------------

FAKE_NVML_ENV = _variable("SCHED_FAKE_NVML", "Testing only: fake GPUs in place of NVML (inline "
                          "JSON, or the path of a JSON file)")
FAILPOINTS_ENV = _variable("SCHED_FAILPOINTS", "Testing only: where the scheduler kills itself "
                           "(comma-separated failpoints, each NAME or NAME:N)")

#: The SCHED_* variables above: none of them is a setting.
NOT_SETTINGS = frozenset(name for name in VARIABLES if name.startswith(PREFIX))
