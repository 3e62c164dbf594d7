// Live updates without a framework: the server sends an `inbox` event
// naming what changed whenever what waits for a decision changes. The
// inbox then fetches its rows again (rendered and escaped by the server)
// if the change concerns them: the first page on any change, a later page
// when one of its items changed or went. A record's page says that the
// record changed. Without JavaScript the pages work the same, reloaded by
// hand, except for decisions over plain HTTP (below).
//
// This browser's key: made at each sign-in, kept in localStorage and sent
// with every form that changes something; the server keeps its digest
// with the session, and refuses a decision whose key is not the
// session's. Cookies do not keep ports apart, so a page on another port
// of this host can replace the session cookie with someone else's; it
// can neither read nor write this origin's storage. (crypto.subtle is
// missing on plain HTTP; getRandomValues is not, and the server hashes.)
var BROWSER_KEY = "idem-browser";
function browserKey() {
  try { return window.localStorage.getItem(BROWSER_KEY); } catch (e) { return null; }
}
// A new key, kept; null when this browser keeps no site data.
function newBrowserKey() {
  if (!window.crypto || !window.crypto.getRandomValues) return null;
  var bytes = new Uint8Array(32), key = "";
  window.crypto.getRandomValues(bytes);
  for (var i = 0; i < bytes.length; i++) key += ("0" + bytes[i].toString(16)).slice(-2);
  try {
    window.localStorage.setItem(BROWSER_KEY, key);
    return window.localStorage.getItem(BROWSER_KEY) === key ? key : null;
  } catch (e) { return null; }
}
document.addEventListener("submit", function (e) {
  var form = e.target;
  if (!form || (form.getAttribute("method") || "").toLowerCase() !== "post") return;
  var key = form.getAttribute("action") === "/login" ? newBrowserKey() : browserKey();
  var field = form.querySelector("input[name=browser]");
  if (!key) { if (field) field.parentNode.removeChild(field); return; }
  if (!field) {
    field = document.createElement("input");
    field.type = "hidden";
    field.name = "browser";
    form.appendChild(field);
  }
  field.value = key;
}, true);
// A page drawn for a session this browser did not start (planted from
// another port) says so before anyone clicks, and offers no decision.
(function () {
  var banner = document.getElementById("not-this-browser");
  if (!banner || !window.fetch) return;
  var key = browserKey(), headers = {};
  if (key) headers["Idem-Browser"] = key;
  fetch("/session/browser", { credentials: "same-origin", headers: headers }).then(function (r) {
    if (r.status !== 403) return;
    return r.text().then(function (text) {
      banner.textContent = text;
      banner.hidden = false;
      var buttons = document.querySelectorAll("main form[method=post] button");
      for (var i = 0; i < buttons.length; i++) buttons[i].disabled = true;
    });
  });
})();
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
