"""A flood of bad peers costs the log one warning a minute, with a count of the rest."""

import logging

from dsched.comm.quiet import Limited


def test_warnings_of_one_kind_come_at_most_once_an_interval_and_count_the_rest(caplog,
                                                                              monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("dsched.comm.quiet.time.monotonic", lambda: now[0])
    limited = Limited(logging.getLogger("dsched.test"), interval=60)
    with caplog.at_level(logging.DEBUG, logger="dsched.test"):
        for i in range(1000):
            limited.warning("Refused connection from %s", f"peer-{i}")
        now[0] += 61
        limited.warning("Refused connection from %s", "late")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["Refused connection from peer-0",
                        "Refused connection from late (and 999 more like it in the last 61 s)"]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 999  # still there
