"""Where a connector's event goes: a Connection's ``ingress.rules``, first match wins.

A rule matches an event when its ``match.event`` is absent or equals the event's name, and
every ``match.properties`` entry equals the event's property of that name (compared as text:
``true`` in YAML matches the property ``"true"``). The matched rule's route names the agent
(``agentRef``, else the swarm's entry agent) and the instance key: ``route.instanceKey`` when
set, else ``instanceKeyPrefix`` + the property named by ``instanceKeyProperty`` when that
property is not empty, else the event's own instance key. An event no rule matches is not
dropped: it goes to the entry agent under its own instance key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bundle.spec_connector import Ingress, IngressRule


@dataclass(frozen=True, slots=True)
class Destination:
    """The agent and conversation an event is delivered to."""

    agent: str
    instance_key: str
    rule: int | None
    """Index of the rule that matched; ``None`` when none did (the entry agent takes it)."""


class UnknownIngressAgent(ValueError):
    """A rule routes to an agent outside the swarm."""


def as_text(value: Any) -> str:
    """A YAML scalar as an event property would carry it (``True`` → ``"true"``, ``1.0`` →
    ``"1"``), so rules written naturally in YAML match."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value is None:
        return ""
    return str(value)


@dataclass(frozen=True, slots=True)
class IngressTable:
    """The compiled ``ingress.rules`` of one Connection."""

    rules: tuple[IngressRule, ...]
    entry_agent: str

    @classmethod
    def of(cls, ingress: Ingress, entry_agent: str, agents: Iterable[str]) -> IngressTable:
        """The table of ``ingress``; raises :class:`UnknownIngressAgent` when a rule routes to
        an agent that is not one of ``agents``."""
        members = set(agents)
        for index, rule in enumerate(ingress.rules):
            ref = rule.route.agent_ref
            if ref is not None and ref.name not in members:
                raise UnknownIngressAgent(
                    f"ingress.rules[{index}].route.agentRef: {ref} is not an agent of the swarm "
                    f"(agents: {', '.join(sorted(members))})"
                )
        return cls(tuple(ingress.rules), entry_agent)

    def route(self, name: str, properties: Mapping[str, str], instance_key: str) -> Destination:
        """Where the event ``name`` with ``properties`` and its own ``instance_key`` goes."""
        for index, rule in enumerate(self.rules):
            if _matches(rule, name, properties):
                return Destination(
                    rule.route.agent_ref.name if rule.route.agent_ref else self.entry_agent,
                    _instance_key(rule, properties, instance_key),
                    index,
                )
        return Destination(self.entry_agent, instance_key, None)


def _matches(rule: IngressRule, name: str, properties: Mapping[str, str]) -> bool:
    match = rule.match
    if match.event is not None and match.event != name:
        return False
    return all(
        key in properties and properties[key] == as_text(wanted)
        for key, wanted in match.properties.items()
    )


def _instance_key(rule: IngressRule, properties: Mapping[str, str], own: str) -> str:
    route = rule.route
    if route.instance_key is not None and route.instance_key.strip():
        return route.instance_key.strip()
    if route.instance_key_property is not None:
        value = properties.get(route.instance_key_property, "")
        if value:
            return (route.instance_key_prefix or "") + value
    return own
