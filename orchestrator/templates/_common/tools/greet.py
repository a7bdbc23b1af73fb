"""The swarm's own tool: ``greet__hello`` (declared in goondan.yaml as Tool/greet).

A handler takes the call's context and its arguments (already checked against the export's
JSON Schema) and returns JSON; raising ToolError gives the model a structured error instead.
"""

from tools_base import JsonObject, JsonValue, ToolContext, ToolError, nonblocking


@nonblocking  # quick and pure: it runs on the agent's loop, no thread hop
def hello(ctx: ToolContext, input: JsonObject) -> JsonValue:
    name = str(input["name"]).strip()
    if not name:
        raise ToolError("name is empty", code="E_GREET_NAME", suggestion="Pass a name.")
    return {"greeting": f"Hello, {name}!"}


handlers = {"hello": hello}
