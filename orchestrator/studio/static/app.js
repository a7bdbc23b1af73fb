// The studio's single-page app: four views over the studio's JSON API, routed by the URL's
// hash so each view (and each trace, conversation and log filter) can be linked.
//
// Every piece of text that comes from the swarm (event fields, messages, tool arguments) is put
// in the page with textContent or as an attribute value through the `h` helper: never as HTML.

import { approvalsView, deciderText } from "./approvals.js";

const STATUS_LABELS = {
  notStarted: "not started",
  idle: "idle",
  processing: "processing",
  spawning: "spawning",
  draining: "draining",
  terminated: "terminated",
  crashed: "crashed",
  crashLoopBackOff: "crash loop (backoff)",
  unknown: "unknown",
};
const STATUS_ICONS = {
  notStarted: "◇",
  idle: "●",
  processing: "◔",
  spawning: "◌",
  draining: "◑",
  terminated: "○",
  crashed: "✕",
  crashLoopBackOff: "⟳",
  unknown: "?",
};
const RECENT_CRASH_MS = 60_000; // how long a node says it crashed, after it is back
const FOLD_TEXT_CHARS = 500;
const FOLD_TEXT_LINES = 10;
const FOLD_JSON_CHARS = 120;
const LOG_ROWS_KEPT = 1000;

// ---------------------------------------------------------------- helpers

/** An element: attributes (`class`, `text`, `dataset`, `on<event>`, others as attributes) and
 * children (nodes, or strings as text nodes). */
function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = value;
    else if (name === "text") element.textContent = String(value);
    else if (name === "dataset") Object.assign(element.dataset, value);
    else if (name === "style") element.style.cssText = value; // CSSOM: allowed by the CSP
    else if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** An SVG element (the graph's edges). */
function s(tag, attrs = {}) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  return element;
}

async function api(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return body;
}

function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

function shortId(id) {
  return id ? String(id).slice(0, 8) : "";
}

function formatDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${ms.toFixed(1)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

function formatTime(ms, withDate = false) {
  if (ms === null || ms === undefined) return "–";
  const date = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const time = `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}`;
  if (!withDate) return time;
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${time}`;
}

function parseStamp(stamp) {
  const ms = Date.parse(stamp);
  return Number.isNaN(ms) ? null : ms;
}

function ago(ms) {
  const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  return `${Math.round(seconds / 60)} min ago`;
}

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

const NUMBER = new Intl.NumberFormat("en-US");
const COST = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 });

/** A count of tokens, grouped by thousands ("12,345"); "–" when unknown. */
function formatTokens(count) {
  return count === null || count === undefined || Number.isNaN(count) ? "–" : NUMBER.format(count);
}

/** A cost in the pricing's currency (no symbol: the swarm's pricing names it). */
function formatCost(cost) {
  return cost === null || cost === undefined ? "–" : COST.format(cost);
}

/** A budget figure's value: tokens, or a cost. */
function formatFigure(figure, value) {
  return figure === "cost" ? formatCost(value) : formatTokens(value);
}

/** Tokens in and out of a usage (`{inputTokens, outputTokens, ...}` of the daemon and the
 * studio, or `{promptTokens, completionTokens, ...}` of a Step's event). */
function usageParts(usage) {
  return {
    input: usage.inputTokens ?? usage.promptTokens ?? 0,
    output: usage.outputTokens ?? usage.completionTokens ?? 0,
    total: usage.totalTokens ?? 0,
    cost: usage.cost || 0,
    calls: usage.calls,
  };
}

function usageTitle(usage) {
  const u = usageParts(usage);
  const parts = [`${formatTokens(u.input)} in`, `${formatTokens(u.output)} out`];
  if (u.cost) parts.push(`cost ${formatCost(u.cost)}`);
  if (u.calls !== undefined) parts.push(plural(u.calls, "model call"));
  return parts.join(" · ");
}

/** What a budget or model-permit event says, in a sentence. */
function describeEvent(event) {
  const type = event.type || "";
  if (type === "budget.exceeded") {
    const root = event.root ? ` (requests entering at ${event.root})` : "";
    return `${event.budget} budget exceeded: ${event.figure} ${formatFigure(event.figure, event.used)} of ${formatFigure(event.figure, event.limit)}${root}`;
  }
  if (type === "model.permit.waiting") {
    return `waiting for a model permit from pool ${event.pool}: ${event.reason}, position ${event.position}, ${event.inUse} in use`;
  }
  if (type === "model.permit.granted") {
    const reason = event.reason ? ` (waited on ${event.reason})` : "";
    return `model permit from pool ${event.pool} after ${formatTokens(event.waitedMs)} ms${reason}`;
  }
  if (type === "model.permit.timeout") {
    return `no model permit from pool ${event.pool} within ${formatTokens(event.waitedMs)} ms: waited on ${event.reason}`;
  }
  if (type === "model.rate_limited") {
    return `pool ${event.pool} paused by the provider's rate limit for ${formatTokens(event.retryAfterMs)} ms`;
  }
  if (type === "network.connection") {
    const where = `${event.protocol} ${event.host}:${event.port}`;
    if (!event.allowed) return `network ${where} refused: ${event.reason}`;
    const failed = event.reason ? ` failed: ${event.reason}` : "";
    return `network ${where} → ${event.address}${failed}, ${formatTokens(event.bytesUp)} B up, ${formatTokens(event.bytesDown)} B down`;
  }
  if (type === "approval.decided" && event.decidedBy) {
    return `${event.status} by ${deciderText(event.decidedBy)}`;
  }
  if (type === "approval.refused") {
    return `a decision on ${event.approvalId} refused (${deciderText(event.decidedBy)}): ${event.reason}`;
  }
  if ((type === "step.completed" || type === "turn.completed") && event.tokenUsage) {
    return `${formatTokens(event.tokenUsage.totalTokens)} tokens (${usageTitle(event.tokenUsage)})`;
  }
  return null;
}

function hashFor(view, parts = [], query = {}) {
  const path = [view, ...parts.map((p) => encodeURIComponent(p))].join("/");
  const search = new URLSearchParams(
    Object.entries(query).filter(([, v]) => v !== null && v !== undefined && v !== ""),
  ).toString();
  return `#/${path}${search ? `?${search}` : ""}`;
}

function statusBadge(status) {
  const known = STATUS_LABELS[status] ? status : "unknown";
  return h(
    "span",
    { class: `badge status-${known}`, dataset: { status: known } },
    h("span", { class: "icon", "aria-hidden": "true", text: STATUS_ICONS[known] }),
    ` ${STATUS_LABELS[known]}`,
  );
}

function outcomeBadge(status) {
  const label = { ok: "ok", error: "error", running: "running", cancelled: "cancelled", awaiting: "awaiting approval", interrupted: "interrupted" }[status] || status;
  const icon = { ok: "✓", error: "✕", running: "…", cancelled: "⊘", awaiting: "‖", interrupted: "↯" }[status] || "?";
  return h(
    "span",
    { class: `badge outcome-${status}`, dataset: { outcome: status } },
    h("span", { class: "icon", "aria-hidden": "true", text: icon }),
    ` ${label}`,
  );
}

/** Text, folded behind a "show all" disclosure when it is long. */
function foldText(text, className = "text") {
  const value = String(text ?? "");
  const lines = value.split("\n");
  if (value.length <= FOLD_TEXT_CHARS && lines.length <= FOLD_TEXT_LINES) {
    return h("div", { class: className, text: value });
  }
  const preview = lines.slice(0, 4).join("\n").slice(0, 240);
  return h(
    "details",
    { class: `fold ${className}` },
    h(
      "summary",
      {},
      h("span", { class: "preview", text: `${preview}…` }),
      h("span", { class: "more", text: `Show all ${value.length.toLocaleString()} characters` }),
      h("span", { class: "less", text: "Hide" }),
    ),
    h("div", { class: "full", text: value }),
  );
}

/** A JSON value: in full on one line when short, else a one-line preview that unfolds into
 * the whole value, indented. */
