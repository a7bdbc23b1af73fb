// The studio's single-page app: five views over the studio's JSON API, routed by the URL's
// hash so each view (and each trace, conversation and log filter) can be linked. Each view
// is a module of its own; ui.js holds what they draw with, shell.js what they share.

import { approvalsView } from "./approvals.js";
import { conversationsView } from "./conversations.js";
import { logsView } from "./logs.js";
import { state, renderModeBadge, loadAgents, refreshApprovalCount, connectStream, onLive, clearListeners } from "./shell.js";
import { swarmView } from "./swarm.js";
import { tracesView } from "./traces.js";
import { h, api, debounce, formatTime, hashFor, foldJson, emptyNote, errorNote } from "./ui.js";

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
  clearListeners();
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
refreshApprovalCount();
connectStream(rerender);
route(false);
