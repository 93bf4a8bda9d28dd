"""A task defined in a script's ``__main__`` that raises: the traceback the user sees names the
script's file and shows the failing line, as a local call would, for thread tasks, GPU tasks
and Dask graph tasks alike, even where the worker cannot read the file (cloudpickle 3.1.3 on
names every such file ``<dynamic-code>`` and sends no source)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import linecache, os, sys, traceback

    import dask.array as da
    from dsched import Client


    def helper(x):
        return [1, 2][x]


    def compute(x):
        y = x + 1
        return helper(y)


    def block_fails(block):
        raise ZeroDivisionError("a block went wrong")


    if __name__ == "__main__":
        # The workers must not find this file where it was: its lines reach them with the
        # functions, or not at all.
        linecache.getlines(__file__)
        os.rename(__file__, __file__ + ".gone")
        with Client(n_workers=1, threads_per_worker=1, resources="GPU=1",
                    env={"SCHED_FAKE_NVML": '{"count": 1}'}) as client:
            for resources in (None, {"GPU": 1}):
                try:
                    client.submit(compute, 5, resources=resources).result(timeout=60)
                except IndexError as error:
                    print(error.__cause__.text, "-----", sep="\\n")
            try:
                da.ones(4, chunks=2).map_blocks(block_fails, dtype=float).compute(scheduler=client)
            except ZeroDivisionError as error:
                print(error.__cause__.text, "-----", sep="\\n")
''')


def test_remote_tracebacks_name_the_scripts_file_and_show_its_lines(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    thread, gpu, graph = done.stdout.split("-----\n")[:3]

    def frame(function: str, line: str) -> str:
        number = SCRIPT.splitlines().index(f"    {line}") + 1
        return f'File "{script}", line {number}, in {function}\n    {line}\n'

    for text in (thread, gpu):
        assert frame("compute", "return helper(y)") in text, text
        assert frame("helper", "return [1, 2][x]") in text, text
    assert frame("block_fails", 'raise ZeroDivisionError("a block went wrong")') in graph, graph
    assert "<dynamic-code>" not in done.stdout