function foldJson(value) {
  if (value === undefined) return h("span", { class: "muted", text: "–" });
  const compact = typeof value === "string" ? value : JSON.stringify(value);
  if (compact === undefined) return h("span", { class: "muted", text: "–" });
  if (compact.length <= FOLD_JSON_CHARS && !compact.includes("\n")) {
    return h("code", { class: "json", text: compact });
  }
  const pretty = typeof value === "string" ? value : JSON.stringify(value, null, 2);
  return h(
    "details",
    { class: "fold json" },
    h(
      "summary",
      {},
      h("code", { class: "preview", text: `${compact.slice(0, FOLD_JSON_CHARS)}…` }),
      h("span", { class: "more", text: `Show all ${compact.length.toLocaleString()} characters` }),
      h("span", { class: "less", text: "Hide" }),
    ),
    h("pre", { class: "full", text: pretty }),
  );
}

function emptyNote(text) {
  return h("p", { class: "empty", text });
}

function errorNote(error) {
  return h("p", { class: "error-note", role: "alert", text: `Could not load: ${error.message}` });
}

// ---------------------------------------------------------------- shared state

const state = {
  live: null, // true while a daemon serves the state directory
  agents: null, // the last /api/agents body
  crashes: new Map(), // agent -> when it last crashed (ms), from the live stream
};

const listeners = new Set(); // the current view's live event handler

function setMode(live) {
  const changed = state.live !== live;
  state.live = live;
  renderModeBadge();
  return changed;
}

function renderModeBadge() {
  const badge = document.getElementById("mode");
  badge.replaceChildren();
  if (state.live === null) {
    badge.className = "mode";
    badge.textContent = "connecting…";
  } else if (state.live) {
    badge.className = "mode live";
    const pid = state.agents && state.agents.pid ? ` · daemon pid ${state.agents.pid}` : "";
    append(badge, [h("span", { class: "dot", "aria-hidden": "true" }), `live${pid}`]);
  } else {
    badge.className = "mode offline";
    badge.textContent = "after the fact · no daemon running";
  }
  const swarm = document.getElementById("swarm-name");
  swarm.textContent = state.agents && state.agents.swarm ? `swarm ${state.agents.swarm}` : "";
}

async function loadAgents() {
  const body = await api("/api/agents");
  state.agents = body;
  setMode(body.mode === "live");
  return body;
}

/** Offer every agent of the swarm in `select`, with `selected` chosen (and offered at once,
 * before the list of agents arrives). */
function fillAgentSelect(select, selected) {
  const fill = (names) => {
    const have = new Set([...select.options].map((o) => o.value));
    for (const name of names) {
      if (!have.has(name)) select.append(h("option", { value: name, text: name }));
    }
    select.value = selected;
  };
  fill(selected ? [selected] : []);
  if (state.agents) fill(state.agents.agents.map((r) => r.agent));
  else loadAgents().then((b) => fill(b.agents.map((r) => r.agent))).catch(() => {});
}

function connectStream() {
  const source = new EventSource("/api/stream");
  source.addEventListener("mode", (message) => {
    const { live } = JSON.parse(message.data);
    if (setMode(live)) rerender();
  });
  source.addEventListener("message", (message) => {
    const item = JSON.parse(message.data);
    noteLive(item.event);
    for (const listener of listeners) listener(item);
  });
}

/** A `process.exited` event that is a crash: unasked, and not exit code 0 (which the daemon
 * restarts at once without counting a crash). */
function isCrash(event) {
  return event.expected === false && !(event.exitCode === 0 && !event.signal);
}

/** What every view learns from a live event: when an agent crashed (until it next exits
 * cleanly: then its latest exit is no crash). */
function noteLive(event) {
  if (event.type !== "process.exited") return;
  if (isCrash(event)) state.crashes.set(event.agentName, parseStamp(event.timestamp) ?? Date.now());
  else state.crashes.delete(event.agentName);
}

// ---------------------------------------------------------------- router

let current = null; // {dispose()} of the view on screen

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, search = ""] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { view: parts[0] || "swarm", parts: parts.slice(1), query: new URLSearchParams(search) };
}

function rerender() {
  route(false);
}

