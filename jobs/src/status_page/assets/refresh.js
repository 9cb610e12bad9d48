// Refreshes the status page in place: every second, fetches the live part (server-rendered
// HTML, the path in <body data-live>) and swaps it into <main id="live">. No full reloads;
// body[data-refreshes] counts the swaps, the footer says when a fetch failed.
(function () {
  "use strict";
  var body = document.body;
  var live = document.getElementById("live");
  var state = document.getElementById("refresh-state");
  var refreshes = 0;
  function refresh() {
    fetch(body.dataset.live, { cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        refreshes += 1;
        body.dataset.refreshes = String(refreshes);
        state.textContent = "refreshed in place every second";
        state.className = "";
      })
      .catch(function (error) {
        state.textContent = "not refreshed: " + error.message + " (the job may have stopped)";
        state.className = "stale";
      })
      .finally(function () {
        setTimeout(refresh, 1000);
      });
  }
  setTimeout(refresh, 1000);
})();
