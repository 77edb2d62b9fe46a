// Live updates: each [data-live] part of a page is fetched again every few seconds (the same
// page, asking for its live part only) and replaced when it changed. The server escapes it.
(function () {
  "use strict";
  var parts = document.querySelectorAll("[data-live]");
  if (!parts.length) return;
  function poll() {
    fetch(window.location.pathname, {
      credentials: "same-origin",
      headers: { "X-Ctrlrun-Fragment": "1" },
      redirect: "error"
    }).then(function (r) {
      if (!r.ok) throw new Error(String(r.status));
      return r.text();
    }).then(function (html) {
      var part = parts[0];
      if (part.getAttribute("data-html") !== html) {
        part.setAttribute("data-html", html);
        part.innerHTML = html;
        document.body.setAttribute("data-updated", String(Date.now()));
      }
    }).catch(function () {
      document.body.setAttribute("data-stale", "1");
    });
  }
  window.setInterval(poll, 2000);
})();