function route(focus = true) {
  if (current && current.dispose) current.dispose();
  listeners.clear();
  const { view, parts, query } = parseHash();
  for (const link of document.querySelectorAll("nav.tabs a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const main = document.getElementById("view");
  main.replaceChildren();
  const views = {
    swarm: swarmView,
    traces: tracesView,
    conversations: conversationsView,
    logs: logsView,
    approvals: (holder, viewParts) => approvalsView(holder, viewParts, APPROVALS_UI),
  };
  const render = views[view] || swarmView;
  document.body.dataset.view = views[view] ? view : "swarm";
  current = render(main, parts, query) || null;
  if (focus) {
    const heading = main.querySelector("h1");
    if (heading) {
      heading.setAttribute("tabindex", "-1");
      heading.focus({ preventScroll: true });
    }
  }
}

function onLive(handler) {
  listeners.add(handler);
}

// ---------------------------------------------------------------- swarm view

function swarmView(main) {
  const heading = h("h1", { text: "Swarm" });
  const intro = h("p", { class: "lede" });
  const graph = h("div", { class: "graph", role: "group", "aria-label": "Agents and their handoffs" });
  const tableHolder = h("section", { "aria-labelledby": "agents-heading" });
  const edgesHolder = h("section", { "aria-labelledby": "handoffs-heading" });
  const connectionsHolder = h("section");
  append(main, [
    h("div", { class: "view-head" }, heading, intro),
    graph,
    h("div", { class: "columns" }, tableHolder, edgesHolder),
    connectionsHolder,
  ]);
  let body = null;

  const draw = () => {
    if (!body) return;
    intro.textContent =
      body.mode === "live"
        ? "Live from the daemon: statuses change as agents start, work, crash and restart. Select an agent to see its traces."
        : "After the fact: the last state the event log recorded (no daemon runs). Select an agent to see its traces.";
    drawGraph(graph, body);
    drawAgentTable(tableHolder, body);
    drawEdges(edgesHolder, body);
    drawConnections(connectionsHolder, body);
  };

  const refresh = async () => {
    try {
      body = await loadAgents();
      draw();
    } catch (error) {
      graph.replaceChildren(errorNote(error));
    }
  };
  const refreshSoon = debounce(refresh, 250);
  refresh();

  onLive(({ event }) => {
    if (!body) return;
    const row = body.agents.find((r) => r.agent === event.agentName);
    const type = event.type || "";
    if (row) {
      // Said at once from the event; the daemon's row (fetched right after) has the last word.
      const next = {
        "process.spawned": "spawning",
        "process.ready": "idle",
        "process.backoff": "crashLoopBackOff",
        "turn.started": "processing",
      }[type];
      if (next) row.status = next;
      if (type === "process.spawned" && event.pid) row.pid = event.pid;
      if (type === "process.exited") {
        row.status = isCrash(event) ? "crashed" : "terminated";
        if (!isCrash(event)) {
          row.lastCrashMs = null;
        } else {
          row.crashes = (row.crashes || 0) + 1;
          row.lastCrashMs = state.crashes.get(row.agent);
          row.lastExit = { reason: event.reason };
        }
      }
      if (type === "process.backoff") row.nextStartInSeconds = event.delaySeconds;
      updateNode(graph, row);
    }
    if (
      type.startsWith("process.") || type.startsWith("turn.") || type.startsWith("model.") ||
      type === "tool.called" || type === "step.completed" || type === "budget.exceeded"
    ) {
      refreshSoon(); // statuses, and the tokens, waits and pools the daemon counts
    }
  });

  // Countdowns ("next restart in 3 s", "crashed 5 s ago") tick without asking the server.
  const ticker = setInterval(() => {
    if (!body) return;
    for (const row of body.agents) updateNode(graph, row, true);
  }, 1000);
  const resize = new ResizeObserver(debounce(() => body && drawGraph(graph, body), 100));
  resize.observe(graph);
  return {
    dispose() {
      clearInterval(ticker);
      resize.disconnect();
      refreshSoon.cancel();
    },
  };
}

function backoffText(row) {
  if (row.status !== "crashLoopBackOff" || row.nextStartInSeconds === null || row.nextStartInSeconds === undefined) {
    return null;
  }
  if (!row._backoffUntil || row._backoffFrom !== row.nextStartInSeconds) {
    row._backoffFrom = row.nextStartInSeconds;
    row._backoffUntil = Date.now() + row.nextStartInSeconds * 1000;
  }
  const left = Math.max(0, Math.ceil((row._backoffUntil - Date.now()) / 1000));
  return `next restart in ${left} s`;
}

function crashText(row) {
  const at = state.crashes.get(row.agent) ?? row.lastCrashMs;
  if (!at || Date.now() - at > RECENT_CRASH_MS) return null;
  const reason = row.lastExit && row.lastExit.reason ? `: ${row.lastExit.reason}` : "";
  return `crashed ${ago(at)}${reason}`;
}

/** Work handed to the agent and not done: requests waiting for its answer, sends in flight. */
function queueDepth(row) {
  return (row.pendingDelegates ?? 0) + (row.sendsInFlight ?? 0);
}

/** Model calls of the agent waiting for a permit of a rate-limit pool (live only). */
function waitText(row) {
  return row.permitsWaiting ? `${row.permitsWaiting} waiting for a model permit` : null;
}

function nodeLabel(row) {
  const parts = [`${row.agent}: ${STATUS_LABELS[row.status] || row.status}`];
  if (row.pid) parts.push(`pid ${row.pid}`);
  parts.push(plural(row.restarts || 0, "restart"), plural(row.crashes || 0, "crash").replace("crashs", "crashes"));
  parts.push(`${queueDepth(row)} queued`);
  if (row.usage) parts.push(`${formatTokens(row.usage.totalTokens)} tokens`);
  const waits = waitText(row);
  if (waits) parts.push(waits);
  const backoff = backoffText(row);
  if (backoff) parts.push(backoff);
  const crash = crashText(row);
  if (crash) parts.push(crash);
  return `${parts.join(", ")}. Show its traces.`;
}

function nodeContent(row) {
  const meta = [`pid ${row.pid || "–"}`, `restarts ${row.restarts ?? 0}`, `crashes ${row.crashes ?? 0}`];
  const second = [`queue ${queueDepth(row)}`];
  if (row.usage) second.push(`${formatTokens(row.usage.totalTokens)} tokens`);
  if (row.node) second.push(`node ${row.node}`);
  const alerts = [backoffText(row), crashText(row)].filter(Boolean);
  const waits = waitText(row);
  return [
    h("span", { class: "node-name", text: row.agent }),
    statusBadge(row.status),
    h("span", { class: "node-meta", text: meta.join(" · ") }),
    h("span", { class: "node-meta", text: second.join(" · ") }),
    waits ? h("span", { class: "node-wait", text: waits }) : null,
    ...alerts.map((text) => h("span", { class: "node-alert", text })),
  ];
}

function updateNode(graph, row, tickOnly = false) {
  const node = graph.querySelector(`a.node[data-agent="${CSS.escape(row.agent)}"]`);
  if (!node) return;
  if (tickOnly && !backoffText(row) && !node.querySelector(".node-alert")) return;
  const known = STATUS_LABELS[row.status] ? row.status : "unknown";
  node.className = `node status-${known}${crashText(row) ? " recently-crashed" : ""}`;
  node.dataset.status = known;
  node.dataset.pid = row.pid || "";
  node.setAttribute("aria-label", nodeLabel(row));
  node.replaceChildren(...nodeContent(row).filter(Boolean));
}

/** Layers from the agents nobody hands work to, following the handoffs (cycles allowed). */
function layout(agents, edges) {
  const names = agents.map((r) => r.agent);
  const incoming = new Map(names.map((n) => [n, 0]));
  const outgoing = new Map(names.map((n) => [n, []]));
  for (const edge of edges) {
    if (!incoming.has(edge.to) || !outgoing.has(edge.from) || edge.from === edge.to) continue;
    incoming.set(edge.to, incoming.get(edge.to) + 1);
    outgoing.get(edge.from).push(edge.to);
  }
  const depth = new Map();
  const queue = names.filter((n) => incoming.get(n) === 0);
  if (!queue.length && names.length) queue.push(names[0]);
  for (const n of queue) depth.set(n, 0);
  while (queue.length) {
    const n = queue.shift();
    for (const next of outgoing.get(n)) {
      if (!depth.has(next)) {
        depth.set(next, depth.get(n) + 1);
        queue.push(next);
      }
    }
    if (!queue.length) {
      const rest = names.find((m) => !depth.has(m));
      if (rest) {
        depth.set(rest, 0);
        queue.push(rest);
      }
    }
  }
  const layers = [];
  for (const n of names) {
    const d = depth.get(n) ?? 0;
    (layers[d] ||= []).push(n);
  }
  return layers.map((layer) => layer.sort());
}

function drawGraph(graph, body) {
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.agent
    : null;
  graph.replaceChildren();
  if (!body.agents.length) {
    graph.append(emptyNote("No agents yet: nothing has run in this state directory."));
    graph.style.height = "";
    return;
  }
  const width = graph.clientWidth || 800;
  const layers = layout(body.agents, body.edges);
  const across = width >= 640; // wide: layers run left to right; narrow: top to bottom
  const nodeW = across ? 250 : Math.min(280, width - 32);
  const nodeH = 116;
  const gapMain = across ? Math.max(80, (width - layers.length * nodeW) / Math.max(1, layers.length)) : 56;
  const gapCross = 24;
  const tallest = Math.max(...layers.map((l) => l.length));
  const position = new Map();
  layers.forEach((layer, li) => {
    layer.forEach((name, ni) => {
      if (across) {
        const x = gapMain / 2 + li * (nodeW + gapMain);
        const offset = ((tallest - layer.length) * (nodeH + gapCross)) / 2;
        position.set(name, { x, y: 16 + offset + ni * (nodeH + gapCross) });
      } else {
        const perRow = Math.max(1, Math.floor((width - 16) / (nodeW + gapCross)));
        const row = Math.floor(ni / perRow);
        const rowsBefore = layers.slice(0, li).reduce((sum, l) => sum + Math.ceil(l.length / perRow), 0);
        position.set(name, {
          x: 16 + (ni % perRow) * (nodeW + gapCross),
          y: 16 + (rowsBefore + row) * (nodeH + gapMain),
        });
      }
    });
  });
  const height = Math.max(...[...position.values()].map((p) => p.y)) + nodeH + 24;
  graph.style.height = `${height}px`;

  const svg = s("svg", { class: "edges", width, height, "aria-hidden": "true", focusable: "false" });
  const defs = s("defs");
  const marker = s("marker", {
    id: "arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "8", markerHeight: "8", orient: "auto-start-reverse",
  });
  marker.append(s("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrowhead" }));
  defs.append(marker);
  svg.append(defs);
  const pairs = new Set(body.edges.map((e) => `${e.from}\u0000${e.to}`));
  for (const edge of body.edges) {
    const a = position.get(edge.from);
    const b = position.get(edge.to);
    if (!a || !b || edge.from === edge.to) continue;
    const both = pairs.has(`${edge.to}\u0000${edge.from}`);
    const bend = both ? (edge.from < edge.to ? -18 : 18) : 0;
    let x1, y1, x2, y2;
    if (across) {
      const forward = b.x >= a.x;
      x1 = forward ? a.x + nodeW : a.x;
      x2 = forward ? b.x : b.x + nodeW;
      y1 = a.y + nodeH / 2 + bend;
      y2 = b.y + nodeH / 2 + bend;
    } else {
      const down = b.y >= a.y;
      x1 = a.x + nodeW / 2 + bend;
      x2 = b.x + nodeW / 2 + bend;
      y1 = down ? a.y + nodeH : a.y;
      y2 = down ? b.y : b.y + nodeH;
    }
    const mx = (x1 + x2) / 2;
    const my = (y1 + y2) / 2;
    const d = across
      ? `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`
      : `M ${x1} ${y1} C ${x1} ${my}, ${x2} ${my}, ${x2} ${y2}`;
    svg.append(s("path", { d, class: "edge", "marker-end": "url(#arrow)" }));
    const label = s("text", { x: mx, y: my - 8, class: "edge-label", "text-anchor": "middle" });
    label.textContent = edgeText(edge);
    svg.append(label);
  }
  graph.append(svg);

  for (const row of body.agents) {
    const p = position.get(row.agent);
    const node = h("a", {
      class: "node",
      href: hashFor("traces", [], { agent: row.agent }),
      dataset: { agent: row.agent },
      style: `left:${p.x}px;top:${p.y}px;width:${nodeW}px;height:${nodeH}px`,
      onkeydown: (event) => {
        if (event.key === " ") {
          event.preventDefault();
          node.click();
        }
      },
    });
    graph.append(node);
    updateNode(graph, row);
  }
  if (focused) {
    const again = graph.querySelector(`a.node[data-agent="${CSS.escape(focused)}"]`);
    if (again) again.focus({ preventScroll: true });
  }
}

function edgeText(edge) {
  const kinds = edge.kinds.length ? edge.kinds.join(" / ") : "handoff";
  return edge.calls ? `${kinds} ×${edge.calls}` : kinds;
}

function drawAgentTable(holder, body) {
  const priced = body.agents.some((row) => row.usage && row.usage.cost);
  const rows = body.agents.map((row) => {
    const backoff = backoffText(row);
    const usage = row.usage;
    return h(
      "tr",
      { dataset: { agent: row.agent } },
      h("th", { scope: "row" }, h("a", { href: hashFor("traces", [], { agent: row.agent }), text: row.agent })),
      h("td", {}, statusBadge(row.status)),
      h("td", { class: "num", text: row.pid || "–" }),
      h("td", { class: "num", text: row.restarts ?? 0 }),
      h("td", { class: "num", text: row.crashes ?? 0 }),
      h("td", { text: backoff || "–" }),
      h("td", { class: "num", text: row.pendingDelegates ?? 0 }),
      h("td", { class: "num", text: row.sendsInFlight ?? 0 }),
      h("td", { class: "num tokens", text: usage ? formatTokens(usage.totalTokens) : "–", title: usage ? usageTitle(usage) : null }),
      priced ? h("td", { class: "num cost", text: usage && usage.cost ? formatCost(usage.cost) : "–" }) : null,
      h("td", { class: "num permits", text: row.permitsWaiting ?? "–" }),
      h("td", { text: row.node || "–" }),
      h("td", { text: (row.lastExit && row.lastExit.reason) || row.bootError || "–" }),
    );
  });
  const columns = ["Agent", "Status", "PID", "Restarts", "Crashes", "Backoff", "Requests", "Sends", "Tokens"];
  if (priced) columns.push("Cost");
  columns.push("Waiting", "Node", "Last exit");
  const source = body.mode === "live"
    ? "Tokens and cost: every model call since the daemon started. Waiting: model calls waiting for a permit of a rate-limit pool."
    : "Tokens and cost: the Steps the event log recorded.";
  holder.replaceChildren();
  append(holder, [
    h("h2", { id: "agents-heading", text: "Agents" }),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "agents" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            columns.map((t) => h("th", { scope: "col", text: t })),
          ),
        ),
        h("tbody", {}, rows),
      ),
    ),
    h("p", { class: "muted note", text: source }),
    poolTable(body.pools),
  ]);
}

