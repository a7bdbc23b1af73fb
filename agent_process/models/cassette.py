"""Model calls recorded to, or answered from, a cassette: the provider seam under test.

``goondan test`` runs a swarm whose Models go through :class:`CassetteModel`:

- **record**: each call goes to the real provider; the agent, the conversation (its
  instance key), the Step, the request (system prompt, messages, tool catalog, sampling) and
  its answer (text, tool calls, finish reason, usage, and the streamed pieces when the call
  was streamed) are appended to ``<work_dir>/<agent>.yaml``, one YAML
  document per call, multi-line text as block scalars so a changed line shows as one line
  in a diff. Only the request the provider is given is written, never its client's headers or
  API key, and it is written :func:`masked`, so recording an unchanged case again rewrites
  its cassette unchanged (but for what the provider itself generates, such as call ids).
- **replay**: no provider is built and nothing leaves the process. A call is answered by the
  recorded call whose request is the same once :func:`masked`, which blanks what the runtime
  itself generates and shows the model (correlation, event and trace ids, timestamps) and
  puts the results of one Step's tool calls in their calls' order. A request with no recorded
  answer fails the Turn with a diff against the closest recorded request of the same agent,
  also written to ``<work_dir>/misses/``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import hashlib
import json
import re
import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from agent_process.models.base import ChatModel, ModelCallError, ModelRequest, ModelResponse
from agent_process.models.base import TokenUsage as Usage
from bundle.cassette_plan import CassettePlan
from tools_base import JsonObject, JsonValue, ToolCall

MAX_DIFF_LINES = 60
"""Lines of a miss's diff carried in the Turn's error (the whole diff is in the misses file)."""

VOLATILE_METADATA = frozenset({"latencyMs"})
"""Metadata of an answer a cassette does not keep."""

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bcorr_[0-9a-f]{8,}\b"), "corr_<id>"),
    (re.compile(r"\bagent_event_[0-9a-f]{8,}\b"), "agent_event_<id>"),
    (re.compile(r"\bturn-[0-9a-f]{8,}\b"), "turn-<id>"),
    (re.compile(r"\bapr_[0-9a-f]{8,}\b"), "apr_<id>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<trace-id>"),
    (re.compile(r"\b[0-9a-f]{16}\b"), "<span-id>"),
    (
        re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?"),
        "<time>",
    ),
    (re.compile(r'("(?:durationMs|elapsedMs|latencyMs)":\s*)[0-9.]+'), r"\1<ms>"),
)
"""What the runtime generates and shows the model, blanked before requests are compared."""


def request_document(request: ModelRequest) -> JsonObject:
    """The provider-neutral form of ``request`` a cassette keeps: what the model is shown."""
    messages: list[JsonValue] = [m.data for m in request.messages]
    tools: list[JsonValue] = [
        {"name": t.name, "description": t.description, "parameters": t.parameters}
        for t in request.tools
    ]
    return {
        "messages": messages,
        "tools": tools,
        "temperature": request.temperature,
        "maxTokens": request.max_tokens,
    }


def masked(document: JsonObject) -> JsonObject:
    """``document`` with the runtime's generated values blanked and each run of tool results
    in the order of their call ids (parallel calls finish in any order)."""
    text = json.dumps(document, ensure_ascii=False)  # in its own order: it is also written
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    out: JsonObject = json.loads(text)
    messages = out.get("messages")
    if isinstance(messages, list):
        out["messages"] = _tool_results_in_call_order(messages)
    return out


def _tool_results_in_call_order(messages: list[JsonValue]) -> list[JsonValue]:
    ordered: list[JsonValue] = []
    run: list[JsonValue] = []
    for message in [*messages, None]:
        if isinstance(message, dict) and message.get("role") == "tool":
            run.append(message)
            continue
        ordered += sorted(run, key=lambda m: json.dumps(m, sort_keys=True))
        run = []
        if message is not None:
            ordered.append(message)
    return ordered


def request_key(document: JsonObject) -> str:
    """The key a recorded call is found by: a digest of the masked request."""
    text = json.dumps(masked(document), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def render(document: JsonObject) -> str:
    """``document`` as YAML a person reads and diffs: block scalars for multi-line text."""
    return yaml.dump(document, Dumper=_BlockDumper, sort_keys=False, allow_unicode=True, width=100)


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings as ``|`` blocks."""


def _represent_text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and not any(c in value for c in "\r\t\x0b\x0c") and value == value.strip(" "):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_BlockDumper.add_representer(str, _represent_text)


def response_document(response: ModelResponse, chunks: list[str] | None) -> JsonObject:
    """What a cassette keeps of an answer."""
    out: JsonObject = {
        "text": response.text,
        "toolCalls": [call.to_json() for call in response.tool_calls],
        "finishReason": response.finish_reason,
    }
    if response.usage is not None:
        usage: JsonObject = {
            "promptTokens": response.usage.prompt_tokens,
            "completionTokens": response.usage.completion_tokens,
        }
        if response.usage.cost is not None:
            usage["cost"] = response.usage.cost
        out["usage"] = usage
    # How long the call took changes on every recording and tells a reviewer nothing.
    metadata = {k: v for k, v in response.metadata.items() if k not in VOLATILE_METADATA}
    if metadata:
        out["metadata"] = metadata
    if chunks is not None:
        out["chunks"] = list(chunks)
    return out


