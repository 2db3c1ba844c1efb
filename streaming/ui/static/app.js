// txnwatch status page: refresh the <main id="live"> fragment from its JSON endpoint, keep the
// "last updated" line and the stale banner honest, copy commands to the clipboard.
// Plain JavaScript, no build step, nothing loaded from elsewhere.
(function () {
  "use strict";

  var POLL_MS = 3000;
  var live = null;
  var lastOkFetch = Date.now();
  var lastUpdateMs = null;
  var serverSkewMs = 0;      // browser clock minus server clock, from each answer
  var staleAfterMs = 30000;
  var serverStale = false;
  var serverReason = "";
  var fetchError = null;

  function fmtAgo(ms) {
    if (ms < 0) { ms = 0; }
    var s = Math.floor(ms / 1000);
    if (s < 60) { return s + " s ago"; }
    var m = Math.floor(s / 60);
    if (m < 60) { return m + " min ago"; }
    return Math.floor(m / 60) + " h " + (m % 60) + " min ago";
  }

  function fmtTime(ms) {
    return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }

  function renderStatus() {
    var banner = document.getElementById("stale-banner");
    var reasonEl = document.getElementById("stale-reason");
    var agoEl = document.getElementById("last-updated-ago");
    var now = Date.now();
    var reason = null;
    if (fetchError) {
      reason = "cannot reach txnwatch (" + fetchError + ") since " + fmtAgo(now - lastOkFetch).replace(" ago", "");
    } else if (serverStale) {
      reason = serverReason;
    } else if (now - lastOkFetch > staleAfterMs) {
      reason = "no answer from txnwatch for " + fmtAgo(now - lastOkFetch).replace(" ago", "");
    }
    if (banner) {
      banner.hidden = !reason;
      document.body.classList.toggle("is-stale", !!reason);
    }
    if (reasonEl && reason) { reasonEl.textContent = reason; }
    if (agoEl) {
      agoEl.textContent = lastUpdateMs ? "(" + fmtAgo(now - serverSkewMs - lastUpdateMs) + ")" : "";
    }
  }

  function applyMeta(doc) {
    serverSkewMs = Date.now() - doc.generated_ms;
    staleAfterMs = doc.stale_after_ms || staleAfterMs;
    serverStale = !!doc.stale;
    serverReason = doc.stale_reason || "";
    lastUpdateMs = doc.last_update_ms;
    var el = document.getElementById("last-updated");
    if (el) {
      el.textContent = lastUpdateMs ? fmtTime(lastUpdateMs) : "never";
      el.setAttribute("data-ms", lastUpdateMs || "");
    }
  }

  function poll() {
    var url = live.getAttribute("data-poll");
    var ctl = window.AbortController ? new AbortController() : null;
    var timer = ctl ? setTimeout(function () { ctl.abort(); }, 10000) : null;
    fetch(url, { credentials: "same-origin", cache: "no-store", signal: ctl ? ctl.signal : undefined })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (doc) {
        lastOkFetch = Date.now();
        fetchError = null;
        applyMeta(doc);
        var v = String(doc.version);
        if (doc.html !== undefined && v !== live.getAttribute("data-version")) {
          live.innerHTML = doc.html;   // server-rendered by Jinja with autoescape
          live.setAttribute("data-version", v);
        }
        if (doc.counts) {
          document.title = "txnwatch — " + doc.counts.hanging + " hanging, " + doc.counts.late + " late, " +
            doc.counts.unverified + " unverified";
        }
      })
      .catch(function (e) {
        fetchError = (e && e.name === "AbortError") ? "timed out" : String(e && e.message || e);
      })
      .then(function () {
        if (timer) { clearTimeout(timer); }
        renderStatus();
        setTimeout(poll, POLL_MS);
      });
  }

  // -- copy buttons ------------------------------------------------------------------------
  function fallbackCopy(text) {
    var ta = document.createElement("textarea");
    ta.value = text;
    ta.setAttribute("readonly", "");
    ta.className = "offscreen";
    document.body.appendChild(ta);
    ta.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    document.body.removeChild(ta);
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).catch(function () { return fallbackCopy(text); });
    }
    return fallbackCopy(text);
  }

  function flash(button, label, cls) {
    var old = button.getAttribute("data-label") || button.textContent;
    button.setAttribute("data-label", old);
    button.textContent = label;
    button.classList.add(cls);
    setTimeout(function () { button.textContent = old; button.classList.remove(cls); }, 2000);
  }

  document.addEventListener("click", function (ev) {
    var button = ev.target.closest ? ev.target.closest("button.copy") : null;
    if (!button) { return; }
    var src = document.getElementById(button.getAttribute("data-copy"));
    if (!src) { return; }
    var text = src.textContent;
    copyText(text).then(function () {
      window.__txnwatchLastCopied = text;   // read back by the browser tests
      flash(button, "Copied", "copied");
    }, function () {
      // Select it so Ctrl+C still works.
      var range = document.createRange();
      range.selectNodeContents(src);
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      flash(button, "Press Ctrl+C", "failed");
    });
  });

  document.addEventListener("DOMContentLoaded", function () {
    live = document.getElementById("live");
    if (!live) { return; }
    staleAfterMs = parseInt(live.getAttribute("data-stale-after-ms"), 10) || staleAfterMs;
    var gen = parseInt(live.getAttribute("data-generated-ms"), 10);
    if (gen) { serverSkewMs = Date.now() - gen; }
    var lu = document.getElementById("last-updated");
    lastUpdateMs = lu && parseInt(lu.getAttribute("data-ms"), 10) || null;
    serverStale = !document.getElementById("stale-banner").hidden;
    serverReason = document.getElementById("stale-reason").textContent;
    renderStatus();
    setInterval(renderStatus, 1000);
    setTimeout(poll, POLL_MS);
  });
}());
