"""The shapes of the OpenAI Responses API door (:mod:`orchestrator.http.responses_api`): the
request body read at the door, the ``response`` object, and the output items of the agent's
tool calls. Pure functions: no request desk, no HTTP."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from goondan.errors import DeliveryCode
from ipc import IpcError
from ipc.delegation import DelegateAnswer
from ipc.runtime_events import EventType
from orchestrator.http.body import BadBody, Fields
from orchestrator.http.openai import turn_tokens
from orchestrator.requests import RequestRecord

TOOL_CALLS = "goondan.tool_calls"
"""The ``include`` value that adds the agent's tool calls to ``output``."""
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
HISTORY_ITEMS = frozenset({"function_call", "function_call_output", "reasoning"})
"""Input item types taken as history (the agent's instance holds its own)."""
TEXT_PARTS = frozenset({"input_text", "output_text"})
ROLES = frozenset({"user", "assistant", "system", "developer"})
_RESPONSE_ID = re.compile(r"resp_([0-9a-f]{32})")


# -- ids ---------------------------------------------------------------------------------------


def response_id(request_id: str) -> str:
    """The response id of a request (``req_<hex>`` → ``resp_<hex>``)."""
    return "resp_" + request_id.removeprefix("req_")


def request_id_of(response: str) -> str | None:
    """The request id a response id names; ``None`` for one that is no id of ours."""
    matched = _RESPONSE_ID.fullmatch(response)
    return "req_" + matched.group(1) if matched else None


# -- the request -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResponsesRequest:
    """What ``POST /v1/responses`` takes from its body; other fields are ignored."""

    model: str
    text: str
    """The last user message's text."""
    instructions: str | None
    """``instructions`` and the input's system/developer text, joined."""
    given_instructions: str | None
    """``instructions`` as sent (echoed in the response)."""
    previous_response_id: str | None
    user: str | None
    stream: bool
    background: bool
    store: bool
    metadata: dict[str, str]
    tool_calls: bool
    """``include`` asks for the agent's tool calls."""

    @property
    def turn_input(self) -> str:
        """What the agent is asked: the instructions, a blank line, then the text."""
        return f"{self.instructions}\n\n{self.text}" if self.instructions else self.text

    def echo(self) -> dict[str, object]:
        """What the response repeats of this request (kept in the request's record)."""
        return {
            "instructions": self.given_instructions,
            "previousResponseId": self.previous_response_id,
            "metadata": self.metadata,
            "store": self.store,
            "user": self.user,
            "background": self.background,
        }

    @classmethod
    def read(cls, data: dict[str, Any]) -> ResponsesRequest:
        """The request in a checked body; raises :class:`BadBody` naming the field."""
        fields = Fields(data)
        model = fields.required_text("model")
        text, system = read_input(data.get("input"))
        given = fields.text("instructions")
        joined = "\n\n".join(t for t in (given, *system) if t and t.strip()) or None
        include = data.get("include")
        if include is not None and (
            not isinstance(include, list) or not all(isinstance(v, str) for v in include)
        ):
            raise BadBody("include", "include must be an array of strings")
        _refuse_unsupported(data)
        store = data.get("store")
        if store is not None and not isinstance(store, bool):
            raise BadBody("store", "store must be true or false")
        stream, background = fields.flag("stream"), fields.flag("background")
        if stream and background:
            raise BadBody(
                "background", "background responses do not stream here: retrieve it by its id"
            )
        return cls(
            model=model,
            text=text,
            instructions=joined,
            given_instructions=given,
            previous_response_id=fields.text("previous_response_id") or None,
            user=fields.text("user") or None,
            stream=stream,
            background=background,
            store=store is not False,
            metadata=read_metadata(fields.mapping("metadata")),
            tool_calls=TOOL_CALLS in (include or ()),
        )


def read_input(value: object) -> tuple[str, list[str]]:
    """``(text of the last user message, texts of the system/developer messages)`` of an
    ``input``; raises :class:`BadBody` naming the field."""
    if isinstance(value, str):
        if not value.strip():
            raise BadBody("input", "input must be non-empty text or message items")
        return value, []
    if not isinstance(value, list) or not value:
        raise BadBody("input", "input must be non-empty text or a non-empty array of items")
    system: list[str] = []
    last: tuple[object, str | None] = ("", None)
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise BadBody(where, f"{where} must be a JSON object")
        kind = item.get("type", "message")
        if not isinstance(kind, str):  # (a list or an object is no set member either)
            raise BadBody(f"{where}.type", f"{where}.type must be a string")
        if kind in HISTORY_ITEMS:
            last = (kind, None)
            continue
        if kind != "message":
            known = ", ".join(sorted({"message", *HISTORY_ITEMS}))
            raise BadBody(
                f"{where}.type", f"unknown item type {kind!r} (this server takes: {known})"
            )
        role = item.get("role")
        if not isinstance(role, str) or role not in ROLES:
            roles = ", ".join(sorted(ROLES))
            raise BadBody(f"{where}.role", f"{where}.role must be one of {roles}")
        text = content_text(item.get("content"), f"{where}.content")
        if role in ("system", "developer") and text:
            system.append(text)
        last = (role, text)
    last_role, last_text = last
    if last_role != "user" or last_text is None or not last_text.strip():
        where = f"input[{len(value) - 1}]"
        raise BadBody(where, "input must end with a user message with text")
    return last_text, system


