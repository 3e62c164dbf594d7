// Live updates without a framework: the server sends an `inbox` event
// naming what changed whenever what waits for a decision changes. The
// inbox then fetches its rows again (rendered and escaped by the server)
// if the change concerns them: the first page on any change, a later page
// when one of its items changed or went. A record's page says that the
// record changed. Without JavaScript the pages work the same,
// reloaded by hand.
// Times are written in UTC; the reader sees them in their own time zone
// as well: an absolute time (`time.at`, whose text starts with it) reads in
// local time with the UTC time in its tooltip, a relative age has the
// local time in its tooltip.
function localTimes(root) {
  var times = root.querySelectorAll("time[datetime]");
  for (var i = 0; i < times.length; i++) {
    var el = times[i], utc = el.getAttribute("datetime"), when = new Date(utc);
    if (isNaN(when.getTime())) continue;
    var local = when.toLocaleString(undefined, {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
    });
    if (el.classList.contains("at") && el.textContent.indexOf(utc) === 0) {
      el.textContent = local + el.textContent.slice(utc.length);
      el.title = utc + " (UTC)";
    } else {
      el.title = local;
    }
  }
}
localTimes(document);
(function () {
  if (!window.EventSource) return;
  var rows = document.getElementById("inbox-rows");
  var record = document.getElementById("record");
  if (!rows && !record) return;
  var events = new EventSource("/events");
  // On (re)connecting as well: something may have changed between the
  // page being drawn and the stream opening.
  events.onopen = refresh;
  events.addEventListener("inbox", function (e) {
    if (concerns(e.data)) refresh();
  });
  // Whether the change an event names concerns this page.
  function concerns(data) {
    var change;
    try { change = JSON.parse(data); } catch (err) { return true; }
    if (!rows || change.more || rows.dataset.first === "true") return true;
    var gone = (change.changed || []).concat(change.removed || []);
    for (var i = 0; i < gone.length; i++) {
      if (rows.querySelector('tr[data-key="' + gone[i] + '"]')) return true;
    }
    return false;
  }
  // The server ends the stream when the session ends (signed out or
  // revoked, on any instance); the browser reconnects, and gives up on a
  // stream the server refused (401). While the server is away it retries.
  events.onerror = function () {
    if (events.readyState === EventSource.CLOSED) refresh();
  };
  // Say so once the server says this page is no longer signed in.
  function signedOut(r) {
    if (r.status !== 401) return false;
    events.close();
    var banner = document.getElementById("signed-out");
    if (banner) banner.hidden = false;
    return true;
  }
  function refresh() {
    if (rows) {
      fetch(rows.dataset.refresh, { credentials: "same-origin" }).then(function (r) {
        if (signedOut(r) || !r.ok) return;
        return r.text().then(function (html) {
          rows.innerHTML = html;
          localTimes(rows);
          var live = document.getElementById("live");
          if (live) live.textContent = "Updated " + new Date().toLocaleTimeString() + ".";
        });
      });
    }
    if (record) {
      fetch("/records/" + record.dataset.key + "/version", { credentials: "same-origin" }).then(function (r) {
        return !signedOut(r) && r.ok ? r.text() : null;
      }).then(function (version) {
        if (version !== null && version !== record.dataset.version) {
          document.getElementById("changed").hidden = false;
        }
      });
    }
  }
})();
