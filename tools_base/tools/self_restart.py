"""``self-restart``: restart this swarm on its configuration as it is on disk now.

Export ``request``: ``reason`` (optional text for logs) → ``{ok: true, restartRequested:
true, restartReason}``; ``restartReason`` is the trimmed reason, or ``"tool:self-restart"``
when it is missing or blank.

Before it answers, the tool asks the Orchestrator whether the configuration on disk (goondan.yaml
and the files it names, edited since the swarm started or not) is valid. If it is not, the call
fails with the first error's code (``E_CONFIG_...``) and every error in its message; nothing
restarts and the swarm keeps running on the configuration it has. If it is, the runtime acts
on the output (``restartRequested: true``) once the Turn has answered: the configuration is
read again and adopted the way ``run --watch`` adopts an edit (every agent whose plan changed
restarts with it, new agents become available, removed ones stop, Connections follow), and
the calling agent restarts in any case. Conversations are kept. Where no Orchestrator is
attached (``ctx.runtime`` without the check), the tool only answers. No config.
"""

from __future__ import annotations

import re

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler
from tools_base.tools._common import optional_string

DEFAULT_REASON = "tool:self-restart"
_CODE = re.compile(r"\((E_[A-Z0-9_]+)\)(?=\n|$)")


async def request(ctx: ToolContext, input: JsonObject) -> JsonValue:
    """``request``: ask for a restart, refused while the configuration on disk is invalid."""
    reason = (optional_string(input, "reason") or "").strip()
    check = getattr(ctx.runtime, "check_config", None)
    errors = list(await check()) if check is not None else []
    if errors:
        found = _CODE.search(errors[0])
        listed = "\n".join(f"- {error}" for error in errors)
        raise ToolError(
            f"restart refused: the configuration on disk has {len(errors)} error(s); the swarm "
            f"keeps running on the configuration it has.\n{listed}",
            code=found.group(1) if found else ToolCode.E_TOOL,
            suggestion="Fix the configuration files, then ask for the restart again.",
        )
    return {"ok": True, "restartRequested": True, "restartReason": reason or DEFAULT_REASON}


handlers: dict[str, ToolHandler] = {"request": request}
