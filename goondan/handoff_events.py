"""The event types of a handoff: what one agent hands another, as seed 000's ``agents`` tool
names them.

They live on the ground floor because the tool that builds them (``tools_base``) and the runtime
that routes and records them (``ipc.runtime_events``) both need the same spelling, and neither may
import the other.
"""

from __future__ import annotations

AGENT_REQUEST = "agent.request"
"""A handoff the asking agent waits on (``agents__request``)."""

AGENT_SEND = "agent.send"
"""A handoff the sending agent does not wait on (``agents__send``)."""
