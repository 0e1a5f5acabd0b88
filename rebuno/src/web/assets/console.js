// The rebuno console's only script. It enhances pages that work without it: times in the
// viewer's zone (the exact time stays in the title), live output and live refreshes over the
// console's Server-Sent Events feeds. It never builds markup from data: text goes in as text,
// refreshed regions come from the server's own escaped HTML.
"use strict";
(function () {
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var iso = el.getAttribute("datetime");
      var d = new Date(iso);
      if (isNaN(d.getTime())) return;
      var text = d.toLocaleString();
      if (el.hasAttribute("data-left")) {
        var mins = Math.round((d.getTime() - Date.now()) / 60000);
        text += mins > 0 ? " (in " + (mins >= 120 ? Math.round(mins / 60) + " h" : mins + " min") + ")" : " (due)";
      }
      el.textContent = text;
      el.title = iso + " — " + d.toString();
    });
  }

  // Replaces the element with id `id` by the same element of a fresh copy of this page.
  function refresh(id) {
    var current = document.getElementById(id);
    if (!current) return;
    var busy = current.contains(document.activeElement) && document.activeElement.tagName === "TEXTAREA";
    var typed = Array.prototype.some.call(current.querySelectorAll("textarea"), function (t) { return t.value !== ""; });
    if (busy || typed) return;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById(id);
        if (!fresh) return;
        var open = {};
        current.querySelectorAll("details[open][data-key]").forEach(function (d) { open[d.getAttribute("data-key")] = true; });
        var node = document.importNode(fresh, true);
        node.querySelectorAll("details[data-key]").forEach(function (d) { if (open[d.getAttribute("data-key")]) d.open = true; });
        current.replaceWith(node);
        localTimes(node);
        // An execution that ended streams nothing more: drop an empty output box.
        var out = document.getElementById("output-section");
        if (out && node.getAttribute("data-terminal") === "true" && document.getElementById("output").textContent === "") {
          out.remove();
        }
        var flag = document.getElementById("live-flag");
        if (flag) flag.textContent = "updated " + new Date().toLocaleTimeString();
      })
      .catch(function () {});
  }

  function debounce(fn, ms) {
    var t = null;
    return function () {
      if (t) clearTimeout(t);
      t = setTimeout(fn, ms);
    };
  }

  function liveRegion(id, wants) {
    var el = document.getElementById(id);
    if (!el || !window.EventSource) return;
    var again = debounce(function () { refresh(id); }, 250);
    var source = new EventSource(el.getAttribute("data-changes"));
    // What changed between this page's rendering and the subscription is caught by one
    // refresh once the feed is open (and again after a reconnect).
    var opened = false;
    source.onopen = function () {
      if (opened) again();
      else { opened = true; refresh(id); }
    };
    source.onmessage = function (ev) {
      var change;
      try { change = JSON.parse(ev.data); } catch (e) { return; }
      if (change.resync || wants(change)) again();
    };
  }

  function liveOutput() {
    var out = document.getElementById("output");
    if (!out || !window.EventSource) return;
    var source = new EventSource(out.getAttribute("data-stream"));
    source.onmessage = function (ev) {
      var frame;
      try { frame = JSON.parse(ev.data); } catch (e) { return; }
      out.appendChild(document.createTextNode(String(frame.data)));
    };
    source.onerror = function () { source.close(); };
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    liveRegion("live-list", function () { return true; });
    var live = document.getElementById("live");
    if (live) {
      var id = live.getAttribute("data-execution");
      liveRegion("live", function (c) { return c.execution_id === id; });
    }
    liveOutput();
  });
})();