/** The daemon's rate-limit pools: permits in use of the most allowed, calls waiting, pauses
 * after a provider's 429, and how often and how long calls waited. */
function poolTable(pools) {
  if (!pools || !pools.length) return null;
  const seconds = (value) => (value ? `${value.toFixed(1)} s` : "–");
  const limits = (pool) => {
    const parts = [];
    if (pool.requestsPerMinute) {
      const left = pool.requestsAvailable !== undefined ? ` (${Math.floor(pool.requestsAvailable)} left)` : "";
      parts.push(`${NUMBER.format(pool.requestsPerMinute)} calls/min${left}`);
    }
    if (pool.tokensPerMinute) {
      const left = pool.tokensAvailable !== undefined ? ` (${formatTokens(pool.tokensAvailable)} left)` : "";
      parts.push(`${NUMBER.format(pool.tokensPerMinute)} tokens/min${left}`);
    }
    return parts.join(", ") || "–";
  };
  return h(
    "section",
    { class: "pools", "aria-labelledby": "pools-heading" },
    h("h2", { id: "pools-heading", text: "Pools" }),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "pools" },
        h("thead", {}, h("tr", {}, ["Pool", "In use / max", "Waiting", "Paused", "Granted", "Waits", "Waited", "Timeouts", "Rate limits"].map((t) => h("th", { scope: "col", text: t })))),
        h(
          "tbody",
          {},
          pools.map((pool) =>
            h(
              "tr",
              { dataset: { pool: pool.pool } },
              h("th", { scope: "row", class: "mono", text: pool.pool }),
              h("td", { class: "num", text: `${pool.inUse} / ${pool.maxConcurrent ?? "∞"}` }),
              h("td", { class: "num", text: pool.waiting }),
              h("td", { class: "num", text: seconds(pool.pausedForSeconds), title: pool.pauses ? `paused ${plural(pool.pauses, "time")} by the provider` : null }),
              h("td", { class: "num", text: pool.granted }),
              h("td", { class: "num", text: pool.waited }),
              h("td", { class: "num", text: seconds(pool.waitSeconds) }),
              h("td", { class: "num", text: pool.timedOut }),
              h("td", { text: limits(pool) }),
            ),
          ),
        ),
      ),
    ),
  );
}

function drawEdges(holder, body) {
  const items = body.edges.map((edge) =>
    h(
      "li",
      {},
      h("a", { href: hashFor("traces", [], { agent: edge.from }), text: edge.from }),
      " → ",
      h("a", { href: hashFor("traces", [], { agent: edge.to }), text: edge.to }),
      h("span", { class: "muted", text: ` (${edgeText(edge)})` }),
    ),
  );
  holder.replaceChildren(
    h("h2", { id: "handoffs-heading", text: "Handoffs" }),
    items.length ? h("ul", { class: "edges-list" }, items) : emptyNote("No handoff between agents recorded yet."),
  );
}

// A failing connection's last error (secret-free, from its connector), else why it is down.
function connectionWhy(row) {
  const health = row.health || {};
  if (health.consecutiveFailures && health.lastError) {
    return health.lastErrorAt ? `${health.lastError} (${health.lastErrorAt})` : health.lastError;
  }
  return row.bootError || (row.lastExit && row.lastExit.reason) || "–";
}

function drawConnections(holder, body) {
  if (!body.connections || !body.connections.length) {
    holder.replaceChildren();
    return;
  }
  holder.replaceChildren(
    h("h2", { text: "Connections" }),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, ["Connection", "Connector", "Status", "Up", "PID", "Restarts", "Failures in a row", "Last event", "Why"].map((t) => h("th", { scope: "col", text: t })))),
        h(
          "tbody",
          {},
          body.connections.map((row) =>
            h(
              "tr",
              {},
              h("th", { scope: "row", text: row.connection }),
              h("td", { text: row.connector || "–" }),
              h("td", {}, statusBadge(row.status)),
              h("td", { text: row.health ? (row.health.up ? "yes" : "no") : "–" }),
              h("td", { class: "num", text: row.pid || "–" }),
              h("td", { class: "num", text: row.restarts ?? 0 }),
              h("td", { class: "num", text: (row.health && row.health.consecutiveFailures) || 0 }),
              h("td", { text: (row.health && row.health.lastEventAt) || "–" }),
              h("td", { text: connectionWhy(row) }),
            ),
          ),
        ),
      ),
    ),
  );
}

// ---------------------------------------------------------------- traces view

function tracesView(main, parts, query) {
  if (parts.length) return traceView(main, parts[0]);
  const agent = query.get("agent") || "";
  const heading = h("h1", { text: agent ? `Traces of ${agent}` : "Traces" });
  const select = h("select", { id: "trace-agent", name: "agent" }, h("option", { value: "", text: "All agents" }));
  select.addEventListener("change", () => {
    location.hash = hashFor("traces", [], { agent: select.value });
  });
  const count = h("p", { class: "muted", role: "status" });
  const holder = h("div", { class: "table-wrap" });
  append(main, [
    h("div", { class: "view-head" }, heading,
      h("p", { class: "lede", text: "Recent requests, newest first. Open one to see its spans across agents." })),
    h("div", { class: "filters" }, h("label", { for: "trace-agent", text: "Agent" }), select, count),
    holder,
  ]);

  fillAgentSelect(select, agent);

  const refresh = async () => {
    try {
      const [{ traces }, budgets] = await Promise.all([
        api(`/api/traces${agent ? `?agent=${encodeURIComponent(agent)}` : ""}`),
        liveTraceUsage(),
      ]);
      count.textContent = plural(traces.length, "trace");
      holder.replaceChildren(traces.length ? traceTable(traces, budgets) : emptyNote("No traces recorded yet. Send a request to the swarm."));
    } catch (error) {
      holder.replaceChildren(errorNote(error));
    }
  };
  const refreshSoon = debounce(refresh, 400);
  refresh();
  onLive(({ event }) => {
    if (/^(turn|step|tool|budget|model)\./.test(event.type || "")) refreshSoon();
  });
  return { dispose: () => refreshSoon.cancel() };
}

