"""Where an agent's model calls are recorded to or answered from under ``goondan test``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class CassettePlan(BaseModel):
    """A test case's cassette, as the agent processes of its swarm read it.

    ``replay``: every model call is answered from ``path`` and no provider is reached; a call
    with no recorded answer fails its Turn. ``record``: every call goes to the real provider
    and the request with its answer is written under ``work_dir`` (``<agent>.yaml``), which
    the runner gathers into ``path``. A call with no recorded answer is described under
    ``work_dir/misses/``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["record", "replay"]
    path: str
    """The case's cassette file."""
    work_dir: str
    """Where each agent writes what it recorded and the calls it could not answer."""
