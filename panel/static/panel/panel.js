// dshloop panel: the little JavaScript that earns its keep. Everything works without it.
(function () {
  "use strict";

  // Live countdowns (spec §4: "The UI may derive countdown text from next_at and the current
  // clock"). The server renders the same text (loops/panel/humanize.py countdown/short_span);
  // this only keeps it current. It never infers state: "overdue" here is just the clock's reading.
  var UNITS = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];

  function span(seconds) {
    seconds = Math.floor(Math.abs(seconds));
    if (seconds < 60) return seconds + " s";
    var parts = [];
    for (var i = 0; i < UNITS.length && parts.length < 2; i++) {
      if (seconds >= UNITS[i][0] || parts.length) {
        parts.push([Math.floor(seconds / UNITS[i][0]), UNITS[i][1]]);
        seconds %= UNITS[i][0];
      }
    }
    if (parts.length === 2 && parts[1][0] === 0) parts.pop();
    return parts.map(function (p) { return p[0] + " " + p[1]; }).join(" ");
  }

  function tick() {
    var now = Date.now();
    var clocks = document.querySelectorAll("[data-countdown]");
    for (var i = 0; i < clocks.length; i++) {
      var el = clocks[i];
      var at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) continue;
      var delta = (at - now) / 1000;
      var text = delta >= 0 ? "in " + span(delta) : delta > -30 ? "due now" : "overdue by " + span(delta);
      if (el.textContent !== text) el.textContent = text;
      el.classList.toggle("is-late", delta <= -30);
    }
  }

  function filtersAutoSubmit() {
    var forms = document.querySelectorAll("form[data-autosubmit]");
    Array.prototype.forEach.call(forms, function (form) {
      form.addEventListener("change", function (event) {
        if (event.target.tagName === "SELECT") form.submit();
      });
    });
  }

  // A cron loop is usually meant in the wall time of the person creating it: on a fresh form,
  // pick the browser's zone (it stays visible and changeable; "Host time zone" is one option away).
  function suggestZone() {
    var select = document.querySelector("select[data-browser-zone]");
    if (!select || !window.Intl) return;
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
    if (!zone) return;
    var known = Array.prototype.some.call(select.options, function (o) { return o.value === zone; });
    if (!known) return;
    var hint = document.querySelector("[data-zone-hint]");
    var bound = select.form && select.form.hasAttribute("data-bound");
    if (!bound && select.value === "") select.value = zone;
    if (hint) {
      hint.textContent = "Your browser's time zone is " + zone + ".";
      hint.hidden = false;
    }
  }

  function start() {
    tick();
    setInterval(tick, 1000);
    filtersAutoSubmit();
    suggestZone();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