/** The daemon's usage rows of its recent traces by id (budgets left), live; empty otherwise. */
async function liveTraceUsage() {
  try {
    const body = await api("/api/usage?traces=500");
    return new Map(((body.usage && body.usage.traces) || []).map((row) => [row.traceId, row]));
  } catch {
    return new Map(); // the budgets are extra: the traces show without them
  }
}

/** What is left of a trace's budget (the daemon's row), or the budgets it exceeded (its
 * events): a badge and a line of figures; `null` when it has no budget known. */
function budgetText(trace, live) {
  const exceeded = trace.exceeded || [];
  if (exceeded.length) {
    const first = exceeded[0];
    return {
      exceeded: true,
      text: `${first.budget} budget: ${first.figure} ${formatFigure(first.figure, first.used)} of ${formatFigure(first.figure, first.limit)}`,
    };
  }
  if (live && live.budget) {
    if (live.exceeded) return { exceeded: true, text: `trace budget: ${live.exceeded}` };
    const left = Object.entries(live.budget).map(
      ([figure, limit]) => `${figure} ${formatFigure(figure, (live.remaining || {})[figure])} of ${formatFigure(figure, limit)} left`,
    );
    return { exceeded: false, text: left.join(", ") };
  }
  return null;
}

function budgetCell(said) {
  if (!said) return "–";
  return [
    said.exceeded ? h("span", { class: "badge budget-exceeded", text: "exceeded" }) : null,
    h("span", { class: said.exceeded ? "budget-figures" : "budget-figures muted", text: ` ${said.text}` }),
  ];
}

function traceTable(traces, budgets = new Map()) {
  const priced = traces.some((t) => t.usage && t.usage.cost);
  const said = new Map(traces.map((t) => [t.traceId, budgetText(t, budgets.get(t.traceId))]));
  const withBudget = [...said.values()].some(Boolean);
  const columns = ["Status", "Root agent", "Trace", "Started", "Duration", "Spans", "Tokens"];
  if (priced) columns.push("Cost");
  if (withBudget) columns.push("Budget");
  columns.push("Agents");
  return h(
    "table",
    { class: "traces" },
    h("thead", {}, h("tr", {}, columns.map((t) => h("th", { scope: "col", text: t })))),
    h(
      "tbody",
      {},
      traces.map((trace) =>
        h(
          "tr",
          { dataset: { trace: trace.traceId } },
          h("td", {}, outcomeBadge(trace.status)),
          h("th", { scope: "row" }, h("a", { href: hashFor("traces", [trace.traceId]), text: trace.rootAgent || "?" }),
            trace.rootInstanceKey ? h("span", { class: "muted", text: ` @${trace.rootInstanceKey}` }) : null,
            trace.error ? h("span", { class: "row-error", text: trace.error.slice(0, 140) }) : null),
          h("td", {}, h("a", { href: hashFor("traces", [trace.traceId]), class: "mono", text: shortId(trace.traceId), "aria-label": `trace ${trace.traceId}` })),
          h("td", { text: formatTime(trace.startMs, true) }),
          h("td", { class: "num", text: formatDuration(trace.durationMs) }),
          h("td", { class: "num", text: trace.spanCount }),
          h("td", { class: "num tokens", text: trace.usage ? formatTokens(trace.usage.totalTokens) : "–", title: trace.usage ? usageTitle(trace.usage) : null }),
          priced ? h("td", { class: "num cost", text: trace.usage.cost ? formatCost(trace.usage.cost) : "–" }) : null,
          withBudget ? h("td", { class: "budget" }, budgetCell(said.get(trace.traceId))) : null,
          h("td", { text: trace.agents.join(", ") }),
        ),
      ),
    ),
  );
}

function traceView(main, traceId) {
  const heading = h("h1", {}, "Trace ", h("span", { class: "mono", text: shortId(traceId) }));
  const summary = h("div", { class: "trace-summary" });
  const holder = h("div", { class: "waterfall-holder" });
  append(main, [
    h("p", { class: "crumbs" }, h("a", { href: "#/traces", text: "← All traces" })),
    h("div", { class: "view-head" }, heading, summary),
    holder,
  ]);
  const open = new Set(); // spans whose details are shown, kept across live refreshes

  const refresh = async () => {
    try {
      const [body, live] = await Promise.all([
        api(`/api/traces/${encodeURIComponent(traceId)}`),
        api(`/api/usage?trace=${encodeURIComponent(traceId)}`).then((b) => b.trace).catch(() => null),
      ]);
      drawTraceSummary(summary, body.trace, live);
      holder.replaceChildren(waterfall(body, open));
    } catch (error) {
      holder.replaceChildren(error.status === 404 ? emptyNote(`No trace ${traceId} in the event log.`) : errorNote(error));
    }
  };
  const refreshSoon = debounce(refresh, 300);
  refresh();
  onLive(({ event }) => {
    if (event.traceId === traceId) refreshSoon();
  });
  return { dispose: () => refreshSoon.cancel() };
}

function drawTraceSummary(holder, trace, live) {
  const usage = trace.usage;
  const budget = budgetText(trace, live);
  const fact = (name, value, attrs = {}) =>
    h("div", { dataset: { fact: name.toLowerCase().replace(/ /g, "-") } }, h("dt", { text: name }), h("dd", attrs, value));
  holder.replaceChildren(
    h(
      "dl",
      { class: "facts" },
      fact("Status", outcomeBadge(trace.status)),
      fact("Root agent", `${trace.rootAgent || "?"}${trace.rootInstanceKey ? ` @${trace.rootInstanceKey}` : ""}`),
      fact("Started", formatTime(trace.startMs, true)),
      fact("Duration", formatDuration(trace.durationMs)),
      fact("Spans", String(trace.spanCount)),
      usage ? fact("Tokens", formatTokens(usage.totalTokens), { title: usageTitle(usage) }) : null,
      usage && usage.cost ? fact("Cost", formatCost(usage.cost)) : null,
      trace.permitWaitMs ? fact("Permit waits", formatDuration(trace.permitWaitMs)) : null,
      budget ? fact("Budget", budgetCell(budget)) : null,
      fact("Trace id", trace.traceId, { class: "mono" }),
    ),
    h("p", { class: "links" }, h("a", { href: hashFor("logs", [], { trace: trace.traceId }), class: "button", text: "Logs of this trace" })),
  );
}

