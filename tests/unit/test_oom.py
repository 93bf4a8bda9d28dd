"""How a failed attempt is recognised as out of GPU memory, and how much its retry asks for
(``dsched.oom``)."""

from __future__ import annotations

import pytest

from dsched.oom import larger, out_of_memory, says_out_of_memory

GB = 10**9


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RuntimeError: CUDA error: out of memory",
    "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,024 bytes",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)",
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying",
    "ResourceExhaustedError: OOM when allocating tensor with shape[8192,8192]",
])
def test_the_errors_of_the_usual_gpu_libraries_are_recognised(line):
    assert says_out_of_memory(f"epoch 3\n{line}\n")
    assert out_of_memory("failed", line, peak=0, held=0)


def test_other_failures_and_other_outcomes_are_not_out_of_memory():
    assert not says_out_of_memory("MemoryError\nKilled\nValueError: bad shape")
    assert not out_of_memory("failed", "ValueError: bad shape", peak=10 * GB, held=18 * GB)
    # a job that completed, or was cancelled, ran out of nothing, whatever it printed
    assert not out_of_memory("completed", "CUDA out of memory", peak=0, held=0)
    assert not out_of_memory("cancelled", "CUDA out of memory", peak=18 * GB, held=18 * GB)


def test_a_failure_at_the_memory_it_held_is_out_of_memory_whatever_it_printed():
    assert out_of_memory("failed", "Segmentation fault", peak=17.2 * GB, held=18 * GB)
    assert not out_of_memory("failed", "Segmentation fault", peak=16 * GB, held=18 * GB)
    assert not out_of_memory("failed", "", peak=16 * GB, held=0)  # it held no memory it knew


def test_only_the_tail_of_a_long_output_is_read():
    assert not says_out_of_memory("CUDA out of memory\n" + "x" * 100_000)


def test_the_retry_asks_twice_its_grant_or_a_quarter_over_its_peak_within_the_largest_device():
    assert larger(18 * GB, 20 * GB, 80 * GB) == 36 * GB
    assert larger(10 * GB, 40 * GB, 80 * GB) == 50 * GB
    assert larger(50 * GB, 0, 80 * GB) == 80 * GB  # as much as the largest device has
    assert larger(80 * GB, 79 * GB, 80 * GB) is None  # nothing larger to ask for
    assert larger(10 * GB + 1, 0, 80 * GB) == 20 * GB + 10**6  # whole megabytes, rounded up
