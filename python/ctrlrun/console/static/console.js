// Times: each <time datetime="...Z"> the server wrote in UTC is shown in the viewer's zone
// (the UTC time stays its title, shown on hover).
// Live updates: each [data-live] part of a page is fetched again every few seconds (the same
// page and query, asking for its live part only, with the ETag of what it shows: a 304 with no
// body while nothing changed) and replaced when it changed. The server escapes it.
(function () {
  "use strict";
  function two(n) { return (n < 10 ? "0" : "") + n; }
  function zone(d) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d);
      for (var i = 0; i < parts.length; i++) {
        if (parts[i].type === "timeZoneName") return " " + parts[i].value;
      }
    } catch (e) { /* no Intl: the offset below */ }
    var off = -d.getTimezoneOffset();
    return " UTC" + (off < 0 ? "-" : "+") + two(Math.floor(Math.abs(off) / 60)) + ":" + two(Math.abs(off) % 60);
  }
  function localize(root) {
    var times = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) continue;
      t.textContent = d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) +
        " " + two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds()) + zone(d);
    }
  }
  localize(document);
  var parts = document.querySelectorAll("[data-live]");
  if (!parts.length) return;
  var etag = null;
  function poll() {
    var headers = { "X-Ctrlrun-Fragment": "1" };
    if (etag) headers["If-None-Match"] = etag;
    fetch(window.location.pathname + window.location.search, {
      credentials: "same-origin",
      cache: "no-store",
      headers: headers,
      redirect: "error"
    }).then(function (r) {
      if (r.status === 304) return null;
      if (!r.ok) throw new Error(String(r.status));
      etag = r.headers.get("ETag");
      return r.text();
    }).then(function (html) {
      document.body.removeAttribute("data-stale");
      if (html === null) return;
      var part = parts[0];
      if (part.getAttribute("data-html") !== html) {
        part.setAttribute("data-html", html);
        part.innerHTML = html;
        localize(part);
        document.body.setAttribute("data-updated", String(Date.now()));
      }
    }).catch(function () {
      document.body.setAttribute("data-stale", "1");
    });
  }
  window.setInterval(poll, 2000);
})();
