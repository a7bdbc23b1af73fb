// The Traces view: the newest traces, and one trace as a waterfall of its spans with its
// marks (budgets reached, waits for model permits, sandboxed programs' connections).

import { h, append, api, debounce, shortId, formatDuration, formatTime, plural, formatTokens, formatCost, formatFigure, usageTitle, describeEvent, hashFor, outcomeBadge, foldJson, emptyNote, errorNote } from "./ui.js";
import { fillAgentSelect, onLive } from "./shell.js";
import { deciderText } from "./approvals.js";

export function tracesView(main, parts, query) {
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
