"""``kind: Extension``, ``kind: Connector`` and ``kind: Connection``: modules that extend
agents, turn outside events into swarm input, and bind a connector to a swarm."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from bundle.env_names import EnvNames
from bundle.spec_base import ObjectRef, Spec, ValueSource


class ExtensionSpec(Spec):
    """``kind: Extension``: a module with `register(api)`."""

    entry: str = Field(description="Extension module, relative to the declaring file.")
    config: dict[str, Any] = Field(default_factory=dict, description="Extension settings.")
    env: EnvNames


class EventProperty(Spec):
    """A property of a connector event."""

    type: Literal["string", "number", "boolean"] = Field(description="JSON type of the value.")
    optional: bool = Field(default=False, description="Whether events may omit it.")


class ConnectorEventDeclaration(Spec):
    """An event a Connector declares it emits (its name and properties), as goondan.yaml
    writes it; what a running connector emits is :class:`tools_base.ConnectorEvent`."""

    name: str = Field(description="Event name, unique within the Connector.")
    properties: dict[str, EventProperty] = Field(
        default_factory=dict, description="Properties the event carries, by name."
    )

    @field_validator("name")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("event name must not be blank")
        return value


class ConnectorSpec(Spec):
    """``kind: Connector``: a module that turns outside events into swarm input."""

    entry: str = Field(description="Connector module, relative to the declaring file.")
    events: list[ConnectorEventDeclaration] = Field(
        min_length=1, description="Events it emits (at least one; names unique)."
    )
    env: EnvNames
    required_settings: list[str | list[str]] = Field(
        default_factory=list,
        max_length=64,
        description="Settings it cannot start without, each a name or a list of names any one "
        "of which will do, looked up as ctx.setting does: a Connection's secrets, its config, "
        "then the environment (names in `env` only). `doctor` and `run` check them.",
    )


class IngressMatch(Spec):
    """Which events a rule takes."""

    event: str | None = Field(default=None, description="Event name; omitted matches any event.")
    properties: dict[str, Any] = Field(
        default_factory=dict, description="Property values the event must carry."
    )


class IngressRoute(Spec):
    """Where a matched event goes."""

    agent_ref: ObjectRef | None = Field(
        default=None, description="Target agent (one of a swarm's agents); default: entryAgent."
    )
    instance_key: str | None = Field(default=None, description="Fixed instance key.")
    instance_key_prefix: str | None = Field(
        default=None, description="Prefix put before the instance key."
    )
    instance_key_property: str | None = Field(
        default=None, description="Event property whose value is the instance key."
    )

    @model_validator(mode="after")
    def _one_key_rule(self) -> IngressRoute:
        if self.instance_key is not None and self.instance_key_property is not None:
            raise ValueError("give `instanceKey` or `instanceKeyProperty`, not both")
        return self


class IngressRule(Spec):
    """One routing rule; the first match wins."""

    match: IngressMatch = Field(default_factory=IngressMatch, description="Which events.")
    route: IngressRoute = Field(default_factory=IngressRoute, description="Where they go.")


class Ingress(Spec):
    """Routing of a connection's events."""

    rules: list[IngressRule] = Field(default_factory=list, description="Tried in order.")


class ConnectionSpec(Spec):
    """``kind: Connection``: binds a connector to a swarm."""

    connector_ref: ObjectRef = Field(description="The Connector, e.g. Connector/slack.")
    swarm_ref: ObjectRef | None = Field(
        default=None, description="Only bind when this Swarm runs; omitted binds to any swarm."
    )
    config: dict[str, ValueSource] = Field(
        default_factory=dict, description="Connector settings (value or valueFrom)."
    )
    secrets: dict[str, ValueSource] = Field(
        default_factory=dict, description="Connector secrets (prefer valueFrom)."
    )
    verify: dict[str, Any] = Field(
        default_factory=dict, description="Webhook verification settings (reserved)."
    )
    ingress: Ingress = Field(default_factory=Ingress, description="Event routing rules.")