def response_of(document: JsonObject) -> tuple[ModelResponse, list[str] | None]:
    """The answer a cassette recorded, and its streamed pieces when it was streamed."""
    usage_doc = document.get("usage")
    usage = None
    if isinstance(usage_doc, dict):
        cost = usage_doc.get("cost")
        usage = Usage(
            prompt_tokens=int(str(usage_doc.get("promptTokens", 0))),
            completion_tokens=int(str(usage_doc.get("completionTokens", 0))),
            cost=float(cost) if isinstance(cost, int | float) else None,
        )
    calls_doc = document.get("toolCalls")
    calls = tuple(
        ToolCall(
            id=str(call.get("id", "")),
            name=str(call.get("name", "")),
            args=dict(args) if isinstance(args := call.get("args"), dict) else {},
            malformed_arguments=(
                str(call["malformedArguments"]) if "malformedArguments" in call else None
            ),
        )
        for call in (calls_doc if isinstance(calls_doc, list) else [])
        if isinstance(call, dict)
    )
    metadata = document.get("metadata")
    chunks = document.get("chunks")
    response = ModelResponse(
        text=str(document.get("text") or ""),
        tool_calls=calls,
        finish_reason=str(document.get("finishReason") or "stop"),
        usage=usage,
        metadata=dict(metadata) if isinstance(metadata, dict) else {},
    )
    return response, ([str(c) for c in chunks] if isinstance(chunks, list) else None)


def read_cassette(path: Path) -> list[JsonObject]:
    """The recorded calls of a cassette file (none when it does not exist)."""
    if not path.is_file():
        return []
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [doc for doc in yaml.load_all(path.read_text(), Loader=loader) if isinstance(doc, dict)]


class CassetteModel:
    """A :class:`ChatModel` that records the calls of ``agent`` or answers them from a
    cassette (see the module's docstring). ``provider`` builds the real model; it is called
    only when recording."""

    def __init__(self, plan: CassettePlan, agent: str, provider: Callable[[], ChatModel]) -> None:
        self.plan = plan
        self.agent = agent
        self.work_dir = Path(plan.work_dir)
        self._provider = provider() if plan.mode == "record" else None
        self._calls = 0
        self._lock = asyncio.Lock()
        self._recorded: dict[str, deque[JsonObject]] = defaultdict(deque)
        self._requests: list[JsonObject] = []
        self._unreadable: str | None = None
        if plan.mode == "replay":
            try:
                entries = read_cassette(Path(plan.path))
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                # Every call fails with the reason, rather than the agent failing to boot.
                self._unreadable = f"the cassette {plan.path} cannot be read: {exc}"
                entries = []
            for entry in entries:
                request = entry.get("request")
                if entry.get("agent") == agent and isinstance(request, dict):
                    self._recorded[request_key(request)].append(entry)
                    self._requests.append(request)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer from the cassette, or call the provider and record the answer."""
        document = request_document(request)
        if self._unreadable is not None:
            raise ModelCallError(self._unreadable)
        if self._provider is None:
            return self._replay(request, document)
        chunks: list[str] | None = None
        if request.on_text is not None:
            chunks, forward = [], request.on_text

            def on_text(piece: str) -> None:
                chunks.append(piece)
                forward(piece)

            request = dataclasses.replace(request, on_text=on_text)
        response = await self._provider.complete(request)
        async with self._lock:
            self._calls += 1
            entry: JsonObject = {
                "agent": self.agent,
                "conversation": request.conversation,
                "call": self._calls,
                "step": _step_of(document),
                # Masked as it is compared: re-recording an unchanged case rewrites it unchanged.
                "request": masked(document),
                "response": response_document(response, chunks),
            }
            self.work_dir.mkdir(parents=True, exist_ok=True)
            with (self.work_dir / f"{self.agent}.yaml").open("a", encoding="utf-8") as out:
                out.write("---\n" + render(entry))
        return response

    def _replay(self, request: ModelRequest, document: JsonObject) -> ModelResponse:
        found = self._recorded.get(request_key(document))
        if not found:
            raise ModelCallError(self._miss(document))
        entry = found.popleft() if len(found) > 1 else found[0]
        recorded = entry.get("response")
        response, chunks = response_of(recorded if isinstance(recorded, dict) else {})
        if request.on_text is not None:
            for piece in chunks if chunks is not None else [response.text]:
                if piece:
                    request.on_text(piece)
        return response

    def _miss(self, document: JsonObject) -> str:
        """Describe a request with no recorded answer (and keep the description for the
        runner): the diff between the closest recorded request and this one."""
        now = render(masked(document)).splitlines()
        closest: list[str] | None = None
        best = -1.0
        for recorded in self._requests:
            lines = render(masked(recorded)).splitlines()
            ratio = difflib.SequenceMatcher(None, lines, now, autojunk=False).ratio()
            if ratio > best:
                closest, best = lines, ratio
        where = f"agent {self.agent!r}, cassette {self.plan.path}"
        if closest is None:
            text = f"no recorded model call of {where}: record the case (--record)"
        else:
            diff = list(
                difflib.unified_diff(closest, now, "recorded request", "this request", lineterm="")
            )
            shown = diff[:MAX_DIFF_LINES]
            if len(diff) > MAX_DIFF_LINES:
                shown.append(f"... ({len(diff) - MAX_DIFF_LINES} more lines)")
            text = (
                f"no recorded model call of {where} matches this request; "
                "the closest recorded one differs:\n" + "\n".join(shown)
            )
        misses = self.work_dir / "misses"
        misses.mkdir(parents=True, exist_ok=True)
        # Named by time, so the runner lists the misses of every agent in the order they
        # happened: the first is the cause, the later ones often its consequences.
        name = f"{time.time_ns():020d}-{self.agent}.txt"
        (misses / name).write_text(text + "\n", encoding="utf-8")
        return text


def _step_of(document: JsonObject) -> int:
    """The Step of the Turn a request belongs to: 1 + the assistant messages since the last
    user message."""
    messages = document.get("messages")
    step = 1
    for message in reversed(messages if isinstance(messages, list) else []):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "user":
            break
        step += role == "assistant"
    return step
