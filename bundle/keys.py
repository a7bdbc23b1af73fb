"""The API keys a swarm's Models need, and where each comes from (names only, never values)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bundle.spec_agent import ModelSpec

if TYPE_CHECKING:
    from bundle.bundle import Bundle

PROVIDER_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    # google-genai also reads GOOGLE_API_KEY; one name keeps `doctor` and the agents' own
    # environments in step (a Model can still name GOOGLE_API_KEY in apiKey.valueFrom.env).
    "google": "GEMINI_API_KEY",
}
"""The variable a provider's SDK reads when the Model names no ``apiKey``."""
PROVIDER_SETTINGS_ENV = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"),
    "anthropic": ("ANTHROPIC_BASE_URL",),
    "google": ("GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_API_VERSION"),
}
"""Variables a provider's SDK reads besides the key (where to call, on whose account); the
base URL's only when the Model names no ``baseUrl``, which the SDK takes instead."""


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
