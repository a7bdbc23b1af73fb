"""``spec.env``: the environment variables a Tool, Extension, Agent or Connector reads by name.

Each entry is a variable's name, or a prefix followed by ``*`` for every name with that prefix
(``AWS_*``). A bare ``*``, or anything else that is no name, is refused: the list says exactly
what of the daemon's environment its process may hold (see ``bundle.environment``).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\*?$")
"""An environment variable's name, or a prefix of names followed by ``*`` (``AWS_*``)."""
MAX_ENV_NAMES = 256
MAX_ENV_NAME_LENGTH = 255


def _env_name(value: str) -> str:
    if len(value) > MAX_ENV_NAME_LENGTH or not ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable name or a NAME* prefix")
    return value


EnvNames = Annotated[
    list[Annotated[str, AfterValidator(_env_name)]],
    Field(
        default_factory=list,
        max_length=MAX_ENV_NAMES,
        description="Environment variables its code reads that no valueFrom names (NAME, or "
        "PREFIX* for every name with that prefix): the agent or connector process gets them "
        "from the daemon's environment, and no other variable beyond the usual few.",
    ),
]
"""The type of a ``spec.env`` field."""
