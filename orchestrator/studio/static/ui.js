// What every view of the studio draws with: elements, the JSON API, numbers, times, badges
// and folds. Every piece of text that comes from the swarm (event fields, messages, tool
// arguments) is put in the page with textContent or as an attribute value through `h`:
// never as HTML.

export const STATUS_LABELS = {
  notStarted: "not started",
  idle: "idle",
  processing: "processing",
  awaitingApproval: "awaiting approval",
  spawning: "spawning",
  draining: "draining",
  terminated: "terminated",
  crashed: "crashed",
  crashLoopBackOff: "crash loop (backoff)",
  unknown: "unknown",
};
export const STATUS_ICONS = {
  notStarted: "◇",
  idle: "●",
  processing: "◔",
  awaitingApproval: "‖",
  spawning: "◌",
  draining: "◑",
  terminated: "○",
  crashed: "✕",
  crashLoopBackOff: "⟳",
  unknown: "?",
};
export const FOLD_TEXT_CHARS = 500;
export const FOLD_TEXT_LINES = 10;
export const FOLD_JSON_CHARS = 120;


/** An element: attributes (`class`, `text`, `dataset`, `on<event>`, others as attributes) and
 * children (nodes, or strings as text nodes). */
export function h(tag, attrs = {}, ...children) {
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

export function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return parent;
}

/** An SVG element (the graph's edges). */
export function s(tag, attrs = {}) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs)) element.setAttribute(name, String(value));
  return element;
}

export async function api(path) {
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

export function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

export function shortId(id) {
  return id ? String(id).slice(0, 8) : "";
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "–";
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 1000) return `${ms.toFixed(1)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(2)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

export function formatTime(ms, withDate = false) {
  if (ms === null || ms === undefined) return "–";
  const date = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const time = `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}.${pad(date.getMilliseconds(), 3)}`;
  if (!withDate) return time;
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${time}`;
}

export function parseStamp(stamp) {
  const ms = Date.parse(stamp);
  return Number.isNaN(ms) ? null : ms;
}

export function ago(ms) {
  const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  return `${Math.round(seconds / 60)} min ago`;
}

export function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}

export const NUMBER = new Intl.NumberFormat("en-US");
export const COST = new Intl.NumberFormat("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 });

/** A count of tokens, grouped by thousands ("12,345"); "–" when unknown. */
export function formatTokens(count) {
  return count === null || count === undefined || Number.isNaN(count) ? "–" : NUMBER.format(count);
}

/** A cost in the pricing's currency (no symbol: the swarm's pricing names it). */
export function formatCost(cost) {
  return cost === null || cost === undefined ? "–" : COST.format(cost);
}

/** A budget figure's value: tokens, or a cost. */
export function formatFigure(figure, value) {
  return figure === "cost" ? formatCost(value) : formatTokens(value);
}

/** Tokens in and out of a usage (`{inputTokens, outputTokens, ...}` of the daemon and the
 * studio, or `{promptTokens, completionTokens, ...}` of a Step's event). */
export function usageParts(usage) {
  return {
    input: usage.inputTokens ?? usage.promptTokens ?? 0,
    output: usage.outputTokens ?? usage.completionTokens ?? 0,
    total: usage.totalTokens ?? 0,
    cost: usage.cost || 0,
    calls: usage.calls,
  };
}

export function usageTitle(usage) {
  const u = usageParts(usage);
  const parts = [`${formatTokens(u.input)} in`, `${formatTokens(u.output)} out`];
  if (u.cost) parts.push(`cost ${formatCost(u.cost)}`);
  if (u.calls !== undefined) parts.push(plural(u.calls, "model call"));
  return parts.join(" · ");
}

/** What a budget, model-permit or network event says, in a sentence (an approval's sentence
 * comes from the server with its event: the one `logs` prints too). */
export function describeEvent(event) {
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
  if ((type === "step.completed" || type === "turn.completed") && event.tokenUsage) {
    return `${formatTokens(event.tokenUsage.totalTokens)} tokens (${usageTitle(event.tokenUsage)})`;
  }
  return null;
}

export function hashFor(view, parts = [], query = {}) {
  const path = [view, ...parts.map((p) => encodeURIComponent(p))].join("/");
  const search = new URLSearchParams(
    Object.entries(query).filter(([, v]) => v !== null && v !== undefined && v !== ""),
  ).toString();
  return `#/${path}${search ? `?${search}` : ""}`;
}

export function statusBadge(status) {
  const known = STATUS_LABELS[status] ? status : "unknown";
  return h(
    "span",
    { class: `badge status-${known}`, dataset: { status: known } },
    h("span", { class: "icon", "aria-hidden": "true", text: STATUS_ICONS[known] }),
    ` ${STATUS_LABELS[known]}`,
  );
}

export function outcomeBadge(status) {
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
export function foldText(text, className = "text") {
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
export function foldJson(value) {
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

export function emptyNote(text) {
  return h("p", { class: "empty", text });
}

export function errorNote(error) {
  return h("p", { class: "error-note", role: "alert", text: `Could not load: ${error.message}` });
}
