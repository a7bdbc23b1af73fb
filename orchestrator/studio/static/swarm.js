// The Swarm view: the agents as a graph of their handoffs, a table of their processes, the
// rate-limit pools and the connections, live or as the event log last recorded them.

import { STATUS_LABELS, h, append, s, debounce, ago, plural, NUMBER, formatTokens, formatCost, usageTitle, hashFor, statusBadge, emptyNote, errorNote } from "./ui.js";
import { state, loadAgents, isCrash, onLive } from "./shell.js";

const RECENT_CRASH_MS = 60_000; // how long a node says it crashed, after it is back

export function swarmView(main) {
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
        "approval.requested": "awaitingApproval",
        "approval.resumed": "awaitingApproval",
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
      type.startsWith("approval.") || type === "tool.called" || type === "step.completed" ||
      type === "budget.exceeded"
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

/** What the agent waits for: its tool calls parked for an operator, its model calls waiting
 * for a permit of a rate-limit pool (live only). */
function waitText(row) {
  const waits = [];
  if (row.pendingApprovals) waits.push(`${plural(row.pendingApprovals, "call")} awaiting approval`);
  if (row.permitsWaiting) waits.push(`${row.permitsWaiting} waiting for a model permit`);
  return waits.length ? waits.join(", ") : null;
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
