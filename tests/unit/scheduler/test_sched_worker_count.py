"""Clients that watch the workers are told their number, once when they ask and once on each
change; a draining worker counts until it leaves, and a client that went away is told no more."""

from __future__ import annotations

from sched_story import Story, addr

from dsched.scheduler import actions as act
from dsched.scheduler import events as ev


def counts(actions: list) -> list[tuple[tuple[str, ...], int]]:
    return [(a.clients, a.count) for a in actions if isinstance(a, act.TellWorkerCount)]


def watch(s: Story, client: str = "c") -> list:
    return s(ev.WorkersWatched(client=client, now=s.now))


def test_a_watcher_is_told_the_number_now_then_on_each_join_and_leave():
    s = Story()
    s.worker("a")
    assert counts(watch(s)) == [(("c",), 1)]
    assert counts(s.worker("b")) == [(("c",), 2)]
    assert counts(s.leave("a")) == [(("c",), 1)]
    assert counts(s.leave("b")) == [(("c",), 0)]


def test_nothing_is_told_when_the_number_does_not_change():
    s = Story()
    s.worker("a")
    watch(s)
    assert counts(s.submit(*[]) + s.tick()) == []
    assert counts(s.worker("a")) == []  # the same worker registering again
    assert counts(s.worker("other", nthreads=0)) == []  # refused: it never joined
    assert counts(s(ev.WorkerLeft(address=addr("never-joined"), now=s.now))) == []


def test_a_draining_worker_counts_until_it_leaves():
    s = Story()
    s.worker("a")
    watch(s)
    assert counts(s(ev.WorkerDraining(address=addr("a"), now=s.now))) == []
    assert counts(s(ev.WorkerLeft(address=addr("a"), reason="drained", expected=True,
                                  now=s.now))) == [(("c",), 0)]


def test_each_watcher_hears_each_change_once_and_a_new_one_the_number_now():
    s = Story()
    watch(s, "c")
    s.worker("a")
    assert counts(watch(s, "d")) == [(("d",), 1)]
    assert counts(s.worker("b")) == [(("c", "d"), 2)]


def test_a_client_that_went_away_is_told_no_more():
    s = Story()
    assert counts(watch(s, "c")) == [(("c",), 0)]
    watch(s, "d")
    s.disconnect("c")
    assert counts(s.worker("a")) == [(("d",), 1)]
    s.disconnect("d")
    assert counts(s.worker("b")) == []
    assert counts(watch(s, "e")) == [(("e",), 2)]
    assert counts(s.leave("a")) == [(("e",), 1)]