function waterfall(body, open) {
  const spans = body.spans;
  const starts = spans.map((sp) => sp.startMs).filter((v) => v !== null);
  const ends = spans.map((sp) => sp.endMs ?? sp.startMs).filter((v) => v !== null);
  const t0 = Math.min(...starts);
  const total = Math.max(1e-6, Math.max(...ends) - t0);
  const axis = h("div", { class: "wf-axis", "aria-hidden": "true" },
    h("span", { class: "wf-label-col", text: "Span" }),
    h("span", { class: "wf-ticks" }, [0, 0.25, 0.5, 0.75, 1].map((f) =>
      h("span", { class: "tick", style: `left:${f * 100}%`, text: formatDuration(f * total) }))),
    h("span", { class: "wf-tokens-col", text: "Tokens" }),
    h("span", { class: "wf-dur-col", text: "Duration" }));
  const list = h("ol", { class: "waterfall", "aria-label": "Spans, parents before children" });
  const marks = marksBySpan(body.marks || []);
  const at = (ms) => Math.min(100, Math.max(0, ((ms - t0) / total) * 100));
  for (const span of spans) {
    const left = span.startMs === null ? 0 : ((span.startMs - t0) / total) * 100;
    const end = span.endMs ?? span.startMs ?? t0;
    const width = Math.max(0.4, ((end - (span.startMs ?? t0)) / total) * 100);
    const detailId = `span-${span.spanId}`;
    const expanded = open.has(span.spanId);
    const toggle = h(
      "button",
      {
        type: "button",
        class: "span-toggle",
        "aria-expanded": expanded ? "true" : "false",
        "aria-controls": detailId,
        style: `padding-left:${0.5 + span.depth * 1.1}rem`,
        onclick: () => {
          const now = toggle.getAttribute("aria-expanded") !== "true";
          toggle.setAttribute("aria-expanded", String(now));
          details.hidden = !now;
          if (now) open.add(span.spanId);
          else open.delete(span.spanId);
        },
      },
      h("span", { class: `kind kind-${span.kind}`, text: { turn: "Turn", step: "Step", tool: "Tool", approval: "Approval" }[span.kind] || span.kind }),
      h("span", { class: "span-name", text: span.name }),
      span.kind === "turn" ? h("span", { class: "muted", text: ` @${span.instanceKey}` }) : null,
      span.attempts ? h("span", { class: "attempt-badge", text: `attempt ${span.attempt} of ${span.attempts}` }) : null,
    );
    const own = marks.get(span.spanId) || [];
    const bar = h("div", { class: "wf-track" },
      h("div", {
        class: `wf-bar kind-${span.kind} outcome-${span.status}`,
        style: `left:${Math.min(left, 99.6)}%;width:${Math.min(width, 100 - Math.min(left, 99.6))}%`,
        title: `${span.name}: ${formatDuration(span.durationMs)}`,
      }),
      own.filter((m) => m.atMs !== null && m.atMs !== undefined).map((m) =>
        h("span", { class: `wf-marker ${markClass(m)}`, style: `left:${at(m.atMs)}%`, title: describeEvent(m), "aria-hidden": "true" })));
    const tokens = span.tokenUsage;
    const details = spanDetails(span, detailId);
    details.hidden = !expanded;
    if (span.crash) list.append(crashRow(span));
    const attemptData = span.attemptOf ? { attempt: span.attempt, attemptOf: span.attemptOf } : {};
    list.append(
      h(
        "li",
        {
          class: `wf-row outcome-${span.status}${span.attemptOf ? " wf-attempt" : ""}`,
          dataset: { spanId: span.spanId, kind: span.kind, agent: span.agent, name: span.name, depth: span.depth, ...attemptData },
        },
        h("div", { class: "wf-line" },
          h("div", { class: "wf-label-col" }, toggle),
          bar,
          h("div", {
            class: "wf-tokens-col",
            text: tokens ? `${formatTokens(tokens.totalTokens)} tok` : "",
            title: tokens ? `${formatTokens(tokens.totalTokens)} tokens: ${usageTitle(tokens)}` : null,
          }),
          h("div", { class: "wf-dur-col" }, h("span", { text: formatDuration(span.durationMs) }), " ", span.status !== "ok" ? outcomeBadge(span.status) : null)),
        span.error ? h("p", { class: "span-error", text: `${span.status === "interrupted" ? "" : "error: "}${span.error}` }) : null,
        span.resumedAs ? h("p", { class: "span-resumed", dataset: { resumedAs: span.resumedAs }, text: RESUMED_AS[span.resumedAs] || span.resumedAs }) : null,
        span.status === "awaiting" && span.approvalId
          ? h("p", { class: "span-awaiting" }, "Waiting for an operator: ",
            h("a", { href: hashFor("approvals", [span.approvalId]), text: "approve or reject it" }))
          : null,
        markList(own, span),
        details,
      ),
    );
  }
  const loose = marks.get(null) || [];
  return h("div", { class: "waterfall-wrap" }, axis, list,
    loose.length ? h("div", { class: "wf-loose" }, h("h4", { text: "Budgets and permits" }), markList(loose, null)) : null);
}

const RESUMED_AS = {
  rerun: "Cut short by the crash; run again in the next attempt (its tool is idempotent).",
  E_TOOL_INTERRUPTED: "Cut short by the crash; the next attempt answered it E_TOOL_INTERRUPTED: it may or may not have run.",
  askedAgain: "Cut short in its model call; the next attempt asked the model again.",
};

/** The divider before a later attempt at a Turn: the crash, and what became of the work it cut. */
function crashRow(span) {
  const crash = span.crash;
  const done = [];
  if (crash.replayed) done.push("the Turn had ended: its recorded answer was given again");
  if (crash.rerun.length) done.push(`run again: ${crash.rerun.join(", ")}`);
  if (crash.interrupted.length) done.push(`answered E_TOOL_INTERRUPTED: ${crash.interrupted.join(", ")}`);
  if (crash.modelAskedAgain) done.push("the model call in flight was asked again");
  if (!done.length) done.push("nothing was in flight");
  return h("li", { class: "wf-crash", dataset: { attempt: span.attempt, attemptOf: span.attemptOf } },
    h("span", { class: "icon", "aria-hidden": "true", text: "↯" }),
    ` ${crash.agent}'s process died under attempt ${crash.after}; attempt ${span.attempt} took the Turn up. `,
    h("span", { class: "crash-outcome", text: `${done.join(" · ")}.` }));
}

function markClass(mark) {
  if (mark.type === "network.connection") return mark.allowed ? "mark-net" : "mark-net-refused";
  if (mark.type === "budget.exceeded") return "mark-budget";
  if (mark.type === "model.rate_limited" || mark.type === "model.permit.timeout") return "mark-limit";
  return "mark-wait";
}

/** A trace's marks by the span they happened in (`null`: none found). A wait that ended (a
 * permit granted or timed out) says so once: its "waiting" mark is dropped. */
function marksBySpan(marks) {
  const bySpan = new Map();
  for (const mark of marks) {
    const key = mark.spanId ?? null;
    const list = bySpan.get(key) || bySpan.set(key, []).get(key);
    if (mark.type === "model.permit.granted" || mark.type === "model.permit.timeout") {
      const waiting = list.findIndex((m) => m.type === "model.permit.waiting" && m.pool === mark.pool);
      if (waiting >= 0) list.splice(waiting, 1);
    }
    list.push(mark);
  }
  return bySpan;
}

function markList(marks, span) {
  if (!marks.length) return null;
  return h("ul", { class: "wf-marks" }, marks.map((mark) => {
    const who = !span || mark.agent !== span.agent ? `${mark.agent || "?"}: ` : "";
    return h("li", { class: `wf-mark ${markClass(mark)}`, dataset: { type: mark.type } },
      h("span", { class: "icon", "aria-hidden": "true", text: { "mark-budget": "⚠", "mark-limit": "⊘", "mark-wait": "◔", "mark-net": "⇄", "mark-net-refused": "⊘" }[markClass(mark)] }),
      ` ${who}${describeEvent(mark)}`,
      mark.atMs ? h("span", { class: "muted", text: ` at ${formatTime(mark.atMs)}` }) : null);
  }));
}

function spanDetails(span, id) {
  const facts = [
    ["Agent", `${span.agent} @${span.instanceKey}`],
    ["Started", formatTime(span.startMs, true)],
    ["Duration", formatDuration(span.durationMs)],
    ["Span id", span.spanId],
  ];
  if (span.turnId) facts.push(["Turn id", span.turnId]);
  if (span.attempts) facts.push(["Attempt", `${span.attempt} of ${span.attempts}`]);
  if (span.requestId) facts.push(["Request id", span.requestId]);
  if (span.stepId && span.kind !== "turn") facts.push(["Step id", span.stepId]);
  if (span.toolCallId) facts.push(["Tool call id", span.toolCallId]);
  if (span.tokenUsage) facts.push(["Tokens", `${formatTokens(span.tokenUsage.totalTokens)}: ${usageTitle(span.tokenUsage)}`]);
  if (span.approvalId) facts.push(["Approval", `${span.approvalId} (${span.approvalStatus})`]);
  if (span.decidedBy) facts.push(["Decided by", deciderText(span.decidedBy)]);
  const rows = facts.map(([k, v]) => h("div", {}, h("dt", { text: k }), h("dd", { text: v })));
  const extra = [];
  if (span.kind === "tool" || span.kind === "approval") {
    extra.push(h("h4", { text: "Arguments" }), foldJson(span.args));
    if (span.output !== undefined) extra.push(h("h4", { text: "Result" }), foldJson(span.output));
    if (span.toolCallId) {
      extra.push(
        h("p", {}, h("a", {
          class: "button conversation-link",
          href: hashFor("conversations", [span.agent, span.instanceKey], { call: span.toolCallId, step: span.stepId }),
          text: "Open in the conversation",
        })),
      );
    }
  }
  if (span.kind === "turn" && span.output !== undefined) extra.push(h("h4", { text: "Output" }), foldJson(span.output));
  return h("div", { class: "span-details", id }, h("dl", { class: "facts small" }, rows), extra);
}

