"""``inter-agent-response-format``: turn inbox reports into text a model reads well.

Answers to asynchronous ``agents__request`` calls arrive in the conversation in upstream's
shape: JSON content ``{type: "inter_agent_response", requestId, fromAgentId, toAgentId,
status, response | error}`` with metadata ``__goondanInterAgentResponse``; reports of lost
``agents__send`` messages as JSON (``metadata.__goondanInbox: send_failed``). Before every
Step (a ``step`` layer, before ``next()``), each such message not formatted yet is replaced
(same id) by::

    [inter-agent response] <from> -> <to> status=<ok|error|timeout> requestId=<correlationId>
    <the answer text, or error(<code>): <message>>

    [inter-agent send failed] -> <target> eventId=<eventId>
    error(<code>): <message>

and marked ``metadata.__goondanInterAgentResponseFormatted: true``. A response is read from
its metadata, as upstream's formatter does (its content fills in what the metadata lacks); a
message with neither in the expected shape is left as it is.

Config:

- ``includeRequestMetadata`` (false): add ``eventId`` and ``traceId`` lines to responses, and
  the request's metadata (``requestMetadata=<json>``, as upstream) when it had any.

Example::

    extensions:
      - ref: { kind: Extension, name: inter-agent-response-format, package: "@goondan/base" }
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from goondan.errors import DeliveryCode
from tools_base import ExtensionApi, JsonObject, Message, MessageEvent
from tools_base.extensions._common import config_bool

FORMATTED = "__goondanInterAgentResponseFormatted"
RESPONSE = "__goondanInterAgentResponse"
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
    about = message.metadata.get(RESPONSE)
    if kind not in KINDS and not isinstance(about, dict):
        return None
    if message.metadata.get(FORMATTED) is True:
        return None
    try:
        report = json.loads(message.content)
    except ValueError:
        report = None
    report = report if isinstance(report, dict) else None
    if kind == "send_failed":
        return _send_failed(report)
    return _response(report, about if isinstance(about, dict) else {}, include_metadata)


def _send_failed(report: JsonObject | None) -> str | None:
    if report is None:
        return None
    return (
        f"[inter-agent send failed] -> {report.get('target')} "
        f"eventId={report.get('eventId')}\n{_error_line(report)}"
    )


def _response(report: JsonObject | None, about: JsonObject, include_metadata: bool) -> str | None:
    # Upstream's metadata first; the content fills in (and stands alone without it).
    fields: JsonObject = {**(report or {}), **about}
    if fields.get("requestId") is None or fields.get("fromAgentId") is None:
        return None
    status = fields.get("status", "ok")
    lines = [
        f"[inter-agent response] {fields.get('fromAgentId')} -> {fields.get('toAgentId')} "
        f"status={status} requestId={fields.get('requestId')}"
    ]
    if include_metadata:
        lines.append(f"eventId={fields.get('requestEventId')}")
        lines.append(f"traceId={fields.get('traceId')}")
    if status == "ok":
        lines += _answer_lines(report)
    else:
        lines.append(_failure_line(report, fields))
    request_metadata = fields.get("requestMetadata")
    if include_metadata and isinstance(request_metadata, dict):
        lines.append(f"requestMetadata={json.dumps(request_metadata, indent=2)}")
    return "\n".join(lines)


def _answer_lines(report: JsonObject | None) -> list[str]:
    """The answer's text (JSON other than a string, indented), if there is one."""
    response = report.get("response") if report is not None else None
    text = response if isinstance(response, str) else json.dumps(response, indent=2)
    return [text] if response is not None and text else []


def _failure_line(report: JsonObject | None, fields: JsonObject) -> str:
    error = report.get("error") if report is not None else None
    error = error if isinstance(error, dict) else {}
    code = fields.get("errorCode") or error.get("code") or DeliveryCode.AGENT_TURN_FAILED
    reason = fields.get("errorMessage") or error.get("message") or "agent request failed"
    return f"error({code}): {reason}"


def _error_line(report: JsonObject) -> str:
    error = report.get("error")
    if not isinstance(error, dict):
        return "error(unknown): no details"
    return f"error({error.get('code')}): {error.get('message')}"
