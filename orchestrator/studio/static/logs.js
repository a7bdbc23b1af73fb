// The Logs view: runtime events, newest first, filtered, followed live.

import { h, append, api, shortId, formatTime, parseStamp, plural, describeEvent, hashFor, foldText, errorNote } from "./ui.js";
import { state, fillAgentSelect, onLive } from "./shell.js";

const LOG_ROWS_KEPT = 1000;

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

export function logsView(main, parts, query) {
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
  const sentence = item.sentence || describeEvent(e);
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
