"""The Tool system inside an AgentProcess: naming, registry, catalog, middleware, executor.

Registry = every handler the process can run; Catalog = what the model sees this Step (an
allowlist the executor enforces); the ``toolCall`` middleware onion wraps every call; every
failure becomes a ``ToolCallResult`` with ``status="error"``.
"""

from agent_process.tools.catalog import (
    McpSource,
    ToolCatalogItem,
    ToolSource,
    build_catalog,
    catalog_names,
)
from agent_process.tools.executor import (
    PendingCompletion,
    ToolCallPolicy,
    ToolExecutor,
    to_json_value,
)
from agent_process.tools.middleware import (
    MiddlewareContext,
    MiddlewareError,
    MiddlewarePipeline,
    StepMiddlewareContext,
    ToolCallMiddlewareContext,
)
from agent_process.tools.naming import (
    ToolName,
    build_tool_name,
    is_valid_tool_name,
    parse_tool_name,
)
from agent_process.tools.registry import RegisteredTool, ToolRegistrationError, ToolRegistry
from agent_process.tools.results import error_result, exception_result

__all__ = [
    "McpSource",
    "MiddlewareContext",
    "MiddlewareError",
    "MiddlewarePipeline",
    "PendingCompletion",
    "RegisteredTool",
    "StepMiddlewareContext",
    "ToolCallMiddlewareContext",
    "ToolCallPolicy",
    "ToolCatalogItem",
    "ToolExecutor",
    "ToolName",
    "ToolRegistrationError",
    "ToolRegistry",
    "ToolSource",
    "build_catalog",
    "build_tool_name",
    "catalog_names",
    "error_result",
    "exception_result",
    "is_valid_tool_name",
    "parse_tool_name",
    "to_json_value",
]
