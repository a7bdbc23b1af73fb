"""``inter-agent-response-format``: turn inbox reports into text a model reads well.

Answers to asynchronous ``agents__request`` calls and reports of lost ``agents__send``
messages arrive in the conversation as JSON (``metadata.__goondanInbox``). Before every Step
(a ``step`` layer, before ``next()``), each such message not formatted yet is replaced (same
id) by::

    [inter-agent response] <from> -> <to> status=<ok|error> requestId=<correlationId>
    <the answer text, or error(<code>): <message>>

    [inter-agent send failed] -> <target> eventId=<eventId>
    error(<code>): <message>

and marked ``metadata.__goondanInterAgentResponseFormatted: true``. A message whose content
is not the expected JSON is left as it is.

Config:

- ``includeRequestMetadata`` (false): add ``eventId`` and ``traceId`` lines to responses.

Example::

    extensions:
      - ref: { kind: Extension, name: inter-agent-response-format, package: "@goondan/base" }
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tools_base import ExtensionApi, JsonObject, Message, MessageEvent
from tools_base.extensions._common import config_bool

FORMATTED = "__goondanInterAgentResponseFormatted"
KINDS = ("inter_agent_response", "send_failed")


def register(api: ExtensionApi) -> None:
    """Register the formatter as a ``step`` layer."""
    include_metadata = config_bool(api.config, "includeRequestMetadata", False)

    async def format_inbox(ctx: Any) -> Any:
        for message in ctx.messages:
            text = formatted(message, include_metadata)
            if text is not None:
                metadata = {**message.metadata, FORMATTED: True}
                replacement = dataclasses.replace(message, content=text, metadata=metadata)
                ctx.emit_message_event(MessageEvent.replace(message.id, replacement))
        return await ctx.next()

    api.pipeline.register("step", format_inbox)


def formatted(message: Message, include_metadata: bool = False) -> str | None:
    """The readable text for an unformatted inbox report, else ``None``."""
    kind = message.metadata.get("__goondanInbox")
    if kind not in KINDS or message.metadata.get(FORMATTED) is True:
        return None
    try:
        report = json.loads(message.content)
    except ValueError:
        return None
    if not isinstance(report, dict):
        return None
    if kind == "send_failed":
        return (
            f"[inter-agent send failed] -> {report.get('target')} "
            f"eventId={report.get('eventId')}\n{_error_line(report)}"
        )
    status = report.get("status", "ok")
    lines = [
        f"[inter-agent response] {report.get('from')} -> {report.get('to')} "
        f"status={status} requestId={report.get('correlationId')}"
    ]
    if include_metadata:
        turn = report.get("turn")
        trace = turn.get("traceId") if isinstance(turn, dict) else None
        lines.append(f"eventId={report.get('eventId')}")
        lines.append(f"traceId={trace}")
    lines.append(_error_line(report) if status == "error" else str(report.get("output", "")))
    return "\n".join(lines)


def _error_line(report: JsonObject) -> str:
    error = report.get("error")
    if not isinstance(error, dict):
        return "error(unknown): no details"
    return f"error({error.get('code')}): {error.get('message')}"
