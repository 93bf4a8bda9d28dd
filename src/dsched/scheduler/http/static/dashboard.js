// Keeps the dashboard's panels current without reloading the page: every few seconds, while
// the tab is visible, it asks for the panels rendered from the scheduler's latest snapshot
// (api/v1/panels, or what the page's <body data-panels> names, relative to its <base>) and
// swaps in those that changed. On a job's page it also follows the job's log: it asks for what
// was written after what it shows, and appends it, until the job has ended and its log is
// read to the end. A hidden tab asks nothing; it catches up as soon as it is shown again.
// While the scheduler does not answer, the page says so where it says the scheduler is ready,
// rather than go on showing the last state it got as if it were current.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var LOG_KEPT = 2000000;  // characters of a log the page keeps; the oldest go first
  var shown = {};
  var timer = null;
  var taken = document.getElementById("taken");
  var status = document.getElementById("poll-status");
  var panels = document.body.dataset.panels || "api/v1/panels";
  var log = document.getElementById("log");
  var logProblem = document.getElementById("log-problem");

  function schedule() {
    if (timer === null && !document.hidden) {
      timer = setTimeout(refresh, PERIOD_MS);
    }
  }

  function refresh() {
    timer = null;
    fetch(panels + location.search, {credentials: "same-origin"})
      .then(function (response) {
        if (response.status === 401) {
          location.reload();  // the token went stale: the page sends us to the login
          throw new Error("login needed");
        }
        if (!response.ok) {
          throw new Error(response.status + " " + response.statusText);
        }
        return response.json();
      })
      .then(function (data) {
        Object.keys(data.panels).forEach(function (name) {
          var panel = document.getElementById("panel-" + name);
          if (panel && shown[name] !== data.panels[name]) {
            panel.innerHTML = data.panels[name];
            shown[name] = data.panels[name];
          }
        });
        taken.textContent = new Date(data.taken * 1000).toTimeString().slice(0, 8);
        status.textContent = "";
        status.className = "";
        document.body.classList.remove("stale");
      })
      .catch(function (error) {
        unreachable(error.message);
      })
      .then(followLog)
      .then(schedule);
  }

  function unreachable(why) {
    var state = document.getElementById("scheduler-status");
    if (state) {
      state.textContent = "unreachable";
      state.className = "warn";
      state.dataset.status = "unreachable";
      state.title = why;
    }
    shown = {};  // every panel is replaced on the next answer, the status among them
    status.textContent = " · the scheduler is unreachable (" + why + "): trying again";
    status.className = "warn";
    document.body.classList.add("stale");
  }

  function jobEnded() {
    var final = document.querySelector("[data-job-final]");
    return final !== null && final.dataset.jobFinal === "true";
  }

  function followLog() {
    if (!log || (log.dataset.complete && jobEnded())) {
      return null;
    }
    return fetch(log.dataset.src + "?offset=" + log.dataset.offset, {credentials: "same-origin"})
      .then(function (response) {
        return response.json().then(function (data) {
          if (!response.ok) {  // no log yet, or its worker is away: said, and asked again
            throw new Error(data.error || response.status + " " + response.statusText);
          }
          return data;
        });
      })
      .then(function (data) {
        logProblem.textContent = "";
        if (String(data.attempt) !== log.dataset.attempt) {  // a new attempt, a new log
          log.dataset.attempt = data.attempt;
          log.dataset.offset = 0;
          log.dataset.complete = "";
          log.textContent = "";
          return;
        }
        var atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        if (data.text) {
          log.appendChild(document.createTextNode(data.text));
          if (log.textContent.length > LOG_KEPT) {
            log.textContent = log.textContent.slice(-LOG_KEPT);
          }
          if (atBottom) {
            log.scrollTop = log.scrollHeight;
          }
        }
        log.dataset.offset = data.next_offset;
        log.dataset.complete = data.ended && data.next_offset >= data.size ? "true" : "";
      })
      .catch(function (error) {
        logProblem.textContent = error.message;
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
    } else {
      refresh();
    }
  });
  schedule();
})();
