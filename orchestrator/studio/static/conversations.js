// The Conversations view: each agent's instances on disk and one instance's messages.

import { h, append, api, debounce, shortId, formatTime, parseStamp, formatTokens, formatCost, hashFor, outcomeBadge, foldText, foldJson, emptyNote, errorNote } from "./ui.js";
import { onLive } from "./shell.js";

export function conversationsView(main, parts, query) {
  const [agent, key] = parts;
  const heading = h("h1", { text: agent ? `Conversation ${agent} @${key}` : "Conversations" });
  const list = h("nav", { class: "instances", "aria-label": "Instances" });
  // Oldest first, as a conversation reads, opened at its end: the latest message in view, and
  // a button back to it whenever it is not.
  const messages = h("div", { class: "messages-body" });
  const jump = h("button", { type: "button", class: "jump-latest", hidden: true, onclick: () => showLatest(true) }, "Jump to latest");
  const pane = h("section", { class: "messages-pane", "aria-label": "Messages" }, messages, h("div", { class: "jump-bar" }, jump));
  let atEnd = true; // the latest message is in view (so a new one is followed)
  const watcher = new IntersectionObserver((entries) => {
    for (const entry of entries) atEnd = entry.isIntersecting;
    jump.hidden = atEnd;
  });
  const lastMessage = () => {
    const items = messages.querySelectorAll("li.msg");
    return items.length ? items[items.length - 1] : null;
  };
  const showLatest = (focus) => {
    const last = lastMessage();
    if (!last) return;
    last.scrollIntoView({ block: "end" });
    if (focus) last.focus({ preventScroll: true });
  };
  const watchLast = () => {
    watcher.disconnect();
    const last = lastMessage();
    if (last) watcher.observe(last);
    else jump.hidden = true;
  };
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
      messages.replaceChildren(emptyNote("Choose an instance to read its messages."));
      return;
    }
    try {
      const body = await api(`/api/conversations/${encodeURIComponent(agent)}/${encodeURIComponent(key)}`);
      drawInstanceUsage(usageHolder, body.usage);
      const openFolds = new Set([...messages.querySelectorAll("details[open][data-fold-id]")].map((d) => d.dataset.foldId));
      const following = atEnd;
      messages.replaceChildren(messageList(body.messages));
      for (const id of openFolds) {
        const again = messages.querySelector(`details[data-fold-id="${CSS.escape(id)}"]`);
        if (again) again.open = true;
      }
      watchLast();
      if (firstDraw) {
        firstDraw = false;
        if (query.get("call")) highlightCall(messages, query.get("call"), query.get("step"));
        else showLatest(false);
      } else if (following) {
        showLatest(false); // a reader at the end stays there as messages come
      }
    } catch (error) {
      watchLast();
      messages.replaceChildren(error.status === 404 ? emptyNote(`No instance ${key} of ${agent}.`) : errorNote(error));
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
  return {
    dispose: () => {
      refreshSoon.cancel();
      watcher.disconnect();
    },
  };
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
