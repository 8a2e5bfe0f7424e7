// The console works without this script; it adds two things:
// a confirmation before destructive actions, and a refresh of the page's
// content every few seconds where the page asks for it (data-refresh).
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  function busy() {
    var active = document.activeElement;
    return active && (active.tagName === "INPUT" || active.tagName === "TEXTAREA" || active.tagName === "SELECT");
  }

  function refresh(main, period) {
    window.setTimeout(function () {
      if (document.hidden || busy()) {
        refresh(main, period);
        return;
      }
      fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) {
          return response.ok ? response.text() : null;
        })
        .then(function (text) {
          if (text) {
            var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("content");
            if (fresh) {
              main.innerHTML = fresh.innerHTML;
            }
          }
        })
        .catch(function () { /* the next round tries again */ })
        .then(function () { refresh(main, period); });
    }, period);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var main = document.getElementById("content");
    var period = main && parseInt(main.getAttribute("data-refresh"), 10);
    if (period > 0) {
      refresh(main, period);
    }
  });
})();
