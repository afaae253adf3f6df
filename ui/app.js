/*
 * The operator page. It holds no data of its own: every datum comes from
 * the admin API of the listener that served it (same origin, relative
 * paths), asked with the admin token this tab keeps in sessionStorage and
 * sends as "Authorization: Bearer". No cookie is involved, so a page of
 * another site can make the browser send nothing that acts.
 *
 * Every text from the API is written with textContent, never as HTML.
 */
"use strict";

(function () {
  const TOKEN_KEY = "idemproxy.admin_token";
  const REFRESH_MS = 5000;
  const LIST_LIMIT = 1000;
  const API_TIMEOUT_MS = 10000;  /* a call that takes longer is given up (and asked again) */
  const NONE = "\u2014";
  const OUTCOMES = ["owner", "replay", "conflict", "in_progress", "unknown", "released",
    "rejected", "store_unavailable", "pass"];

  const $ = (id) => document.getElementById(id);

  let records = [];       /* the last list, as the API gave it */
  let selected = null;    /* {actor, operation, key, gone} of the record shown, or null */
  let shown = null;       /* that record as last fetched, or null */
  let pending = null;     /* the action the dialog asks about: "release" or "resolve" */
  let skewMs = 0;         /* the listener's clock minus ours, from its Date header */
  /* Refreshes and actions run one after the other, so that no question about
   * a record is in flight while it is released (it would find it gone). */
  let queue = Promise.resolve();
  let refreshQueued = false;

  /* ---- the token ---- */

  /* The token given in this tab: a string ("" for none needed), or null when none was given. */
  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  function say(id, text, kind) {
    const el = $(id);
    el.textContent = text;
    el.classList.remove("good", "bad", "warn");
    if (kind)
      el.classList.add(kind);
  }

  const REFUSED_TOKEN = "The admin listener refused the token: enter the admin token " +
    "(the first line of admin_token's file).";

  /* ---- the admin API ---- */

  function api(method, path, body, contentType) {
    const headers = {};
    const t = token();
    if (t)
      headers["Authorization"] = "Bearer " + t;
    if (contentType)
      headers["Content-Type"] = contentType;
    return fetch(path, {
      method: method,
      headers: headers,
      body: body,
      cache: "no-store",
      credentials: "omit",
      redirect: "error",
      signal: AbortSignal.timeout(API_TIMEOUT_MS),
    });
  }

  function scopeQuery(s) {
    return "actor=" + encodeURIComponent(s.actor) + "&operation=" +
      encodeURIComponent(s.operation) + "&key=" + encodeURIComponent(s.key);
  }

  async function errorText(resp) {
    try {
      const doc = await resp.json();
      if (doc && typeof doc.error === "string")
        return doc.error;
    } catch (e) {
      /* not JSON: the status says it */
    }
    return "status " + resp.status;
  }

  /* ---- formatting ---- */

  function text(v) {
    return v === undefined || v === null || v === "" ? NONE : String(v);
  }

  function parseTime(s) {
    if (typeof s !== "string")
      return NaN;
    return Date.parse(s.replace(/(\.\d{3})\d*Z$/, "$1Z"));
  }

  function age(s) {
    const t = parseTime(s);
    if (isNaN(t))
      return NONE;
    let sec = Math.max(0, Math.floor((Date.now() + skewMs - t) / 1000));
    if (sec < 120)
      return sec + " s";
    const min = Math.floor(sec / 60);
    if (min < 120)
      return min + " min";
    const h = Math.floor(min / 60);
    if (h < 48)
      return h + " h " + (min % 60) + " min";
    return Math.floor(h / 24) + " d " + (h % 24) + " h";
  }

  function stateText(r) {
    if (r.state === "in_progress")
      return r.lease_expired ? "in progress, lease expired" : "in progress";
    return text(r.state);
  }

  function stuck(r) {
    return r.state === "unknown" || (r.state === "in_progress" && r.lease_expired === true);
  }

  /* The names of the stored header lines ("Name: value\r\n..."), never their values. */
  function headerNames(r) {
    if (r.sealed)
      return "sealed (key " + r.sealed + ")";
    if (typeof r.headers !== "string" || r.headers === "")
      return NONE;
    const names = r.headers.split(/\r?\n/).map((l) => l.split(":")[0].trim())
      .filter((n) => n !== "");
    return names.length ? names.join(", ") : NONE;
  }

  function bodySize(r) {
    if (r.sealed)
      return "sealed";
    if (r.body_omitted)
      return "not stored (omitted)";
    if (typeof r.body !== "string")
      return NONE;
    let n;
    if (r.body_encoding === "base64") {
      const b = r.body.replace(/=+$/, "");
      n = Math.floor(b.length * 3 / 4);
    } else {
      n = new TextEncoder().encode(r.body).length;
    }
    return n + (n === 1 ? " byte" : " bytes");
  }

  /* ---- readiness, reload, counters ---- */

  /* Prometheus text into [{name, labels, value}]. */
  function parseMetrics(body) {
    const out = [];
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
    const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    for (const line of body.split("\n")) {
      if (line === "" || line[0] === "#")
        continue;
      const m = sample.exec(line);
      if (!m)
        continue;
      const labels = {};
      for (const l of (m[2] || "").matchAll(label))
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
      out.push({ name: m[1], labels: labels, value: Number(m[3]) });
    }
    return out;
  }

  function total(samples, name, match) {
    let sum = null;
    for (const s of samples)
      if (s.name === name && (!match || match(s.labels)))
        sum = (sum || 0) + s.value;
    return sum;
  }

  function counter(list, label, value) {
    const div = document.createElement("div");
    const dt = document.createElement("dt");
    const dd = document.createElement("dd");
    dt.textContent = label;
    dd.textContent = value === null || value === undefined ? NONE : String(value);
    div.append(dt, dd);
    list.append(div);
  }

  function renderCounters(m) {
    const list = $("counter-list");
    list.replaceChildren();
    counter(list, "records needing an operator", total(m, "idemproxy_records_needing_operator"));
    for (const o of OUTCOMES)
      counter(list, "requests: " + o,
        total(m, "idemproxy_requests_total", (l) => l.outcome === o));
    const open = total(m, "idemproxy_client_connections");
    const limit = total(m, "idemproxy_client_connections_limit");
    counter(list, "client connections", open === null ? null : open + " / " + text(limit));
    counter(list, "replay cache hits", total(m, "idemproxy_replay_cache_hits_total"));
    counter(list, "store retries", total(m, "idemproxy_store_retries_total"));
  }

  function renderReload(m, configLine) {
    const ok = total(m, "idemproxy_config_last_reload_successful");
    const at = total(m, "idemproxy_config_last_reload_success_timestamp_seconds");
    const el = $("reload");
    el.classList.remove("good", "bad");
    if (configLine) {
      el.textContent = configLine.replace(/^# /, "");
    } else if (ok === null) {
      el.textContent = "last reload: " + NONE;
    } else {
      el.textContent = (ok === 1 ? "last reload: ok" : "last reload: failed") +
        (at ? ", configuration loaded " + new Date(at * 1000).toISOString() : "");
    }
    if (ok !== null)
      el.classList.add(ok === 1 ? "good" : "bad");
  }

  async function refreshHealth() {
    const ready = $("ready");
    try {
      const r = await api("GET", "/readyz");
      const body = (await r.text()).trim();
      ready.textContent = r.status === 200 ? "ready" : body || "not ready";
      ready.classList.toggle("good", r.status === 200);
      ready.classList.toggle("bad", r.status !== 200);
    } catch (e) {
      ready.textContent = "the admin listener does not answer";
      ready.classList.remove("good");
      ready.classList.add("bad");
    }
    try {
      const r = await api("GET", "/metrics");
      if (!r.ok)
        return;
      const m = parseMetrics(await r.text());
      let line = null;
      /* /config names its last reload's error; it needs the token when there is one. */
      if (token() !== null) {
        const c = await api("GET", "/config");
        if (c.ok)
          line = (await c.text()).split("\n", 1)[0];
      }
      renderCounters(m);
      renderReload(m, line);
    } catch (e) {
      /* the next refresh tries again */
    }
  }

  /* ---- the records ---- */

  function filtered() {
    const state = $("filter-state").value;
    const route = $("filter-route").value;
    const needle = $("filter-text").value.trim().toLowerCase();
    return records.filter((r) => {
      if (state && r.state !== state)
        return false;
      if (route && r.operation !== route)
        return false;
      if (!needle)
        return true;
      return [r.actor, r.key, r.operation, r.actor_hash, r.key_hash, r.request_id, r.trace_id,
        r.lease_owner].some((v) => typeof v === "string" && v.toLowerCase().includes(needle));
    });
  }

  function sameScope(a, b) {
    return a && b && a.actor === b.actor && a.operation === b.operation && a.key === b.key;
  }

  function renderRoutes() {
    const sel = $("filter-route");
    const keep = sel.value;
    const routes = [...new Set(records.map((r) => r.operation))].sort();
    if (keep && !routes.includes(keep))
      routes.push(keep);
    const any = document.createElement("option");
    any.value = "";
    any.textContent = "any";
    const opts = routes.map((name) => {
      const o = document.createElement("option");
      o.value = name;
      o.textContent = name;
      return o;
    });
    sel.replaceChildren(any, ...opts);
    sel.value = keep;
  }

  function cell(tr, value) {
    const td = document.createElement("td");
    td.textContent = value;
    td.title = value;
    tr.append(td);
  }

  function renderRecords() {
    const rows = $("record-rows");
    const list = filtered();
    rows.replaceChildren();
    for (const r of list) {
      const tr = document.createElement("tr");
      cell(tr, stateText(r));
      cell(tr, age(r.created_at));
      cell(tr, text(r.operation));
      cell(tr, text(r.actor_hash));
      cell(tr, text(r.key_hash));
      cell(tr, text(r.request_id));
      cell(tr, text(r.trace_id));
      if (sameScope(r, selected))
        tr.classList.add("selected");
      tr.addEventListener("click", () => select(r));
      rows.append(tr);
    }
    $("record-count").textContent = "(" + list.length + " shown of " + records.length + ")";
    if (!records.length)
      say("records-status", "No record needs an operator.");
    else if (!list.length)
      say("records-status", "No record matches the filters.");
    else
      say("records-status", "");
  }

  function clearRecords(why, kind) {
    records = [];
    renderRoutes();
    renderRecords();
    $("record-count").textContent = "";
    say("records-status", why, kind);
  }

  async function refreshRecords() {
    let r;
    try {
      r = await api("GET", "/records?limit=" + LIST_LIMIT);
    } catch (e) {
      clearRecords("The admin listener does not answer.", "bad");
      return;
    }
    const date = Date.parse(r.headers.get("Date") || "");
    if (!isNaN(date))
      skewMs = date - Date.now();
    if (r.status === 401) {
      say("auth-status", REFUSED_TOKEN, "bad");
      $("auth").classList.remove("connected");
      clearRecords("Records need the admin token.", "bad");
      return;
    }
    if (!r.ok) {
      clearRecords("Cannot list the records: " + (await errorText(r)), "bad");
      return;
    }
    const doc = await r.json();
    records = Array.isArray(doc.records) ? doc.records : [];
    say("auth-status", token() ? "Token accepted." : "Connected without a token.", "good");
    $("auth").classList.add("connected");
    renderRoutes();
    renderRecords();
  }

  /* ---- one record ---- */

  function fact(dl, name, value) {
    const dt = document.createElement("dt");
    const dd = document.createElement("dd");
    dt.textContent = name;
    dd.textContent = value;
    dl.append(dt, dd);
  }

  function renderDetail() {
    const dl = $("detail-facts");
    dl.replaceChildren();
    $("detail").hidden = selected === null;
    if (!selected)
      return;
    fact(dl, "Actor", text(selected.actor));
    fact(dl, "Route (operation)", text(selected.operation));
    fact(dl, "Key", text(selected.key));
    if (!shown) {
      fact(dl, "State", "no such record (released, or expired)");
      $("release").disabled = $("resolve").disabled = true;
      return;
    }
    const r = shown;
    fact(dl, "State", stateText(r));
    fact(dl, "Generation", text(r.generation));
    fact(dl, "Lease", r.lease_owner ? r.lease_owner + " until " + text(r.lease_expires_at) : NONE);
    fact(dl, "Created", text(r.created_at) + (r.created_at ? " (" + age(r.created_at) + " ago)" : ""));
    fact(dl, "Completed", text(r.completed_at));
    fact(dl, "Expires", text(r.expires_at));
    fact(dl, "Status", text(r.status));
    fact(dl, "Stored headers", headerNames(r));
    fact(dl, "Body size", bodySize(r));
    fact(dl, "Request id", text(r.request_id));
    fact(dl, "Trace id", text(r.trace_id));
    fact(dl, "Actor hash", text(r.actor_hash));
    fact(dl, "Key hash", text(r.key_hash));
    const canAct = stuck(r);
    $("release").disabled = $("resolve").disabled = !canAct;
    if (!canAct && !$("action-status").textContent)
      say("action-status", "Only a stuck record (unknown, or in progress past its lease) " +
        "can be released or resolved.");
  }

  /* The record shown, asked again: until it is gone (404), which is final. */
  async function refreshDetail() {
    if (!selected || selected.gone)
      return;
    const want = selected;
    let r;
    try {
      r = await api("GET", "/records/scope?" + scopeQuery(want));
    } catch (e) {
      return;
    }
    if (!sameScope(want, selected))
      return;
    if (r.status === 404) {
      shown = null;
      selected.gone = true;
    } else if (r.ok) {
      shown = (await r.json()).record || null;
    } else {
      if (r.status === 401)
        say("auth-status", REFUSED_TOKEN, "bad");
      return;
    }
    renderDetail();
  }

  function select(r) {
    if (!sameScope(r, selected))
      say("action-status", "");
    selected = { actor: r.actor, operation: r.operation, key: r.key, gone: false };
    shown = r;
    renderRecords();
    renderDetail();
    serial(refreshDetail);
  }

  /* ---- release and resolve ---- */

  const CONFIRM = {
    release: {
      title: "Release this record?",
      text: "Release deletes the record. Its key is then new to idemproxy: the client's " +
        "next retry is forwarded to the upstream and runs the request again (once), and " +
        "that outcome is recorded. Release only when you know the request did not take " +
        "effect upstream, or running it again is harmless.",
      button: "Release: let the request run again",
    },
    resolve: {
      title: "Resolve this record?",
      text: "Resolve completes the record with the answer below, as if the upstream had " +
        "sent it: from now on every retry with this key gets that status, Content-Type and " +
        "body replayed, and the request is never forwarded again. The record gets a new " +
        "generation, so an owner that stalled cannot overwrite it, and it expires after " +
        "its route's retention (or the one given). Resolve when you know the request took " +
        "effect: give the answer the upstream gave.",
      button: "Resolve: retries replay this answer",
    },
  };

  function openConfirm(action) {
    if (!shown || !stuck(shown))
      return;
    pending = action;
    const c = CONFIRM[action];
    $("confirm-title").textContent = c.title;
    $("confirm-scope").textContent = "route " + selected.operation + ", actor " +
      selected.actor + ", key " + selected.key;
    $("confirm-text").textContent = c.text;
    $("confirm-ok").textContent = c.button;
    $("resolve-fields").hidden = action !== "resolve";
    say("confirm-error", "");
    $("confirm").showModal();
  }

  function closeConfirm() {
    pending = null;
    $("confirm").close();
  }

  const ACTION_DONE = {
    release: "Released: the next retry with this key runs the request again.",
    resolve: "Resolved: retries with this key now replay status ",
  };

  async function act() {
    const action = pending;
    const target = selected;
    if (!action || !target)
      return;
    let path = "/records/" + action + "?" + scopeQuery(target);
    let body = null;
    let type = null;
    let status = 0;
    if (action === "resolve") {
      status = Number($("resolve-status").value);
      if (!Number.isInteger(status) || status < 200 || status > 599) {
        say("confirm-error", "The status must be a number from 200 to 599.", "bad");
        return;
      }
      path += "&status=" + status;
      const retention = $("resolve-retention").value.trim();
      if (retention)
        path += "&retention=" + encodeURIComponent(retention);
      type = $("resolve-type").value.trim() || null;
      const bodyText = $("resolve-body").value;
      body = bodyText === "" ? null : new Blob([bodyText]);
    }
    closeConfirm();
    await serial(() => send(action, target, path, body, type, status));
    await refresh();
  }

  /* Post the action, then say how it went. */
  async function send(action, target, path, body, type, status) {
    let r;
    try {
      r = await api("POST", path, body, type);
    } catch (e) {
      say("action-status", "The admin listener does not answer: nothing was changed.", "bad");
      return;
    }
    if (r.ok) {
      say("action-status", ACTION_DONE[action] + (action === "resolve" ? status + "." : ""),
        "good");
      /* A released record is gone: nothing is left to show. */
      if (action === "release" && sameScope(target, selected)) {
        selected = shown = null;
        renderDetail();
      }
    } else if (r.status === 401)
      say("action-status", "Refused: the admin token is missing or wrong; nothing was " +
        "changed. Enter the admin token above.", "bad");
    else if (r.status === 409)
      say("action-status", "Not changed: the record is no longer stuck (it completed, or " +
        "its owner's lease is live).", "warn");
    else if (r.status === 404)
      say("action-status", "Not changed: no such record (released, or expired).", "warn");
    else
      say("action-status", "Refused (" + r.status + "): " + (await errorText(r)), "bad");
  }

  /* ---- the loop ---- */

  /* Run fn once everything queued before it is done; its promise. */
  function serial(fn) {
    const run = queue.then(fn);
    queue = run.catch(() => {});
    return run;
  }

  async function refreshAll() {
    refreshQueued = false;
    const given = token() !== null;
    await Promise.all([refreshHealth(), given ? refreshRecords() : null,
      given ? refreshDetail() : null]);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }

  /* Everything asked again, after what is queued; one refresh waits at most. */
  function refresh() {
    if (refreshQueued)
      return queue;
    refreshQueued = true;
    return serial(refreshAll);
  }

  function noToken() {
    selected = shown = null;
    $("auth").classList.remove("connected");
    renderDetail();
    clearRecords("Enter the admin token to list the records.");
    say("auth-status", "No token given: the records are not shown and nothing can be " +
      "released or resolved.", "warn");
  }

  function start() {
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
      $("token").value = "";
      say("auth-status", "Checking the token…");
      refresh();
    });
    $("token-forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      noToken();
    });
    $("filters").addEventListener("submit", (ev) => ev.preventDefault());
    for (const id of ["filter-state", "filter-route", "filter-text"])
      $(id).addEventListener("input", renderRecords);
    $("release").addEventListener("click", () => openConfirm("release"));
    $("resolve").addEventListener("click", () => openConfirm("resolve"));
    $("detail-close").addEventListener("click", () => {
      selected = shown = null;
      renderRecords();
      renderDetail();
    });
    $("confirm-cancel").addEventListener("click", closeConfirm);
    $("confirm").addEventListener("cancel", () => { pending = null; });
    $("confirm-ok").addEventListener("click", act);
    if (token() === null)
      noToken();
    refresh();
    setInterval(refresh, REFRESH_MS);
  }

  start();
})();
