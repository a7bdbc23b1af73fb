// Tool calls parked for an operator: how the studio words a decision (the `decidedBy` the
// daemon records with each approval and its `approval.decided` / `approval.refused` events),
// and the Approvals view, where each pending call is approved (its arguments as they are, or
// edited) or rejected with a reason.
//
// A decision goes to the studio's server, which checks that it comes from this page (its
// Origin, the session cookie the studio's printed link set, and the token bound to it) and
// hands it to the daemon: the daemon records who decided and answers with the Turn's end.
// The page never holds a daemon token.
//
// The token comes once, embedded in the page the printed link (`/?key=…`) answers: it is kept
// in this origin's localStorage (per port, unlike the cookie) and the key leaves the address
// bar. No route serves it; /api/session only says whether this browser may decide.
const TOKEN_KEY = "goondan-csrf";

function takeToken() {
  const meta = document.querySelector('meta[name="goondan-csrf"]');
  if (!meta) return;
  try {
    localStorage.setItem(TOKEN_KEY, meta.content);
  } catch (error) {
    // no storage (a private window's policy): this page cannot decide, and says so
  }
  meta.remove();
  if (new URLSearchParams(location.search).has("key")) {
    history.replaceState(history.state, "", location.pathname + location.hash);
  }
}
takeToken();

function storedToken() {
  try {
    return localStorage.getItem(TOKEN_KEY);
  } catch (error) {
    return null;
  }
}

/** Who decided an approval, in words: "uid 1000 (alice) pid 4242 on api.sock",
 * "token GOONDAN_API_TOKEN from 10.0.0.7:50000", "anonymous ... from 127.0.0.1:5". */
export function deciderText(who) {
  if (!who) return "unknown";
  const parts = [];
  if (who.token != null) parts.push(`token ${who.token}`);
  else if (who.anonymous) parts.push("anonymous");
  if (who.uid != null) parts.push(`uid ${who.uid}${who.user ? ` (${who.user})` : ""}`);
  if (who.pid != null) parts.push(`pid ${who.pid}`);
  if (who.via === "unix") parts.push("on api.sock");
  else if (who.address) parts.push(`from ${who.address}`);
  return parts.join(" ") || "unknown";
}

const STATUS_TEXT = {
  pending: "awaiting approval",
  approved: "approved",
  rejected: "rejected",
  expired: "expired",
  cancelled: "cancelled",
};

/** The arguments an operator typed, as an object; throws an Error saying what is wrong. */
export function parseArguments(text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new Error(`Arguments are not valid JSON: ${error.message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    const kind = value === null ? "null" : Array.isArray(value) ? "an array" : `a ${typeof value}`;
    throw new Error(`Arguments must be a JSON object, not ${kind}`);
  }
  return value;
}

let session = null; // the studio's /api/session answer, asked once

async function studioSession(api) {
  if (!session) {
    const facts = await api("/api/session");
    session = facts.canDecide && !storedToken()
      ? { canDecide: false, why: "this page holds no token of the studio's session: open the link the studio printed when it started (it carries ?key=)" }
      : facts;
  }
  return session;
}

/** POST a decision; its answer, or an Error with the studio's or the daemon's message. */
async function send(api, approvalId, decision, body) {
  await studioSession(api);
  const csrfToken = storedToken() || "";
  const response = await fetch(`/api/approvals/${encodeURIComponent(approvalId)}/${decision}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-Goondan-Csrf": csrfToken },
    body: JSON.stringify(body),
  });
  const answer = await response.json().catch(() => null);
  if (!response.ok) {
    const error = answer && answer.error ? answer.error : {};
    throw new Error(`${error.message || response.statusText}${error.code ? ` (${error.code})` : ""}`);
  }
  return answer;
}

/** What a decided approval says: "approved by uid 1000 (alice) pid 42 on api.sock at …". */
function decisionText(row, ui) {
  const parts = [STATUS_TEXT[row.status] || row.status];
  if (row.decidedBy) parts.push(`by ${deciderText(row.decidedBy)}`);
  if (row.decidedAt) parts.push(`at ${ui.formatTime(Date.parse(row.decidedAt), true)}`);
  let text = parts.join(" ");
  if (row.status === "rejected" && row.reason) text += `: ${row.reason}`;
  return text;
}