// ---------------------------------------------------------------- conversations view

function conversationsView(main, parts, query) {
  const [agent, key] = parts;
  const heading = h("h1", { text: agent ? `Conversation ${agent} @${key}` : "Conversations" });
  const list = h("nav", { class: "instances", "aria-label": "Instances" });
  const pane = h("section", { class: "messages-pane", "aria-label": "Messages" });
  const usageHolder = h("div", { class: "conversation-usage" });
  append(main, [
    h("div", { class: "view-head" }, heading,
      h("p", { class: "lede", text: "Each agent's conversations on disk, one per instance key." }),
      usageHolder),
    h("div", { class: "split" }, list, pane),
  ]);

  const drawList = async () => {
    try {
      const { instances } = await api("/api/instances");
      const byAgent = new Map();
      for (const row of instances) (byAgent.get(row.agent) || byAgent.set(row.agent, []).get(row.agent)).push(row);
      list.replaceChildren(
        ...(instances.length ? [] : [emptyNote("No conversations on disk yet.")]),
        ...[...byAgent].map(([name, rows]) =>
          h("div", { class: "instance-group" },
            h("h2", { text: name }),
            h("ul", {}, rows.map((row) => {
              const selected = name === agent && row.instanceKey === key;
              return h("li", {},
                h("a", {
                  href: hashFor("conversations", [name, row.instanceKey]),
                  "aria-current": selected ? "page" : null,
                  dataset: { agent: name, key: row.instanceKey },
                },
                h("span", { class: "instance-key", text: row.instanceKey }),
                row.status ? h("span", { class: "muted", text: ` ${row.status}` }) : null),
                row.updatedAt ? h("span", { class: "muted small-line", text: `updated ${formatTime(parseStamp(row.updatedAt), true)}` }) : null,
                row.usage ? h("span", { class: "muted small-line", text: `${formatTokens(row.usage.totalTokens)} tokens` }) : null);
            })))),
      );
    } catch (error) {
      list.replaceChildren(errorNote(error));
    }
  };

  let firstDraw = true;
  const drawMessages = async () => {
    if (!agent) {
      pane.replaceChildren(emptyNote("Choose an instance to read its messages."));
      return;
    }
    try {
      const body = await api(`/api/conversations/${encodeURIComponent(agent)}/${encodeURIComponent(key)}`);
      drawInstanceUsage(usageHolder, body.usage);
      const openFolds = new Set([...pane.querySelectorAll("details[open][data-fold-id]")].map((d) => d.dataset.foldId));
      pane.replaceChildren(messageList(body.messages));
      for (const id of openFolds) {
        const again = pane.querySelector(`details[data-fold-id="${CSS.escape(id)}"]`);
        if (again) again.open = true;
      }
      if (firstDraw) {
        firstDraw = false;
        highlightCall(pane, query.get("call"), query.get("step"));
      }
    } catch (error) {
      pane.replaceChildren(error.status === 404 ? emptyNote(`No instance ${key} of ${agent}.`) : errorNote(error));
    }
  };
  drawList();
  drawMessages();
  const refreshSoon = debounce(() => {
    drawList();
    drawMessages();
  }, 400);
  onLive(({ event }) => {
    const t = event.type || "";
    if (t === "turn.started" || t === "step.completed" || t === "turn.completed" || t === "turn.failed") {
      if (!agent || (event.agentName === agent && event.instanceKey === key) || t === "turn.started") refreshSoon();
    }
  });
  return { dispose: () => refreshSoon.cancel() };
}

/** What the instance's model calls ever used, as its agent keeps it (its metadata). */
function drawInstanceUsage(holder, usage) {
  if (!usage) {
    holder.replaceChildren();
    return;
  }
  const fact = (name, value) => h("div", { dataset: { fact: name.toLowerCase().replace(/ /g, "-") } }, h("dt", { text: name }), h("dd", { text: value }));
  holder.replaceChildren(
    h("dl", { class: "facts small", "aria-label": "Usage of this instance, all its Turns" },
      fact("Tokens", formatTokens(usage.totalTokens)),
      fact("Input", formatTokens(usage.inputTokens)),
      fact("Output", formatTokens(usage.outputTokens)),
      usage.cost ? fact("Cost", formatCost(usage.cost)) : null,
      fact("Model calls", formatTokens(usage.calls))),
  );
}

function messageList(messages) {
  if (!messages.length) return emptyNote("This conversation has no messages.");
  const list = h("ol", { class: "messages" });
  for (const message of messages) list.append(messageItem(message));
  return list;
}

function messageItem(message) {
  const role = message.role;
  const source = message.source || {};
  const inbound = (message.metadata || {}).__goondanInbound;
  const head = h("header", { class: "msg-head" },
    h("span", { class: `role role-${role}`, text: role }),
    h("span", { class: "muted", text: formatTime(parseStamp(message.createdAt), true) }));
  if (inbound && inbound.sourceKind && inbound.sourceKind !== "user") {
    head.append(h("span", { class: "muted", text: `from ${inbound.sourceKind} ${inbound.sourceName || ""}`.trim() }));
  }
  if (inbound && inbound.traceId) {
    head.append(h("a", { href: hashFor("traces", [inbound.traceId]), class: "mono", text: `trace ${shortId(inbound.traceId)}` }));
  }
  const request = (message.metadata || {}).__goondanRequest;
  if (request && request.runs > 1) {
    head.append(h("span", {
      class: "attempt-badge",
      dataset: { attempts: request.runs },
      title: `its agent died under this Turn ${request.runs - 1 === 1 ? "once" : `${request.runs - 1} times`}; each later attempt took it up where it stopped`,
      text: `${request.runs} attempts`,
    }));
  }
  if (role === "tool" && source.toolName) head.append(h("span", { class: "tool-name", text: source.toolName }));
  const item = h("li", {
    class: `msg msg-${role}`,
    id: `msg-${message.id}`,
    tabindex: "-1",
    dataset: { role, messageId: message.id, step: source.stepId || "", callId: source.toolCallId || "" },
  }, head);
  if (message.content) {
    const text = foldText(message.content, "msg-text");
    if (text.tagName === "DETAILS") text.dataset.foldId = `${message.id}:content`;
    item.append(text);
  }
  for (const call of message.toolCalls || []) {
    const args = foldJson(call.args);
    if (args.tagName === "DETAILS") args.dataset.foldId = `${message.id}:${call.id}:args`;
    item.append(
      h("div", { class: "tool-call", dataset: { callId: call.id } },
        h("div", { class: "tool-call-head" },
          h("span", { class: "kind kind-tool", text: "Tool call" }),
          h("span", { class: "tool-name", text: call.name }),
          h("span", { class: "muted mono", text: call.id })),
        h("div", { class: "kv" }, h("span", { class: "k", text: "arguments" }), args)),
    );
  }
  if (message.toolResult) {
    const result = message.toolResult;
    const output = foldJson(result.output);
    if (output.tagName === "DETAILS") output.dataset.foldId = `${message.id}:result`;
    const box = h("div", { class: "tool-result" },
      h("div", { class: "tool-call-head" },
        h("span", { class: "kind kind-result", text: "Result" }),
        outcomeBadge(result.status === "error" ? "error" : result.status === "pending" ? "awaiting" : "ok"),
        h("span", { class: "muted mono", text: source.toolCallId || result.toolCallId || "" })),
      h("div", { class: "kv" }, h("span", { class: "k", text: "output" }), output));
    if (result.error) {
      const text = result.error.message ? `${result.error.message}${result.error.code ? ` (${result.error.code})` : ""}` : JSON.stringify(result.error);
      box.append(h("p", { class: "span-error", text: `error: ${text}` }));
    }
    item.append(box);
  }
  return item;
}

