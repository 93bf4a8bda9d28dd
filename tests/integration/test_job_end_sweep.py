"""A job's end costs no walk of /proc when nothing it started is left (issue 20).

A supervisor is a child subreaper: once the children it has killed are reaped, the kernel says
it has none left (ECHILD), so it has no descendant at all. Walking /proc instead cost
milliseconds a process on every job's end. Each test runs in a process of its own (a
subreaper, whose children are only its test's).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_killed_child_is_waited_for_and_reaped_without_walking_proc():
    out = run("""
        import os, signal, subprocess
        from dsched.worker import containment
        containment.become_subreaper()
        child = subprocess.Popen(["sleep", "30"], start_new_session=True)
        def no_walk():
            raise AssertionError("walked /proc")
        containment._processes = no_walk
        os.kill(child.pid, signal.SIGKILL)  # dying, or a zombie not yet reaped, as a guard is
        print(containment.sweep(os.getpid()))
    """)
    assert out == "[]"


def test_what_a_job_left_in_another_session_is_still_found_and_killed():
    out = run("""
        import os, subprocess
        from dsched.worker import containment
        containment.CHILDLESS_WAIT = 0.05
        containment.become_subreaper()
        left = subprocess.Popen(["sleep", "30"], start_new_session=True)
        print(containment.sweep(os.getpid()), os.path.exists(f"/proc/{left.pid}"))
    """)
    assert out == "[] False"  # killed, and reaped
