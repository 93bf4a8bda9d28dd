"""The executor runs tasks on threads, or in a child process pinned to exactly its GPUs."""

import asyncio
import os
import sys

import cloudpickle
import pytest

from deadline import wait_until_async
from dsched import serialize
from dsched.worker.executor import GpuProcessPool, TaskKilled, ThreadRunner

# The child process cannot import this test module, so ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def visible_devices():
    import os

    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"), os.getpid()


def fail():
    raise ValueError("bad input")


async def run_on(runner, function_bytes, args, kwargs):
    """The outcome ``runner`` hands its callback, awaited."""
    waiter = asyncio.get_running_loop().create_future()
    runner.submit(function_bytes, args, kwargs, waiter.set_result)
    return await waiter


async def test_thread_runner_returns_values_and_exceptions():
    runner = ThreadRunner(2)
    try:
        ok = await run_on(runner, serialize.dumps(lambda a, b=0: a + b), (1,), {"b": 2})
        assert ok.ok and ok.value == 3 and ok.stop >= ok.start
        bad = await run_on(runner, serialize.dumps(fail), (), {})
        assert not bad.ok and "bad input" in bad.traceback
        assert type(serialize.loads_exception(bad.exception, bad.traceback)) is ValueError
    finally:
        runner.close()


async def test_gpu_child_sees_exactly_its_devices_and_is_reused():
    pool = GpuProcessPool(base_env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    function, args = serialize.dumps(visible_devices), serialize.dumps(((), {}))
    try:
        first = await pool.run("a", (1, 3), function, args)
        second = await pool.run("b", (1, 3), function, args)
        other = await pool.run("c", (0,), function, args)
        assert first.value[:2] == ("1,3", "PCI_BUS_ID")
        assert second.value[2] == first.value[2], "an idle child for the same devices is reused"
        assert other.value[:2] == ("0", "PCI_BUS_ID") and other.value[2] != first.value[2]
        failed = await pool.run("d", (0,), serialize.dumps(fail), args)
        assert not failed.ok and "ValueError" in failed.traceback
    finally:
        await pool.close()


async def test_killing_a_running_gpu_task_ends_its_process():
    import time

    pool = GpuProcessPool()
    try:
        run = asyncio.ensure_future(
            pool.run("slow", (0,), serialize.dumps(time.sleep), serialize.dumps(((60,), {})))
        )
        await wait_until_async(lambda: pool.kill("slow"), what="the task to start")
        with pytest.raises(TaskKilled):
            await asyncio.wait_for(run, 30)
    finally:
        await pool.close()


async def test_a_task_killed_while_its_process_starts_never_runs():
    pool = GpuProcessPool()
    try:
        run = asyncio.ensure_future(
            pool.run("early", (0,), serialize.dumps(visible_devices), serialize.dumps(((), {})))
        )
        await asyncio.sleep(0)  # the run is now starting its child process
        assert pool.kill("early")
        with pytest.raises(TaskKilled, match="before its process started"):
            await asyncio.wait_for(run, 30)
    finally:
        await pool.close()


def end_process(how):
    import os
    import signal

    if how == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


async def test_a_gpu_task_whose_process_dies_is_told_how_it_died():
    pool = GpuProcessPool()
    args = lambda how: serialize.dumps(((how,), {}))  # noqa: E731
    try:
        with pytest.raises(TaskKilled, match=r"exited with code 3$"):
            await pool.run("a", (0,), serialize.dumps(end_process), args("exit"))
        with pytest.raises(TaskKilled, match=r"was killed by signal 9 \(SIGKILL\)$"):
            await pool.run("b", (0,), serialize.dumps(end_process), args("kill"))
    finally:
        await pool.close()
