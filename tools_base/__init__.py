"""The Goondan Tool SDK and the ``@goondan/base`` tool pack.

Tool authors import everything they need from here::

    from tools_base import ToolContext, ToolError

    def echo(ctx: ToolContext, input: dict) -> dict:
        return {"text": input["text"]}

    handlers = {"echo": echo}

or let the hints say what the arguments are: ``@tool`` validates them and describes them
(``goondan tool schema`` prints the ``exports`` entry)::

    from tools_base import ToolContext, tool

    @tool
    def echo(ctx: ToolContext, text: str, times: int = 1) -> dict:
        return {"text": text * times}

The built-in tools live in :mod:`tools_base.tools` and are declared by the package manifest
``tools_base/goondan.yaml`` (package ``@goondan/base``); the runtime loads them exactly like
user tools.
"""

from tools_base._connector import (
    ConnectorContext,
    ConnectorError,
    ConnectorEvent,
    ConnectorMessage,
    FileMessage,
    ImageMessage,
    TextMessage,
    TurnAnswer,
)
from tools_base._context import (
    ToolConfigError,
    ToolConfigure,
    ToolContext,
    ToolHandler,
    ToolLogger,
    ToolOutput,
    is_nonblocking,
    nonblocking,
)
from tools_base._extension import (
    AgentInfo,
    ExtensionApi,
    ExtensionError,
    ExtensionEvents,
    ExtensionPipeline,
    ExtensionState,
    ExtensionTools,
)
from tools_base._json import JsonArray, JsonObject, JsonPrimitive, JsonValue
from tools_base._message import (
    Message,
    MessageEvent,
    MessageEventType,
    MessageRole,
    MessageSource,
    ToolCall,
)
from tools_base._result import (
    DEFAULT_ERROR_MESSAGE_LIMIT,
    PendingResult,
    ToolCallResult,
    ToolError,
    ToolErrorInfo,
    ToolResult,
    ToolStatus,
    truncate_error_message,
)
from tools_base._runtime import (
    AgentCatalogResult,
    AgentEvent,
    AgentListResult,
    AgentRequestResult,
    AgentSendResult,
    AgentSpawnResult,
    AgentToolRuntime,
    SpawnedAgentInfo,
)
from tools_base._tool import ToolSignatureError, tool, tool_export

PACKAGE_NAME = "@goondan/base"
"""The package name user bundles use to reference the built-in tools."""

__all__ = [
    "DEFAULT_ERROR_MESSAGE_LIMIT",
    "PACKAGE_NAME",
    "AgentCatalogResult",
    "AgentEvent",
    "AgentInfo",
    "AgentListResult",
    "AgentRequestResult",
    "AgentSendResult",
    "AgentSpawnResult",
    "AgentToolRuntime",
    "ConnectorContext",
    "ConnectorError",
    "ConnectorEvent",
    "ConnectorMessage",
    "ExtensionApi",
    "ExtensionError",
    "ExtensionEvents",
    "ExtensionPipeline",
    "ExtensionState",
    "ExtensionTools",
    "FileMessage",
    "ImageMessage",
    "JsonArray",
    "JsonObject",
    "JsonPrimitive",
    "JsonValue",
    "Message",
    "MessageEvent",
    "MessageEventType",
    "MessageRole",
    "MessageSource",
    "PendingResult",
    "SpawnedAgentInfo",
    "TextMessage",
    "ToolCall",
    "ToolCallResult",
    "ToolConfigError",
    "ToolConfigure",
    "ToolContext",
    "ToolError",
    "ToolErrorInfo",
    "ToolHandler",
    "ToolLogger",
    "ToolOutput",
    "ToolResult",
    "ToolSignatureError",
    "ToolStatus",
    "TurnAnswer",
    "is_nonblocking",
    "nonblocking",
    "tool",
    "tool_export",
    "truncate_error_message",
]