def content_text(content: object, where: str) -> str:
    """A message's text: a string, or its text parts joined; raises :class:`BadBody`."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadBody(where, f"{where} must be text or an array of content parts")
    texts = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        if not isinstance(part, dict):
            raise BadBody(at, f"{at} must be a JSON object")
        kind = part.get("type")
        if not isinstance(kind, str):
            raise BadBody(f"{at}.type", f"{at}.type must be a string")
        if kind == "refusal":
            continue
        if kind not in TEXT_PARTS:
            raise BadBody(f"{at}.type", f"only text parts are taken here, not {kind!r}")
        text = part.get("text")
        if not isinstance(text, str):
            raise BadBody(f"{at}.text", f"{at}.text must be a string")
        texts.append(text)
    return "".join(texts)


def read_metadata(value: dict[str, Any] | None) -> dict[str, str]:
    """``metadata``: at most 16 pairs of strings (keys up to 64 characters, values 512)."""
    if value is None:
        return {}
    if len(value) > MAX_METADATA_PAIRS:
        raise BadBody("metadata", f"metadata holds at most {MAX_METADATA_PAIRS} pairs")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY:
            raise BadBody("metadata", f"metadata keys are at most {MAX_METADATA_KEY} characters")
        if not isinstance(item, str) or len(item) > MAX_METADATA_VALUE:
            raise BadBody(
                f"metadata.{key}", f"metadata values are strings of {MAX_METADATA_VALUE} or fewer"
            )
    return dict(value)


def _refuse_unsupported(data: dict[str, Any]) -> None:
    """Refuse what this server cannot honour rather than answer as if it had."""
    tools = data.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise BadBody("tools", "tools must be an array")
    if tools:
        raise BadBody(
            "tools", "the agent runs its own tools; tools a client runs are not supported"
        )
    if data.get("conversation") is not None:
        raise BadBody("conversation", "use previous_response_id to continue a conversation")
    if data.get("prompt") is not None:
        raise BadBody("prompt", "stored prompts are not supported; send input")
    text = data.get("text")
    if text is not None and not isinstance(text, dict):
        raise BadBody("text", "text must be a JSON object")
    form = (text or {}).get("format")
    if form is not None and (not isinstance(form, dict) or form.get("type") != "text"):
        raise BadBody("text.format", "the agent answers plain text: only format type 'text'")


# -- the response ------------------------------------------------------------------------------


def usage_json(answer: DelegateAnswer | None) -> dict[str, Any] | None:
    """The ``usage`` of a response (``None`` before its answer)."""
    if answer is None:
        return None
    prompt, completion = turn_tokens(answer)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def answer_text(answer: DelegateAnswer) -> str:
    """The Turn's answer as text."""
    output = answer.output
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """An assistant ``message`` output item holding one ``output_text`` part."""
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content if status == "completed" else [],
    }


def response_json(
    record: RequestRecord,
    answer: DelegateAnswer | None,
    output: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The ``response`` object of ``record``: ``in_progress`` without ``answer``, else
    ``completed`` (``output``, or the answer's message), or ``failed`` (``cancelled`` for a
    cancelled Turn) with its ``error``."""
    echo = record.echo or {}
    error: dict[str, str] | None
    if answer is None:
        status, error = "in_progress", None
    elif answer.ok:
        status, error = "completed", None
        if output is None:
            output = [message_item(message_id(record.request_id), answer_text(answer))]
    else:
        failure = answer.error or IpcError(
            "the request failed", code=DeliveryCode.AGENT_TURN_FAILED
        )
        status = "cancelled" if failure.code == DeliveryCode.CANCELLED else "failed"
        error = {"code": failure.code, "message": failure.message}
    finished = int(record.finished_at) if record.finished_at is not None else None
    return {
        "id": response_id(record.request_id),
        "object": "response",
        "created_at": int(record.accepted_at),
        "status": status,
        "completed_at": finished if status == "completed" else None,
        "background": bool(echo.get("background")),
        "error": error,
        "incomplete_details": None,
        "instructions": echo.get("instructions"),
        "max_output_tokens": None,
        "metadata": echo.get("metadata") or {},
        "model": record.agent,
        "output": output or [],
        "parallel_tool_calls": False,
        "previous_response_id": echo.get("previousResponseId"),
        "reasoning": None,
        "store": echo.get("store", True),
        "temperature": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "truncation": "disabled",
        "usage": usage_json(answer) if answer is not None and answer.ok else None,
        "user": echo.get("user"),
        "requestId": record.request_id,
    }


def response_of(answer: DelegateAnswer, record: RequestRecord) -> dict[str, Any]:
    """The body ``GET /v1/requests/{id}`` shows for a Responses request: its ``response``."""
    return response_json(record, answer)


def message_id(request_id: str, index: int = 0) -> str:
    """The id of a response's ``index``-th message item."""
    hexes = request_id.removeprefix("req_")
    return f"msg_{hexes}" if index == 0 else f"msg_{hexes}_{index}"


def tool_items(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The output items of a ``tool.called`` (a ``function_call``), ``tool.completed`` or
    ``tool.failed`` (its ``function_call_output``) runtime event, as its JSON object."""
    call_id = str(event.get("toolCallId") or "")
    kind = event.get("type")
    if kind == EventType.TOOL_CALLED:
        args = event.get("args")
        return [
            {
                "id": f"fc_{call_id}",
                "type": "function_call",
                "call_id": call_id,
                "name": str(event.get("toolName") or ""),
                "arguments": json.dumps(args if args is not None else {}, ensure_ascii=False),
                "status": "completed",
            }
        ]
    if kind in (EventType.TOOL_COMPLETED, EventType.TOOL_FAILED):
        if kind == EventType.TOOL_FAILED:
            out: object = {"error": event.get("errorMessage")}
        elif event.get("status") == "error":
            out = {"error": event.get("error")}
        else:
            out = event.get("output")
        text = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False, default=str)
        return [
            {
                "id": f"fco_{call_id}",
                "type": "function_call_output",
                "call_id": call_id,
                "output": text,
                "status": "completed",
            }
        ]
    return []
