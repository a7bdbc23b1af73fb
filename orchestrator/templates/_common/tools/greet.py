"""The swarm's own tool: ``greet__hello`` (declared in goondan.yaml as Tool/greet).

``@tool`` makes a handler of a typed function: the call's arguments are checked against the
hints (a wrong one is a structured error naming the field) and passed as parameters.
`python -m orchestrator tool schema tools/greet.py:hello` prints the export entry the hints
and the docstring describe; `validate` warns if goondan.yaml's entry disagrees with them.
Raising ToolError gives the model a structured error of your own.
"""

from tools_base import JsonValue, ToolContext, ToolError, nonblocking, tool


@tool
@nonblocking  # quick and pure: it runs on the agent's loop, no thread hop
def hello(ctx: ToolContext, name: str) -> JsonValue:
    """Greet someone by name.

    Args:
        name: The name to greet.
    """
    name = name.strip()
    if not name:
        raise ToolError("name is empty", code="E_GREET_NAME", suggestion="Pass a name.")
    return {"greeting": f"Hello, {name}!"}


handlers = {"hello": hello}
