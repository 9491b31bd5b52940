"""The dashboard's shell, script and style: small, served by the control plane itself, nothing from elsewhere."""

from __future__ import annotations

SHELL = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>llmgw</title><link rel="icon" href="/admin/icon.svg"><link rel="stylesheet" href="/admin/style.css"></head>
<body>
<header><h1>llmgw</h1><span id="status" role="status">loading…</span></header>
<form id="login" hidden><label>Operator token (the server's admin_token_file)
<input id="token" type="password" autocomplete="off" size="48"></label> <button type="submit">Show</button></form>
<main id="view"></main>
<script src="/admin/app.js"></script>
</body></html>
"""

# The token comes from the address's fragment (never sent to a server) or the form, and stays in this tab's
# session storage; the view is fetched with it every few seconds and replaced whole. A page link (the healthy nodes
# and replicas come a page at a time) sets the page the next fetches ask for.
APP_JS = r"""(function () {
  "use strict";
  var EVERY_MS = 5000;
  var status = document.getElementById("status");
  var view = document.getElementById("view");
  var form = document.getElementById("login");
  var page = 1;
  var m = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (m) {
    try { sessionStorage.setItem("llmgw-token", decodeURIComponent(m[1])); } catch (e) { /* not a token: ask */ }
    history.replaceState(null, "", location.pathname);
  }
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    sessionStorage.setItem("llmgw-token", document.getElementById("token").value.trim());
    form.hidden = true;
    refresh();
  });
  view.addEventListener("click", function (ev) {
    var a = ev.target.closest ? ev.target.closest("a[data-page]") : null;
    if (!a) { return; }
    ev.preventDefault();
    page = parseInt(a.getAttribute("data-page"), 10) || 1;
    refresh();
  });
  function refresh() {
    var token = sessionStorage.getItem("llmgw-token");
    if (!token) { form.hidden = false; status.textContent = "the operator token is needed"; return; }
    fetch("/admin/view?page=" + page, {headers: {"Authorization": "Bearer " + token}, cache: "no-store"})
      .then(function (r) {
        if (r.status === 401) {
          sessionStorage.removeItem("llmgw-token");
          form.hidden = false;
          throw new Error("the token was refused");
        }
        if (!r.ok) { throw new Error("the control plane answered " + r.status); }
        return r.text();
      })
      .then(function (html) {
        view.innerHTML = html;
        status.textContent = "updated " + new Date().toLocaleTimeString();
        status.className = "ok";
      })
      .catch(function (err) { status.textContent = "not updated: " + err.message; status.className = "stale"; });
  }
  refresh();
  setInterval(refresh, EVERY_MS);
})();
"""

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 1.5rem 2rem; color: #1d2330; background: #fafbfc; }
header { display: flex; align-items: baseline; gap: 1rem; border-bottom: 1px solid #d8dde6; }
h1 { font-size: 1.3rem; margin: .6rem 0; } h2 { font-size: 1.05rem; margin: 1.2rem 0 .4rem; }
#status.stale { color: #b42318; font-weight: 600; } #status.ok { color: #4a5568; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: .25rem .5rem; border-bottom: 1px solid #e6e9ef; vertical-align: top; }
th { font-weight: 600; background: #f1f3f7; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
svg.bar { width: 16rem; height: .8rem; background: #cde8d3; border-radius: 2px; }
svg.bar rect.used { fill: #2f6fdb; } svg.bar rect.faulty { fill: #d92d20; }
tr.down td, tr.failed td, tr.unresponsive td { color: #b42318; }
tr.pending td.phase, tr.starting td.phase { color: #b54708; }
tr.sleeping td.phase { color: #5b6b8c; }
td.warnings ul { margin: 0; padding-left: 1rem; color: #b54708; } td.why { max-width: 40rem; }
.tag { font-size: .8em; background: #fef0c7; padding: 0 .3em; border-radius: 3px; }
p.empty, p.pager { color: #6b7280; } p.idle { color: #b54708; }
tr.unresolved td.head, table.weights li.failed { color: #b42318; } table.weights li.absent { color: #b54708; }
table.weights ul { margin: 0; padding-left: 1rem; } table.weights svg.bar { width: 6rem; background: #e6e9ef; }
"""

ICON = """<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">
<rect width="16" height="16" rx="3" fill="#2f6fdb"/>
<rect x="3" y="9" width="2" height="4" fill="#fff"/><rect x="7" y="6" width="2" height="7" fill="#fff"/>
<rect x="11" y="3" width="2" height="10" fill="#fff"/></svg>
"""
