"""A worker that reconnects says what it kept; nothing is computed twice, nothing leaks."""

from sched_story import Story, addr, started, task

from dsched.resources import Resources
from dsched.scheduler import actions as act, events as ev


def rejoin(story, name, nthreads=1, resources=None, held=(), running=()):
    return story(ev.WorkerJoined(address=addr(name), name=name, nthreads=nthreads,
                              resources=Resources.parse(resources), held=tuple(held),
                              running=tuple(running), now=story.now))


def test_a_kept_result_is_adopted_instead_of_recomputed():
    story = Story()
    story.worker("a")
    story.submit(task("x"))
    story.finish("x", nbytes=10)
    story.leave("a")  # the connection broke: x is lost and queued again
    assert story.state.tasks["x"].state == "queued"
    actions = rejoin(story, "a", held=[("x", 10)])
    assert started(actions) == []
    assert story.state.tasks["x"].state == "memory"
    assert story.state.tasks["x"].who_has == {addr("a"): None}


def test_a_result_no_one_needs_is_freed_on_the_worker():
    story = Story()
    actions = rejoin(story, "a", held=[("stale", 5)])
    assert act.SendFree(worker=addr("a"), keys=("stale",)) in actions


def test_a_result_recomputed_elsewhere_becomes_a_second_copy():
    story = Story()
    story.worker("b")
    story.submit(task("x"))
    story.finish("x", worker="b", nbytes=10)
    rejoin(story, "a", held=[("x", 10)])
    assert set(story.state.tasks["x"].who_has) == {addr("a"), addr("b")}


def test_a_task_still_running_there_is_adopted_not_run_twice():
    story = Story()
    story.worker("a", resources="GPU=1")
    story.submit(task("train", "GPU=1"))
    story.leave("a")
    assert story.state.tasks["train"].state == "queued"
    actions = rejoin(story, "a", resources="GPU=1", running=["train"])
    assert started(actions) == [("train", "a")]  # the worker ignores a repeated execute
    assert story.state.tasks["train"].processing_on == addr("a")
    story.finish("train", worker="a")
    assert story.state.tasks["train"].state == "memory"


def test_a_running_task_the_scheduler_does_not_know_is_cancelled_there():
    story = Story()
    actions = rejoin(story, "a", running=["ghost"])
    assert act.SendStopTask(key="ghost", worker=addr("a")) in actions


def test_an_adopted_result_ends_its_future_again_once():
    story = Story()
    story.worker("a")
    story.submit(task("x"))
    story.finish("x", nbytes=3)
    assert act.TellMoved(key="x", clients=("c",), who_has=()) in story.leave("a")  # lost
    actions = rejoin(story, "a", held=[("x", 3)])
    assert [a for a in actions if isinstance(a, (act.TellFinished, act.TellMoved))] == [
        act.TellFinished(key="x", clients=("c",), nbytes=3, who_has=(addr("a"),))]

