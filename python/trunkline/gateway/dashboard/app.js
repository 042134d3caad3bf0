// The operator dashboard: the fleet, its quarantined tools and reloads, read from the
// operator API (/admin/api/...) and kept live by its event stream.
//
// Rules:
// - Everything the server sends is shown as text (textContent, attributes set with
//   setAttribute): no markup is ever built from data, so a tool's description or an error
//   message cannot become part of the page.
// - Every state change is a fetch POST carrying the session's CSRF token (X-CSRF-Token,
//   read from /admin/api/session); the session cookie itself is HttpOnly and never read.
// - An answer of 401 means the session ended: the page goes back to the sign-in page.
// - Nothing is loaded from anywhere but the gateway (the Content-Security-Policy says so
//   too), and nothing is written with inline styles: the stylesheet selects on classes and
//   data attributes.
"use strict";

(function () {
  const API = "/admin/api";
  let csrf = null;
  let events = null;
  const rows = new Map(); // server name -> {tr, cells}

  // -- small helpers ---------------------------------------------------------------------

  function $(id) {
    return document.getElementById(id);
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function ms(value) {
    if (value === null || value === undefined) return "–";
    if (value < 10) return value.toFixed(2) + " ms";
    if (value < 100) return value.toFixed(1) + " ms";
    return Math.round(value) + " ms";
  }

  function when(epochSeconds) {
    if (!epochSeconds) return "";
    const date = new Date(epochSeconds * 1000);
    const ago = Math.max(0, (Date.now() - date.getTime()) / 1000);
    let relative;
    if (ago < 60) relative = Math.round(ago) + " s ago";
    else if (ago < 3600) relative = Math.round(ago / 60) + " min ago";
    else if (ago < 86400) relative = Math.round(ago / 3600) + " h ago";
    else relative = Math.round(ago / 86400) + " d ago";
    return date.toLocaleString() + " (" + relative + ")";
  }

  function errorText(status, body) {
    if (body && typeof body.error === "string") return body.error;
    if (body && body.error && typeof body.error.message === "string") return body.error.message;
    if (body && typeof body.message === "string") return body.message;
    return "HTTP " + status;
  }

  function notice(text, kind) {
    const box = $("notice");
    box.textContent = text;
    box.className = "notice" + (kind ? " " + kind : "");
    box.hidden = false;
  }

  function signedOut() {
    window.location.assign("/admin");
  }

  // -- the API -------------------------------------------------------------------------

  async function getJson(path) {
    const response = await fetch(API + path, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    });
    if (response.status === 401) {
      signedOut();
      throw new Error("signed out");
    }
    const body = await response.json().catch(() => null);
    if (!response.ok) throw new Error(errorText(response.status, body));
    return body;
  }

  async function session() {
    const answer = await getJson("/session");
    csrf = answer.csrf;
    $("operator").textContent = answer.operator ? "signed in as " + answer.operator : "";
  }

  // A state change: POST with the CSRF token; once more with a fresh token when it was
  // refused for it (the session's token changed). Answers [status, body].
  async function change(path, retried) {
    const response = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRF-Token": csrf || "" },
    });
    if (response.status === 401) {
      signedOut();
      throw new Error("signed out");
    }
    if (response.status === 403 && !retried) {
      await session();
      return change(path, true);
    }
    const body = await response.json().catch(() => null);
    return [response.status, body];
  }

  // -- the fleet -----------------------------------------------------------------------

  function row(name) {
    let entry = rows.get(name);
    if (entry) return entry;
    const tr = el("tr");
    tr.setAttribute("data-server", name);
    const cells = {
      name: el("td", "name"),
      state: el("td", "state"),
      era: el("td", "era"),
      tools: el("td", "num tools"),
      inFlight: el("td", "num in-flight"),
      answered: el("td", "num answered"),
      p50: el("td", "num p50"),
      p99: el("td", "num p99"),
      restarts: el("td", "num restarts"),
      error: el("td", "error"),
      actions: el("td", "actions"),
    };
    cells.name.textContent = name;
    cells.eraText = el("span");
    cells.version = el("span", "sub");
    cells.era.append(cells.eraText, cells.version);
    cells.badge = el("span", "badge");
    cells.reason = el("span", "sub");
    cells.state.append(cells.badge, cells.reason);
    cells.errorText = el("span");
    cells.errorWhen = el("span", "when");
    cells.error.append(cells.errorText, cells.errorWhen);
    cells.restart = el("button", "small quiet restart", "Restart");
    cells.restart.type = "button";
    cells.restart.title = "Stop the server and start it again";
    cells.restart.addEventListener("click", () => act(cells.restart, name, "restart"));
    cells.retry = el("button", "small retry", "Retry");
    cells.retry.type = "button";
    cells.retry.title = "Try an unavailable server again now";
    cells.retry.addEventListener("click", () => act(cells.retry, name, "retry"));
    cells.actions.append(cells.retry, cells.restart);
    for (const key of ["name", "state", "era", "tools", "inFlight", "answered", "p50", "p99",
      "restarts", "error", "actions"]) {
      tr.append(cells[key]);
    }
    entry = { tr, cells };
    rows.set(name, entry);
    return entry;
  }

  function showServers(doc) {
    const servers = Array.isArray(doc.servers) ? doc.servers : [];
    const body = $("fleet-rows");
    const seen = new Set();
    const counts = {};
    for (const server of servers) {
      seen.add(server.name);
      const { tr, cells } = row(server.name);
      const state = String(server.state || "unknown");
      counts[state] = (counts[state] || 0) + 1;
      cells.version.textContent = server.version || "";
      cells.badge.textContent = state;
      cells.badge.setAttribute("data-state", state);
      cells.reason.textContent = [server.reason, server.hint].filter(Boolean).join(" — ");
      cells.eraText.textContent = server.era || "–";
      cells.tools.textContent = server.tools === undefined || server.tools === null
        ? "–" : String(server.tools);
      cells.inFlight.textContent = String(server.in_flight ?? 0);
      cells.answered.textContent = String(server.answered ?? 0);
      cells.p50.textContent = ms(server.p50_ms);
      cells.p99.textContent = ms(server.p99_ms);
      cells.restarts.textContent = String(server.restarts ?? 0);
      const problem = server.listing_error || server.last_error;
      cells.errorText.textContent = problem || "";
      cells.errorWhen.textContent = server.last_error && !server.listing_error
        ? when(server.last_error_at) : "";
      cells.retry.hidden = state !== "unavailable";
      body.append(tr); // appended in the document's order (moved if already there)
    }
    for (const [name, entry] of rows) {
      if (!seen.has(name)) {
        entry.tr.remove();
        rows.delete(name);
      }
    }
    $("fleet-empty").hidden = servers.length > 0;
    const summary = Object.keys(counts).sort().map((s) => counts[s] + " " + s).join(", ");
    const tools = doc.tools === undefined ? "" : " · " + doc.tools + " tools served";
    $("fleet-summary").textContent = servers.length ? "(" + summary + tools + ")" : "";
    if (doc.reload) showReloadState(doc.reload);
  }

  async function act(button, name, action) {
    button.disabled = true;
    notice((action === "restart" ? "Restarting " : "Retrying ") + name + "…");
    try {
      const [status, body] = await change(
        API + "/servers/" + encodeURIComponent(name) + "/" + action, false);
      if (status >= 200 && status < 300) {
        const state = body && body.server && body.server.state;
        notice(name + (action === "restart" ? " restarted" : " retried") +
          (state ? ": " + state : "") + ".", "ok");
      } else {
        notice(action + " " + name + " refused: " + errorText(status, body), "bad");
      }
    } catch (error) {
      notice(action + " " + name + " failed: " + error.message, "bad");
    } finally {
      button.disabled = false;
    }
  }

  // -- reloads -------------------------------------------------------------------------

  let lastShown = null;

  function showReloadState(reload) {
    const state = $("reload-state");
    if (reload.in_progress) {
      state.textContent = "A reload is in progress…";
      $("reload").disabled = true;
    } else {
      $("reload").disabled = false;
      state.textContent = reload.last ? "Last reload:" : "No reload since the gateway started.";
    }
    if (reload.last) showOutcome(reload.last);
  }

  function showOutcome(outcome) {
    const key = JSON.stringify(outcome);
    if (key === lastShown) return;
    lastShown = key;
    const list = $("reload-outcome");
    list.replaceChildren();
    const add = (term, text, className) => {
      list.append(el("dt", null, term), el("dd", className || null, text));
    };
    if (outcome.ok) add("Result", "applied", "ok");
    else add("Result", "refused: the configuration in force keeps serving", "bad");
    if (outcome.error) add("Reason", outcome.error, "bad");
    const names = (value) => (Array.isArray(value) && value.length ? value.join(", ") : "none");
    if (outcome.ok) {
      add("Added", names(outcome.added));
      add("Removed", names(outcome.removed));
      add("Replaced", names(outcome.replaced));
      add("Unchanged", Array.isArray(outcome.unchanged) ? String(outcome.unchanged.length) +
        " server(s)" : "–");
      add("Policy", outcome.policy_changed ? "changed" : "unchanged");
    }
    if (outcome.finished_at) add("Finished", when(outcome.finished_at));
    list.hidden = false;
    $("reload-state").textContent = "Last reload:";
  }

  async function reload() {
    const button = $("reload");
    button.disabled = true;
    $("reload-state").textContent = "Reloading…";
    try {
      const [status, body] = await change(API + "/reload", false);
      if (body && typeof body.ok === "boolean") {
        showOutcome(body);
        notice(body.ok ? "Configuration reloaded." : "Reload refused: " +
          (body.error || "HTTP " + status), body.ok ? "ok" : "bad");
      } else {
        notice("Reload failed: " + errorText(status, body), "bad");
      }
    } catch (error) {
      notice("Reload failed: " + error.message, "bad");
    } finally {
      button.disabled = false;
    }
  }

  // -- quarantine ----------------------------------------------------------------------

  // JSON with keys sorted at every level, two spaces: the same definition reads the same.
  function canonical(value) {
    const sorted = (v) => {
      if (Array.isArray(v)) return v.map(sorted);
      if (v && typeof v === "object") {
        const out = {};
        for (const k of Object.keys(v).sort()) out[k] = sorted(v[k]);
        return out;
      }
      return v;
    };
    return JSON.stringify(sorted(value), null, 2);
  }

  // A line diff (longest common subsequence): [kind, line] with kind add, del or same.
  function diffLines(before, after) {
    const a = before.split("\n");
    const b = after.split("\n");
    if (a.length * b.length > 4000000) {
      return a.map((l) => ["del", l]).concat(b.map((l) => ["add", l]));
    }
    const n = a.length;
    const m = b.length;
    const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    const out = [];
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (a[i] === b[j]) {
        out.push(["same", a[i]]);
        i++;
        j++;
      } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
        out.push(["del", a[i++]]);
      } else {
        out.push(["add", b[j++]]);
      }
    }
    while (i < n) out.push(["del", a[i++]]);
    while (j < m) out.push(["add", b[j++]]);
    return out;
  }

  function reasonText(item) {
    switch (item.reason) {
      case "changed":
        return "Its definition changed since it was approved.";
      case "renamed":
        return "It carries the description of a removed tool" +
          (item.renamed_from ? " (" + item.renamed_from + ")" : "") + ".";
      case "new":
        return "New tools need approval on this gateway.";
      case "bound":
        return "Over a bound" + (item.bound ? ": " + item.bound : "") +
          ". No approval lets it in; only coming within the bound.";
      default:
        return String(item.reason || "held back");
    }
  }

  function showQuarantine(doc) {
    const items = Array.isArray(doc.quarantined) ? doc.quarantined : [];
    const box = $("quarantine");
    box.replaceChildren();
    $("quarantine-empty").hidden = items.length > 0;
    $("quarantine-count").textContent = items.length ? "(" + items.length + ")" : "";
    for (const item of items) {
      const card = el("article", "held");
      card.setAttribute("data-server", item.server);
      card.setAttribute("data-tool", item.tool);
      const head = el("div", "held-head");
      head.append(el("span", "held-name", item.server + " / " + item.tool),
        el("span", "badge", item.reason || "held"), el("span", "spacer"));
      const approvable = typeof item.approvable === "boolean" ? item.approvable
        : item.reason !== "bound";
      if (approvable) {
        const approve = el("button", "small approve", "Approve");
        approve.type = "button";
        approve.title = "Pin the definition shown as current and admit the tool";
        approve.addEventListener("click", () => approveTool(approve, item.server, item.tool));
        head.append(approve);
      }
      card.append(head, el("p", "reason", reasonText(item)));
      if (Array.isArray(item.changes) && item.changes.length) {
        const changes = el("ul", "changes");
        for (const field of item.changes) changes.append(el("li", null, field));
        card.append(changes);
      }
      const before = item.approved === null || item.approved === undefined
        ? "" : canonical(item.approved);
      const after = item.current === null || item.current === undefined
        ? "" : canonical(item.current);
      const diff = el("pre", "diff");
      const lines = before ? diffLines(before, after) : after.split("\n").map((l) => ["add", l]);
      for (const [kind, line] of lines) diff.append(el("span", kind, line));
      card.append(diff);
      box.append(card);
    }
  }

  async function approveTool(button, server, tool) {
    button.disabled = true;
    try {
      const [status, body] = await change(API + "/quarantine/" + encodeURIComponent(server) +
        "/" + encodeURIComponent(tool) + "/approve", false);
      if (status >= 200 && status < 300) {
        notice("Approved " + server + " / " + tool + ".", "ok");
        showQuarantine(await getJson("/quarantine"));
      } else {
        notice("Approving " + tool + " refused: " + errorText(status, body), "bad");
        button.disabled = false;
      }
    } catch (error) {
      notice("Approving " + tool + " failed: " + error.message, "bad");
      button.disabled = false;
    }
  }

  // -- the configuration ---------------------------------------------------------------

  async function showConfig() {
    const pre = $("config");
    try {
      pre.textContent = canonical(await getJson("/config"));
    } catch (error) {
      pre.textContent = "Could not read the configuration: " + error.message;
    }
  }

  // -- live updates --------------------------------------------------------------------

  function live(state) {
    const badge = $("live");
    badge.setAttribute("data-live", state);
    badge.textContent = { live: "live", lost: "reconnecting", connecting: "connecting" }[state];
  }

  function parsed(event) {
    try {
      return JSON.parse(event.data);
    } catch (error) {
      return null;
    }
  }

  function listen() {
    events = new EventSource(API + "/events");
    events.addEventListener("open", () => live("live"));
    events.addEventListener("servers", (event) => {
      const doc = parsed(event);
      if (doc) showServers(doc);
    });
    events.addEventListener("reload", (event) => {
      const outcome = parsed(event);
      if (outcome) showOutcome(outcome);
    });
    events.addEventListener("quarantine", (event) => {
      const doc = parsed(event);
      if (doc && Array.isArray(doc.quarantined)) showQuarantine(doc);
      else getJson("/quarantine").then(showQuarantine, () => {});
    });
    events.addEventListener("error", () => {
      live("lost");
      if (events.readyState === EventSource.CLOSED) {
        // Refused rather than dropped: the session may have ended (then 401 signs out).
        events = null;
        setTimeout(() => session().then(listen, () => setTimeout(listen, 5000)), 3000);
      }
    });
  }

  async function start() {
    $("reload").addEventListener("click", reload);
    $("logout").addEventListener("click", async () => {
      try {
        await change("/admin/logout", false);
      } finally {
        signedOut();
      }
    });
    $("config-details").addEventListener("toggle", () => {
      if ($("config-details").open) showConfig();
    });
    try {
      await session();
      const [servers, quarantine] = await Promise.all([getJson("/servers"),
        getJson("/quarantine")]);
      showServers(servers);
      showQuarantine(quarantine);
    } catch (error) {
      notice("Could not read the fleet: " + error.message, "bad");
    }
    listen();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
