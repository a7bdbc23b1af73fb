"""The offline ``scripted`` provider: deterministic answers from the rules of the Model resource.

It is the default model of ``goondan.yaml.example`` and the test double of the runtime.
The rule format is documented in :mod:`bundle.scripted`. When no rule matches, the call
fails with :class:`UnexpectedModelCall` (code ``E_MODEL_SCRIPT_NO_MATCH``) naming the newest
message, so a swarm or a test with a gap in its script fails loudly instead of looping.
A streaming caller gets the reply in chunks (``script.stream``, or the rule's ``stream``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agent_process.models.base import ModelCallError, ModelRequest, ModelResponse, TokenUsage
from bundle.scripted import (
    ScriptCondition,
    ScriptRule,
    ScriptSpec,
    ScriptStream,
    ScriptToolCall,
)
from goondan.errors import DeliveryCode
from tools_base import JsonValue, Message, ToolCall

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}]+)\}")
_PATH_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_WORD_BY_WORD = ScriptStream()


class UnexpectedModelCall(ModelCallError):
    """No rule of the script matches the conversation."""

    code = DeliveryCode.E_MODEL_SCRIPT_NO_MATCH


class ScriptTemplateError(ModelCallError):
    """A template names a value the conversation does not have."""

    code = DeliveryCode.E_MODEL_SCRIPT_TEMPLATE


class ScriptedModel:
    """A :class:`~agent_process.models.base.ChatModel` answering from :class:`ScriptSpec` rules."""

    def __init__(
        self, script: ScriptSpec, *, agent_name: str = "", model_name: str = "scripted"
    ) -> None:
        self.script = script
        self.agent_name = agent_name
        self.model_name = model_name
        self._call_ids = itertools.count(1)
        # Unique across processes: a conversation outlives its process, and a call id that
        # comes again after a restart would pass for the older call's (answered) id.
        self._call_prefix = f"call_scripted_{secrets.token_hex(4)}_"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer from the first matching rule."""
        newest = _newest_non_system(request.messages)
        user_text = _latest_user_text(request.messages)
        for index, rule in enumerate(self.script.rules):
            variables = _match(rule.when, newest)
            if variables is None:
                continue
            variables.setdefault("input", user_text)
            variables.setdefault("agent", self.agent_name)
            label = rule.name or f"rules[{index}]"
            response = self._respond(rule, label, variables, request)
            if request.on_text is not None and response.text:
                stream = rule.stream or self.script.stream or _WORD_BY_WORD
                for chunk in stream.split(response.text):
                    request.on_text(chunk)
                    await asyncio.sleep(
                        0
                    )  # let each chunk go out on its own, as a real stream's do
            return response
        described = _describe(newest)
        raise UnexpectedModelCall(
            f"scripted model {self.model_name!r} of agent {self.agent_name!r} has no rule "
            f"matching {described}; add a rule for it (a rule without `when` is a fallback)"
        )

    def _respond(
        self, rule: ScriptRule, label: str, variables: dict[str, Any], request: ModelRequest
    ) -> ModelResponse:
        if rule.fail is not None:
            raise ModelCallError(
                render_text(rule.fail, variables, label), code=DeliveryCode.E_MODEL_SCRIPTED_FAILURE
            )
        text = render_text(rule.reply, variables, label) if rule.reply is not None else ""
        planned = rule.calls if rule.calls is not None else [rule.call] if rule.call else []
        calls = tuple(self._tool_call(call, variables, label) for call in planned)
        prompt_chars = sum(len(m.content) for m in request.messages)
        return ModelResponse(
            text=text,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else "stop",
            usage=TokenUsage(prompt_tokens=prompt_chars // 4, completion_tokens=len(text) // 4),
            metadata={"scriptRule": label},
        )

    def _tool_call(
        self, call: ScriptToolCall, variables: Mapping[str, Any], label: str
    ) -> ToolCall:
        args = {key: render_value(value, variables, label) for key, value in call.args.items()}
        return ToolCall(id=f"{self._call_prefix}{next(self._call_ids)}", name=call.tool, args=args)


def _newest_non_system(messages: Sequence[Message]) -> Message | None:
    for message in reversed(messages):
        if message.role != "system":
            return message
    return None


def _latest_user_text(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            return message.content
    return ""


def _match(when: ScriptCondition | None, newest: Message | None) -> dict[str, Any] | None:
    """Template variables when ``when`` matches ``newest``, else ``None``."""
    variables: dict[str, Any] = {}
    if when is None:
        if newest is not None and newest.role == "tool":
            _add_result(variables, newest)
        return variables
    if when.input is not None and not _match_input(when.input, newest, variables):
        return None
    asks_result = when.tool_result is not None or when.status is not None
    if (asks_result or when.output is not None) and not _match_result(when, newest, variables):
        return None
    return variables


def _match_input(pattern: str, newest: Message | None, variables: dict[str, Any]) -> bool:
    """Whether ``newest`` is a user message ``pattern`` finds (its groups then added)."""
    if newest is None or newest.role != "user":
        return False
    return _search(pattern, newest.content, variables)


def _match_result(when: ScriptCondition, newest: Message | None, variables: dict[str, Any]) -> bool:
    """Whether ``newest`` is the tool result ``when`` asks for (its fields then added)."""
    if newest is None or newest.role != "tool":
        return False
    if when.tool_result is not None and newest.source.tool_name != when.tool_result:
        return False
    result = newest.tool_result or {}
    if when.status is not None and result.get("status") != when.status:
        return False
    _add_result(variables, newest)
    return when.output is None or _search(when.output, _as_text(result.get("output")), variables)


def _search(pattern: str, text: str, variables: dict[str, Any]) -> bool:
    found = re.search(pattern, text)
    if found is not None:
        _add_groups(variables, found)
    return found is not None


def _add_groups(variables: dict[str, Any], found: re.Match[str]) -> None:
    variables[str(0)] = found.group(0)
    for number, value in enumerate(found.groups(), start=1):
        variables[str(number)] = value if value is not None else ""
    for name, value in found.groupdict().items():
        variables[name] = value if value is not None else ""


def _add_result(variables: dict[str, Any], message: Message) -> None:
    result = message.tool_result or {}
    variables["result"] = result.get("output")
    error = result.get("error")
    variables["error"] = error.get("message", "") if isinstance(error, dict) else ""
    variables["errorCode"] = error.get("code", "") if isinstance(error, dict) else ""
    variables["status"] = result.get("status", "")


def _as_text(value: JsonValue) -> str:
    return (
        value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    )


_CASTS: dict[str, Callable[[str], Any]] = {
    "int": int,
    "number": float,
    "str": str,
    "json": json.loads,
}


def _lookup(expression: str, variables: Mapping[str, Any], label: str) -> Any:
    expression, _, cast = expression.strip().partition(":")
    value = _resolve(expression.strip(), variables, label)
    if not cast:
        return value
    convert = _CASTS.get(cast.strip())
    if convert is None:
        raise ScriptTemplateError(
            f"script rule {label}: unknown conversion ':{cast}' (use {', '.join(_CASTS)})"
        )
    try:
        return convert(value if isinstance(value, str) or cast == "str" else json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ScriptTemplateError(
            f"script rule {label}: cannot convert {value!r} with ':{cast}': {exc}"
        ) from None


def _resolve(expression: str, variables: Mapping[str, Any], label: str) -> Any:
    segments = _PATH_SEGMENT.findall(expression)
    if not segments:
        raise ScriptTemplateError(f"script rule {label}: empty placeholder '{{{expression}}}'")
    head, _ = segments[0]
    if head not in variables:
        raise ScriptTemplateError(
            f"script rule {label}: '{{{expression}}}' names {head!r}, which is not available "
            f"here (available: {', '.join(sorted(variables))})"
        )
    value = variables[head]
    for key, index in segments[1:]:
        child = _child(value, key, index)
        if child is _MISSING:
            raise ScriptTemplateError(
                f"script rule {label}: '{{{expression}}}' does not resolve "
                f"(no {key or '[' + index + ']'!s} in {_as_text(value)[:200]})"
            )
        value = child
    return value


_MISSING = object()


def _child(value: Any, key: str, index: str) -> Any:
    """``value[key]`` or ``value[index]`` (one path segment names one); :data:`_MISSING`
    when there is no such member."""
    if key and isinstance(value, dict) and key in value:
        return value[key]
    if index and isinstance(value, list) and int(index) < len(value):
        return value[int(index)]
    return _MISSING


def render_text(template: str, variables: Mapping[str, Any], label: str) -> str:
    """Fill every placeholder of ``template``; non-string values are rendered as JSON."""

    def substitute(found: re.Match[str]) -> str:
        token = found.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        value = _lookup(found.group(1), variables, label)
        return value if isinstance(value, str) else _as_text(value)

    return _PLACEHOLDER.sub(substitute, template)


def render_value(value: Any, variables: Mapping[str, Any], label: str) -> JsonValue:
    """Render an argument: strings are templates, containers are rendered item by item."""
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value)
        if whole is not None and whole.group(1) is not None:
            return _lookup(whole.group(1), variables, label)  # type: ignore[no-any-return]
        return render_text(value, variables, label)
    if isinstance(value, dict):
        return {str(k): render_value(v, variables, label) for k, v in value.items()}
    if isinstance(value, list):
        return [render_value(v, variables, label) for v in value]
    return value  # type: ignore[no-any-return]


def _describe(message: Message | None) -> str:
    if message is None:
        return "an empty conversation"
    if message.role == "tool":
        status = (message.tool_result or {}).get("status")
        return f"the result of {message.source.tool_name!r} (status {status!r})"
    return f"the {message.role} message {message.content[:120]!r}"
