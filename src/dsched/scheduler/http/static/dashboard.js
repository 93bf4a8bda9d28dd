// Keeps the dashboard's panels current without reloading the page: every few seconds, while
// the tab is visible, it asks api/v1/panels (relative to the page's <base>) for the panels
// rendered from the scheduler's latest snapshot and swaps in those that changed. A hidden tab
// asks nothing; it catches up as soon as it is shown again.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var shown = {};
  var timer = null;
  var taken = document.getElementById("taken");
  var status = document.getElementById("poll-status");

  function schedule() {
    if (timer === null && !document.hidden) {
      timer = setTimeout(refresh, PERIOD_MS);
    }
  }

  function refresh() {
    timer = null;
    fetch("api/v1/panels" + location.search, {credentials: "same-origin"})
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
        document.body.classList.remove("stale");
      })
      .catch(function (error) {
        status.textContent = " (not updated: " + error.message + ")";
        document.body.classList.add("stale");
      })
      .then(schedule);
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
