"""The dashboard's parts that need no network: the token and Host rules, snapshots built at
most once a second, the observations the scheduler shell feeds, the page's helpers, and the
metric families made from a snapshot (parsed back as Prometheus reads them)."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from dsched.resources import Resources
from dsched.scheduler import actions as act, events as ev
from dsched.scheduler.http import auth, metrics, page
from dsched.scheduler.http.observe import Histogram, Observations
from dsched.scheduler.http.snapshot import Snapshots
from dsched.scheduler.task import Task


def test_the_dashboard_token_is_derived_from_the_cluster_token_and_not_the_reverse():
    token = auth.dashboard_token("cluster-secret")
    assert token == auth.dashboard_token("cluster-secret") != auth.dashboard_token("other")
    assert len(token) == 64 and "cluster-secret" not in token
    assert auth.matches(token, token) and auth.matches(f" {token}\n", token)
    assert not auth.matches(None, token) and not auth.matches("cluster-secret", token)


def test_only_the_local_interfaces_need_no_token():
    for host in ("127.0.0.1", "::1", "localhost", "LOCALHOST"):
        assert not auth.token_required(host)
    for host in ("127.0.0.2", "0.0.0.0", "::", "10.1.2.3", "node1"):
        assert auth.token_required(host)


def test_without_a_token_only_loopback_host_names_are_answered():
    for header in ("localhost", "LOCALHOST:8787", "127.0.0.1", "127.0.0.1:8787",
                   "127.3.2.1:80", "[::1]", "[::1]:8787"):
        assert auth.host_allowed(header, "127.0.0.1"), header
    # Names a DNS server answers for (a rebinding page's own), and what is not a Host at all.
    for header in ("evil.example", "evil.example:8787", "localhost.evil.example",
                   "127.0.0.1.nip.io:8787", "10.0.0.1:8787", "[::2]:8787", "::1", "",
                   "localhost:80:80", "localhost:port", "[::1"):
        assert not auth.host_allowed(header, "127.0.0.1"), header
    assert auth.host_allowed("Box.Example:8787", "box.example")  # the configured host
    assert auth.host_allowed("[::1]:1", "::1") and not auth.host_allowed("box:1", "localhost")


def test_bearer_headers_are_read_strictly():
    assert auth.bearer("Bearer abc") == auth.bearer("bearer  abc ") == "abc"
    for header in (None, "", "Bearer", "Bearer ", "Basic abc", "abc"):
        assert auth.bearer(header) is None


def test_a_snapshot_is_built_at_most_once_per_max_age():
    now = [0.0]
    built = []
    snapshots = Snapshots(lambda: built.append(1) or {"n": len(built)}, lambda: now[0],
                          max_age=1.0, wall_clock=lambda: 1e9)
    first = snapshots.current()
    assert snapshots.current() is first and snapshots.current().parts == {"n": 1}
    now[0] = 0.99
    assert snapshots.current() is first
    now[0] = 1.0
    assert snapshots.current().parts == {"n": 2} and snapshots.builds == 2


def test_histograms_count_at_or_below_each_bound():
    h = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):
        h.observe(value)
    assert h.as_dict() == {"buckets": [["0.1", 2], ["1.0", 4], ["+Inf", 5]],
                           "sum": 8.65, "count": 5}


def test_observations_take_waits_run_times_and_failures_from_what_the_shell_hands_them():
    t = Task("k", b"", Resources.parse(""), 0, 1, 0, None, "k")
    t.queued_at, t.started = 2.0, 2.5
    observed = Observations({"k": t}, wall_clock=lambda: 1234.0)
    observed(ev.Tick(now=2.5), [act.SendExecute(key="k", worker="w", spec=b"",
                                            resources=Resources.parse(""))])
    assert observed.queue_wait.count == 1 and observed.queue_wait.sum == 0.5
    observed(ev.WorkerTaskFinished(key="k", worker="w", start=10.0, stop=13.0, now=3), [])
    observed(ev.WorkerTaskFinished(key="k", worker="w", duration=2.0, now=3), [])
    assert observed.run_time.count == 2 and observed.run_time.sum == 5.0
    erred = ev.WorkerTaskErred(key="k", worker="tcp://w", now=4)
    observed(erred, [act.TellErred(key="k", clients=("c",), error="exception",
                                   text="Traceback ...\n  line 1\nValueError: boom\n"),
                     act.TellErred(key="d", clients=("c",), error="dependency", text="k")])
    assert observed.failed == {"exception": 1, "dependency": 1}
    (failure,) = observed.failures  # the one failed with an input is only counted
    assert failure == {"time": 1234.0, "key": "k", "error": "exception",
                       "message": "ValueError: boom", "worker": "tcp://w",
                       "text": "Traceback ...\n  line 1\nValueError: boom\n"}


def test_task_failures_name_their_worker_as_job_failures_do_even_once_it_left():
    t = Task("k", b"", Resources.parse(""), 0, 1, 0, None, "k")
    t.queued_at = t.started = 1.0
    workers = {"tcp://10.0.0.7:4000": SimpleNamespace(name="gpu-a")}
    observed = Observations({"k": t}, workers, wall_clock=lambda: 9.0)
    observed(ev.Tick(now=1), [act.SendExecute(key="k", worker="tcp://10.0.0.7:4000", spec=b"",
                                          resources=Resources.parse(""))])
    erred = act.TellErred(key="k", clients=("c",), error="exception", text="ValueError: x")
    observed(ev.WorkerTaskErred(key="k", worker="tcp://10.0.0.7:4000", now=2), [erred])
    del workers["tcp://10.0.0.7:4000"]  # its death fails a task after it left the state
    killed = act.TellErred(key="k", clients=("c",), error="killed_worker", text="died")
    observed(ev.WorkerLeft(address="tcp://10.0.0.7:4000", now=3), [killed])
    assert [f["worker"] for f in observed.failures] == ["gpu-a", "gpu-a"]
    assert observed.worker_name("tcp://10.0.0.7:4000") == "tcp://10.0.0.7:4000"  # forgotten
    assert observed.worker_name(None) is None


def test_pages_of_a_list_link_to_each_other_relatively():
    items = list(range(120))
    first = page.page(items, "workers", {"x": "1"}, rows=50)
    assert (first.items, first.previous) == (items[:50], None)
    assert first.next == "./?workers.offset=50&x=1"
    second = page.page(items, "workers", {"workers.offset": "50", "x": "1"}, rows=50)
    assert (second.first, second.last, second.total) == (51, 100, 120)
    assert second.previous == "./?x=1" and second.next == "./?workers.offset=100&x=1"
    assert page.page(items, "workers", {"workers.offset": "999"}, rows=50).items == items[100:]
    assert page.page(items, "workers", {"workers.offset": "x"}, rows=50).offset == 0
    assert page.page([], "workers", {}).items == []


def test_numbers_read_as_people_read_them():
    assert [page.size(n) for n in (512, 6 * 2**30, None)] == ["512 B", "6.0 GiB", "?"]
    assert [page.quantity(q) for q in (2, 0.5, 1.5e11)] == ["2", "0.5", "1.5e+11"]
    assert [page.seconds(s) for s in (0.25, 12, 600, 9000)] == ["250 ms", "12 s", "10 min",
                                                                "2.5 h"]
    assert page.meter(1, 2, 'a "GPU"') == ('<meter min="0" max="2" value="1" high="1.8" '
                                           'title="a &quot;GPU&quot;" '
                                           'aria-label="a &quot;GPU&quot;"></meter>')
    assert page.meter(None, 2, "x") == page.meter(1, 0, "x") == ""


def test_metric_families_from_a_snapshot_follow_prometheus_rules():
    histogram = Histogram((1.0,)).as_dict()
    parts = {
        "cluster": {"version": "0.1.0", "python": "3.11.7", "ready": False, "clients": 2,
                    "loop_lag_histogram": histogram,
                    "resources": {"GPU": {"used": 1, "total": 4}}},
        "workers": {"by_state": {"connected": 1, "draining": 1}, "items": [
            {"name": "a", "nthreads": 4, "threads_busy": 1, "memory": None,
             "heartbeat_age": 0.5, "resources": [{"name": "GPU", "used": 1, "total": 4}],
             "gpus": [{"index": 3, "memory_total": 80, "memory_used": None,
                       "utilization": None, "fenced": "gpu fault: Xid 79 on gpu3"}]}]},
        "tasks": {"counts": {"queued": 2}, "pending": {"by_reason": {"too_large": 2}},
                  "counters": {"placed": 9}, "failed": {"killed_worker": 1},
                  "queue_wait": histogram, "run_time": histogram},
    }
    collector = metrics.Collector(lambda: parts, {"cluster": metrics.cluster_metrics,
                                                  "workers": metrics.worker_metrics,
                                                  "tasks": metrics.task_metrics})
    text = metrics.exposition(metrics.registry(collector)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, kind in (("dsched_placements", "counter"), ("dsched_task_failures", "counter"),
                       ("dsched_task_queue_wait_seconds", "histogram"),
                       ("dsched_task_run_seconds", "histogram"), ("dsched_build_info", "gauge"),
                       ("dsched_gpu_memory_total_bytes", "gauge")):
        assert families[name].type == kind, name
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in families.values() for s in f.samples}
    assert samples[("dsched_ready", ())] == 0
    assert samples[("dsched_placements_total", ())] == 9
    assert samples[("dsched_tasks_pending", (("reason", "too_large"),))] == 2
    assert samples[("dsched_tasks_pending", (("reason", "no_workers"),))] == 0
    assert samples[("dsched_gpu_memory_total_bytes", (("gpu", "3"), ("worker", "a")))] == 80
    assert not [k for k in samples if k[0] == "dsched_gpu_memory_used_bytes"]  # unknown yet
    assert samples[("dsched_gpu_fenced", (("gpu", "3"), ("worker", "a")))] == 1
    assert samples[("dsched_workers", (("state", "draining"),))] == 1