/** What the Turn answered once the call ran (or was refused): `turn` of the daemon's answer. */
function turnText(turn) {
  if (turn === null) return "The Turn did not end within the swarm's request timeout.";
  if (turn.status === "ok") return `The Turn answered: ${turn.output ?? ""}`;
  const error = turn.error || {};
  return `The Turn failed: ${error.message || "?"}${error.code ? ` (${error.code})` : ""}`;
}

/** The Approvals view (`#/approvals`, `#/approvals/ID` to bring one into view). `ui` holds
 * the app's helpers: h, api, hashFor, formatTime, foldJson, emptyNote, errorNote, onLive,
 * debounce, state. */
export function approvalsView(main, parts, ui) {
  const { h } = ui;
  const focusId = parts[0] || null;
  const intro = h("p", { class: "lede" });
  const pendingHolder = h("section", { "aria-labelledby": "pending-heading" });
  const decidedHolder = h("section", { "aria-labelledby": "decided-heading" });
  main.append(h("div", { class: "view-head" }, h("h1", { text: "Approvals" }), intro), pendingHolder, decidedHolder);
  const answers = new Map(); // approval id -> the Turn's answer, once this page decided it
  const busy = new Set(); // approval ids whose decision is on its way
  const drafts = new Map(); // approval id -> {args, reason} typed and not sent: kept on redraw
  let rows = null;
  let disposed = false;

  const draw = (canDecide, why) => {
    intro.textContent = !canDecide
      ? `Tool calls parked for an operator. ${why}`
      : ui.state.live
        ? "Tool calls parked for an operator. Approve one as it is or with edited arguments, or reject it with a reason the model reads: the daemon records who decided."
        : "Tool calls parked for an operator, as recorded. No daemon runs: deciding needs one.";
    const pending = rows.filter((r) => r.status === "pending");
    const decided = rows.filter((r) => r.status !== "pending").reverse().slice(0, 50);
    pendingHolder.replaceChildren(
      h("h2", { id: "pending-heading", text: `Awaiting approval (${pending.length})` }),
      pending.length
        ? h("ul", { class: "approvals" }, pending.map((row) => pendingItem(row, canDecide)))
        : ui.emptyNote("Nothing waits for approval."),
    );
    decidedHolder.replaceChildren(
      h("h2", { id: "decided-heading", text: "Decided" }),
      decided.length ? h("ul", { class: "approvals" }, decided.map(decidedItem)) : ui.emptyNote("No decisions yet."),
    );
    if (focusId) {
      const item = main.querySelector(`li.approval[data-approval-id="${CSS.escape(focusId)}"]`);
      if (item) item.scrollIntoView({ block: "nearest" });
    }
  };

  const head = (row) =>
    h("div", { class: "approval-head" },
      h("span", { class: "kind kind-approval", text: "Approval" }),
      h("span", { class: "tool-name", text: row.toolName }),
      h("span", { class: "muted", text: ` ${row.agentName}@${row.instanceKey}` }),
      h("span", { class: `badge approval-${row.status}`, dataset: { status: row.status }, text: STATUS_TEXT[row.status] || row.status }),
      row.traceId ? h("a", { href: ui.hashFor("traces", [row.traceId]), class: "mono", text: `trace ${String(row.traceId).slice(0, 8)}` }) : null);

  const pendingItem = (row, canDecide) => {
    const id = row.approvalId;
    const editor = h("textarea", {
      class: "approval-args mono",
      id: `args-${id}`,
      rows: Math.min(12, JSON.stringify(row.arguments ?? {}, null, 2).split("\n").length + 1),
      spellcheck: "false",
    });
    const draft = drafts.get(id) || {};
    editor.value = draft.args ?? JSON.stringify(row.arguments ?? {}, null, 2);
    const reason = h("input", { class: "approval-reason", id: `reason-${id}`, type: "text", maxlength: "2000" });
    reason.value = draft.reason ?? "";
    const keep = () => drafts.set(id, { args: editor.value, reason: reason.value });
    editor.addEventListener("input", keep);
    reason.addEventListener("input", keep);
    const problem = h("p", { class: "error-note approval-problem", role: "alert", hidden: true });
    const outcome = h("p", { class: "approval-outcome", role: "status" });
    const approve = h("button", { type: "button", class: "button approve", text: "Approve" });
    const reject = h("button", { type: "button", class: "button reject", text: "Reject" });
    const say = (text) => {
      problem.textContent = text;
      problem.hidden = !text;
    };
    const act = async (decision, body) => {
      say("");
      busy.add(id);
      approve.disabled = reject.disabled = true;
      outcome.textContent = decision === "approve" ? "Approving: the call runs, then the Turn goes on…" : "Rejecting…";
      try {
        const answer = await send(ui.api, id, decision, body);
        answers.set(id, answer.turn);
        drafts.delete(id);
        outcome.textContent = "";
      } catch (error) {
        outcome.textContent = "";
        say(error.message);
      } finally {
        busy.delete(id);
        approve.disabled = reject.disabled = !canDecide;
      }
      if (!disposed) refresh();
    };
    approve.addEventListener("click", () => {
      let edited;
      try {
        edited = parseArguments(editor.value);
      } catch (error) {
        say(error.message);
        editor.focus();
        return;
      }
      const same = JSON.stringify(edited) === JSON.stringify(row.arguments ?? {});
      act("approve", same ? {} : { arguments: edited });
    });
    reject.addEventListener("click", () => {
      if (!reason.value.trim()) {
        say("Give a reason to reject: the model is told why.");
        reason.focus();
        return;
      }
      act("reject", { reason: reason.value.trim() });
    });
    approve.disabled = reject.disabled = !canDecide || busy.has(id);
    return h("li", { class: "approval", dataset: { approvalId: id, status: row.status } },
      head(row),
      h("p", { class: "muted small", text: `requested ${ui.formatTime(Date.parse(row.requestedAt), true)} · expires ${ui.formatTime(Date.parse(row.expiresAt), true)} · ${id}` }),
      h("label", { for: `args-${id}`, text: "Arguments (a JSON object; edit them to run the call with others)" }),
      editor,
      h("div", { class: "approval-actions" },
        approve,
        h("label", { for: `reason-${id}`, text: "Reason" }),
        reason,
        reject),
      problem,
      outcome);
  };

  const decidedItem = (row) => {
    const id = row.approvalId;
    const turn = answers.has(id) ? answers.get(id) : undefined;
    const ran = row.decidedArguments !== undefined ? row.decidedArguments : row.arguments;
    return h("li", { class: "approval", dataset: { approvalId: id, status: row.status } },
      head(row),
      h("p", { class: "approval-decision", text: decisionText(row, ui) }),
      h("div", { class: "kv" }, h("span", { class: "k", text: row.decidedArguments !== undefined ? "ran with" : "arguments" }), ui.foldJson(ran)),
      turn !== undefined ? h("p", { class: "approval-turn", text: turnText(turn) }) : null);
  };

  const refresh = async () => {
    try {
      const [{ approvals }, studio] = await Promise.all([ui.api("/api/approvals"), studioSession(ui.api)]);
      if (disposed) return;
      const shown = [...pendingHolder.querySelectorAll("li.approval")].map((li) => li.dataset.approvalId).join();
      rows = approvals;
      const pending = rows.filter((r) => r.status === "pending").map((r) => r.approvalId).join();
      // Whoever is typing keeps their place: the same pending calls are not drawn again.
      const typing = pendingHolder.contains(document.activeElement) && document.activeElement.matches("textarea, input");
      if (typing && shown === pending) return;
      draw(studio.canDecide, studio.why);
    } catch (error) {
      if (!disposed) pendingHolder.replaceChildren(ui.errorNote(error));
    }
  };
  const refreshSoon = ui.debounce(refresh, 250);
  refresh();
  ui.onLive(({ event }) => {
    if ((event.type || "").startsWith("approval.")) refreshSoon();
  });
  return {
    dispose() {
      disposed = true;
      refreshSoon.cancel();
    },
  };
}
