// What the views share: whether a daemon runs (the header's badge and the swarm's name), the
// agents' last rows, and the live event stream with the current view's listener.

import { h, append, api, debounce, parseStamp } from "./ui.js";

export const state = {
  live: null, // true while a daemon serves the state directory
  agents: null, // the last /api/agents body
  crashes: new Map(), // agent -> when it last crashed (ms), from the live stream
};

const listeners = new Set(); // the current view's live event handler

export function setMode(live) {
  const changed = state.live !== live;
  state.live = live;
  renderModeBadge();
  return changed;
}

export function renderModeBadge() {
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

export async function loadAgents() {
  const body = await api("/api/agents");
  state.agents = body;
  setMode(body.mode === "live");
  showApprovalCount(body.pendingApprovals ?? 0);
  return body;
}

/** The Approvals tab's count: tool calls waiting for an operator (none: no count). */
export function showApprovalCount(count) {
  const badge = document.getElementById("approvals-count");
  badge.hidden = !count;
  badge.replaceChildren(String(count), h("span", { class: "visually-hidden", text: " pending" }));
  badge.title = `${count} tool call${count === 1 ? "" : "s"} waiting for an operator`;
}

/** Count the pending approvals again (the files: an agent writes a record before it tells). */
export async function refreshApprovalCount() {
  try {
    const { approvals } = await api("/api/approvals");
    showApprovalCount(approvals.filter((row) => row.status === "pending").length);
  } catch (error) {
    // the count stays as it was: the next event or view asks again
  }
}

const refreshApprovalCountSoon = debounce(refreshApprovalCount, 150);

/** Offer every agent of the swarm in `select`, with `selected` chosen (and offered at once,
 * before the list of agents arrives). */
export function fillAgentSelect(select, selected) {
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

export function connectStream(onModeChange) {
  const source = new EventSource("/api/stream");
  source.addEventListener("mode", (message) => {
    const { live } = JSON.parse(message.data);
    if (setMode(live)) {
      onModeChange();
      loadAgents().catch(() => {}); // the header: the swarm's name as this mode knows it
    }
  });
  source.addEventListener("message", (message) => {
    const item = JSON.parse(message.data);
    noteLive(item.event);
    if (String(item.event.type || "").startsWith("approval.")) refreshApprovalCountSoon();
    for (const listener of listeners) listener(item);
  });
}

/** A `process.exited` event that is a crash: unasked, and not exit code 0 (which the daemon
 * restarts at once without counting a crash). */
export function isCrash(event) {
  return event.expected === false && !(event.exitCode === 0 && !event.signal);
}

/** What every view learns from a live event: when an agent crashed (until it next exits
 * cleanly: then its latest exit is no crash). */
export function noteLive(event) {
  if (event.type !== "process.exited") return;
  if (isCrash(event)) state.crashes.set(event.agentName, parseStamp(event.timestamp) ?? Date.now());
  else state.crashes.delete(event.agentName);
}

/** Listen to the live events while the current view is on screen. */
export function onLive(handler) {
  listeners.add(handler);
}

/** The view on screen changes: its listener goes with it. */
export function clearListeners() {
  listeners.clear();
}
