"""What each attempt does with its GPUs, folded from the worker's samples, and idle jobs
(``worker/gpuuse.py``)."""

from __future__ import annotations

from dsched.worker.gpuuse import CANCEL, GpuUse, Sample

GB = 10**9
UUID = ("GPU-0",)


def test_an_attempts_summary_has_its_devices_and_its_average_and_peak_use():
    use = GpuUse()
    for at, (util, memory, full) in enumerate([(50, 10 * GB, False), (100, 30 * GB, False),
                                               (0, 20 * GB, True)]):
        use.sampled(float(at), {"job-1.1": Sample(UUID, util, memory, full)})
    # what counts for out of memory is its peak while its device was full
    assert use.full_peak("job-1.1") == 20 * GB
    assert use.ended("job-1.1") == {"uuids": ["GPU-0"], "samples": 3, "util_avg": 50.0,
                                    "util_peak": 100, "mem_avg": 20 * GB, "mem_peak": 30 * GB}
    assert use.ended("job-1.1") is None and use.full_peak("job-1.1") == 0  # said, forgotten


def test_a_job_at_zero_percent_for_the_timeout_is_idle_once_per_stretch():
    use = GpuUse(idle_timeout=10, idle_action=CANCEL)
    jobs = {"job-1.1"}
    idle = lambda at, util: use.sampled(at, {"job-1.1": Sample(UUID, util, GB)}, jobs)  # noqa
    assert idle(0, 0) == [] and idle(9, 0) == []
    [said] = idle(10, 0)
    assert said.key == "job-1.1" and said.cancel and said.seconds == 10
    assert said.reason == "idle: held GPU-0 at 0% utilisation for 10 s"
    assert idle(30, 0) == []  # said once for this stretch
    assert idle(31, 5) == [] and idle(32, 0) == [] and idle(41, 0) == []  # a new stretch
    assert [i.seconds for i in idle(42, 0)] == [10]


def test_tasks_are_never_idle_and_no_timeout_means_never():
    use = GpuUse(idle_timeout=1)
    assert use.sampled(0, {"t": Sample(UUID, 0, 0)}, set()) == []
    assert use.sampled(5, {"t": Sample(UUID, 0, 0)}, set()) == []
    never = GpuUse()
    assert never.sampled(0, {"j": Sample(UUID, 0, 0)}, {"j"}) == []
    assert never.sampled(1e9, {"j": Sample(UUID, 0, 0)}, {"j"}) == []


def test_a_warning_only_is_not_a_cancel_and_samples_of_attempts_gone_are_dropped():
    use = GpuUse(idle_timeout=1)
    use.sampled(0, {"j": Sample(UUID, 0, 0), "k": Sample(UUID, 0, 0)}, {"j"})
    [said] = use.sampled(1, {"j": Sample(UUID, 0, 0)}, {"j"})
    assert not said.cancel
    use.retain({"j"})
    assert use.ended("k") is None and use.ended("j")["samples"] == 2


def test_a_sample_counts_the_memory_of_the_attempts_own_processes_on_its_devices():
    import os

    from dsched.worker.gpus import GpuUsage
    from dsched.worker.gpusample import ProcessTree, samples

    me, other = os.getpid(), 999_999_999
    usage = [GpuUsage(0, 40, 30 * GB, 80 * GB), GpuUsage(1, 90, 9 * GB, 80 * GB),
             GpuUsage(2, 10, 5 * GB, 80 * GB)]
    processes = {0: {me: 20 * GB, other: 10 * GB}, 1: {other: 9 * GB}, 2: {}}
    holders = {"job-1.1": ((0, 1), me), "job-2.1": ((1,), None), "job-3.1": ((2,), None),
               "job-4.1": ((3,), me)}
    tree = ProcessTree()
    tree.scan()
    found = samples(usage, processes, holders, {0: "GPU-a", 1: "GPU-b"}, tree)
    # its own process on device 0; none of its on device 1, which others share
    assert found["job-1.1"] == Sample(("GPU-a", "GPU-b"), 90.0, 20 * GB)
    assert found["job-2.1"] == Sample(("GPU-b",), 90.0, 0)
    # NVML lists no process on device 2, and the attempt is alone there: the device's memory
    assert found["job-3.1"] == Sample(("gpu2",), 10.0, 5 * GB)
    assert "job-4.1" not in found  # its device was not read


def test_a_gap_without_samples_starts_an_idle_stretch_again():
    use = GpuUse(idle_timeout=10, idle_action=CANCEL, max_gap=3)
    jobs = {"j"}
    idle = lambda at: use.sampled(at, {"j": Sample(UUID, 0, GB)}, jobs)  # noqa: E731
    assert idle(0) == [] and idle(2) == []
    assert idle(30) == []  # cut off for 28 s: not 30 s idle, but idle from now on
    assert [idle(at) for at in (32, 34, 36, 38)] == [[]] * 4
    assert [i.seconds for i in idle(40)] == [10]


def test_a_device_is_full_at_95_percent_of_its_memory():
    from dsched.worker.gpus import GpuUsage
    from dsched.worker.gpusample import ProcessTree, samples

    usage = [GpuUsage(0, 10, 76 * GB, 80 * GB), GpuUsage(1, 10, 75 * GB, 80 * GB)]
    found = samples(usage, {}, {"a": ((0,), None), "b": ((1,), None)}, {}, ProcessTree())
    assert (found["a"].full, found["b"].full) == (True, False)