function highlightCall(pane, callId, stepId) {
  if (!callId) return;
  const items = [...pane.querySelectorAll("li.msg")];
  let callAt = items.findIndex(
    (li) => li.querySelector(`.tool-call[data-call-id="${CSS.escape(callId)}"]`) && (!stepId || li.dataset.step === stepId),
  );
  if (callAt < 0) callAt = items.findIndex((li) => li.querySelector(`.tool-call[data-call-id="${CSS.escape(callId)}"]`));
  if (callAt < 0) return;
  const marked = [items[callAt]];
  const result = items.slice(callAt + 1).find((li) => li.dataset.role === "tool" && li.dataset.callId === callId);
  if (result) marked.push(result);
  for (const li of marked) li.classList.add("highlight");
  items[callAt].querySelector(`.tool-call[data-call-id="${CSS.escape(callId)}"]`).classList.add("highlight");
  items[callAt].scrollIntoView({ block: "center" });
  items[callAt].focus({ preventScroll: true });
}

// ---------------------------------------------------------------- logs view

const TYPE_FILTERS = [
  ["", "All types"],
  ["turn.", "Turns"],
  ["step.", "Steps"],
  ["tool.", "Tool calls"],
  ["process.", "Processes"],
  ["approval.", "Approvals"],
  ["request.", "Requests"],
  ["connector.", "Connectors"],
  ["model.", "Model permits and rate limits"],
  ["budget.", "Budgets"],
  ["network.", "Sandboxed programs' connections"],
];
const LEVEL_FILTERS = [
  ["", "All levels"],
  ["warning", "Warnings and errors"],
  ["error", "Errors"],
];

function logsView(main, parts, query) {
  const filters = {
    agent: query.get("agent") || "",
    trace: query.get("trace") || "",
    type: query.get("type") || "",
    level: query.get("level") || "",
  };
  const setFilter = (name, value) => {
    location.hash = hashFor("logs", [], { ...filters, [name]: value });
  };
  const agentSelect = h("select", { id: "log-agent" }, h("option", { value: "", text: "All agents" }));
  const typeSelect = h("select", { id: "log-type" }, TYPE_FILTERS.map(([v, t]) => h("option", { value: v, text: t })));
  const levelSelect = h("select", { id: "log-level" }, LEVEL_FILTERS.map(([v, t]) => h("option", { value: v, text: t })));
  const traceInput = h("input", { id: "log-trace", type: "search", value: filters.trace, placeholder: "trace id", spellcheck: "false", autocomplete: "off" });
  const follow = h("input", { id: "log-follow", type: "checkbox", checked: true });
  typeSelect.value = filters.type;
  levelSelect.value = filters.level;
  agentSelect.addEventListener("change", () => setFilter("agent", agentSelect.value));
  typeSelect.addEventListener("change", () => setFilter("type", typeSelect.value));
  levelSelect.addEventListener("change", () => setFilter("level", levelSelect.value));
  traceInput.addEventListener("change", () => setFilter("trace", traceInput.value.trim()));
  const count = h("p", { class: "muted", role: "status" });
  const tbody = h("tbody");
  const followNote = h("span", { class: "muted" });
  append(main, [
    h("div", { class: "view-head" }, h("h1", { text: "Logs" }),
      h("p", { class: "lede", text: "Runtime events, newest first: Turns, Steps, tool calls, processes, approvals, model permits, budgets." })),
    h("form", { class: "filters", role: "search", onsubmit: (e) => { e.preventDefault(); setFilter("trace", traceInput.value.trim()); } },
      h("label", { for: "log-agent", text: "Agent" }), agentSelect,
      h("label", { for: "log-type", text: "Type" }), typeSelect,
      h("label", { for: "log-level", text: "Level" }), levelSelect,
      h("label", { for: "log-trace", text: "Trace" }), traceInput,
      h("label", { class: "check" }, follow, " Follow live"), followNote,
      filters.agent || filters.trace || filters.type || filters.level
        ? h("a", { href: "#/logs", class: "button subtle", text: "Clear filters" }) : null),
    count,
    h("div", { class: "table-wrap" },
      h("table", { class: "logs" },
        h("thead", {}, h("tr", {}, ["Time", "Level", "Agent", "Type", "Trace", "Details"].map((t) => h("th", { scope: "col", text: t })))),
        tbody)),
  ]);
  fillAgentSelect(agentSelect, filters.agent);
  const showFollow = () => {
    follow.disabled = !state.live;
    followNote.textContent = state.live ? "" : "(no daemon: nothing new arrives)";
  };
  showFollow();

  const seen = new Set();
  const passes = (item) => {
    const e = item.event;
    if (filters.agent && e.agentName !== filters.agent) return false;
    if (filters.trace && e.traceId !== filters.trace) return false;
    if (filters.type && !String(e.type || "").startsWith(filters.type)) return false;
    const rank = { info: 0, warning: 1, error: 2 };
    if (filters.level && rank[item.level] < rank[filters.level]) return false;
    return true;
  };
  const updateCount = () => {
    count.textContent = `${plural(tbody.rows.length, "event")}${filters.trace ? ` of trace ${shortId(filters.trace)}` : ""}`;
  };
  const load = async () => {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(filters)) if (value) params.set(name, value);
    try {
      const { events } = await api(`/api/events?${params}`);
      const rows = [];
      for (const item of events) {
        if (seen.has(item.key)) continue;
        seen.add(item.key);
        rows.push(logRow(item));
      }
      tbody.prepend(...rows.reverse());
      updateCount();
    } catch (error) {
      count.replaceChildren(errorNote(error));
    }
  };
  load();
  onLive((item) => {
    showFollow();
    if (!follow.checked || seen.has(item.key) || !passes(item)) return;
    seen.add(item.key);
    tbody.prepend(logRow(item));
    while (tbody.rows.length > LOG_ROWS_KEPT) tbody.deleteRow(-1);
    updateCount();
  });
  return {};
}

// Shown in their own columns, or in the trace (ids of Turns and Steps).
const SUMMARY_SKIP = new Set(["timestamp", "type", "agentName", "instanceKey", "traceId", "spanId", "parentSpanId", "turnId", "stepId"]);

function logRow(item) {
  const e = item.event;
  const stamp = parseStamp(e.timestamp);
  const summary = Object.entries(e)
    .filter(([k]) => !SUMMARY_SKIP.has(k))
    .map(([k, v]) => `${k}=${JSON.stringify(v)}`.slice(0, 160))
    .join(" ");
  const who = `${e.agentName || "?"}${e.instanceKey ? `@${e.instanceKey}` : ""}`;
  const sentence = describeEvent(e);
  return h(
    "tr",
    { class: `level-${item.level}`, dataset: { key: item.key, type: e.type || "", agent: e.agentName || "", level: item.level } },
    h("td", { class: "mono nowrap", text: formatTime(stamp), title: e.timestamp || "" }),
    h("td", {}, h("span", { class: `badge level-${item.level}`, text: item.level })),
    h("td", { class: "nowrap" }, e.agentName ? h("a", { href: hashFor("logs", [], { agent: e.agentName }), text: who }) : who),
    h("td", { class: "mono nowrap", text: e.type || "" }),
    h("td", {}, e.traceId ? h("a", { href: hashFor("traces", [e.traceId]), class: "mono", text: shortId(e.traceId), "aria-label": `trace ${e.traceId}` }) : "–"),
    h("td", { class: "log-details" }, sentence ? h("div", { class: "log-sentence", text: sentence }) : null, foldText(summary, "mono")),
  );
}

// ---------------------------------------------------------------- start

/** The helpers the Approvals view (approvals.js) draws with. */
const APPROVALS_UI = { h, api, hashFor, formatTime, foldJson, emptyNote, errorNote, onLive, debounce, state };

document.getElementById("skip").addEventListener("click", () => {
  const main = document.getElementById("view");
  (main.querySelector("h1") || main).focus();
});
window.addEventListener("hashchange", () => route(true));
renderModeBadge();
loadAgents().catch(() => {});
connectStream();
route(false);
