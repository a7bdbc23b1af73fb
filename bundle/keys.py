"""The API keys a swarm's Models need, and where each comes from (names only, never values)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bundle.provider_env import PROVIDER_KEY_ENV as PROVIDER_KEY_ENV
from bundle.provider_env import PROVIDER_SETTINGS_ENV as PROVIDER_SETTINGS_ENV
from bundle.spec_agent import ModelSpec

if TYPE_CHECKING:
    from bundle.bundle import Bundle


@dataclass(frozen=True, slots=True)
class KeyNeed:
    """One Model's key: the environment variable it is read from, and who uses the Model."""

    model: str
    provider: str
    variable: str
    agents: tuple[str, ...]

    def present(self, environ: Mapping[str, str]) -> bool:
        """Whether ``environ`` holds a non-empty value for it."""
        return bool(environ.get(self.variable, "").strip())


def key_needs(bundle: Bundle, swarm_name: str | None = None) -> list[KeyNeed]:
    """The environment variables the swarm's Models read their API keys from.

    A Model with ``apiKey.valueFrom.env`` needs that variable; one with no ``apiKey`` needs
    its provider's usual variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``) unless it
    talks to a ``baseUrl`` of its own (local servers ignore the key). Literal keys, secret
    references and the offline ``scripted`` provider need nothing from the environment.
    """
    users: dict[str, list[str]] = {}
    specs: dict[str, ModelSpec] = {}
    for agent in bundle.swarm_agents(bundle.swarm(swarm_name)):
        model = bundle.resolve_ref(agent.spec.model_config_.model_ref, agent)
        users.setdefault(model.name, []).append(agent.name)
        specs[model.name] = model.spec
    needs = []
    for name, spec in specs.items():
        variable: str | None = None
        if spec.api_key is not None:
            source = spec.api_key.value_from
            variable = source.env if source is not None else None
        elif (spec.base_url or spec.endpoint) is None:
            variable = PROVIDER_KEY_ENV.get(spec.provider)
        if variable is not None:
            needs.append(KeyNeed(name, spec.provider, variable, tuple(users[name])))
    return needs
