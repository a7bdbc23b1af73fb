"""The rules of ``kind: RemoteAgent`` and of a Swarm listing one (see :mod:`bundle.spec_remote`):
the client it needs is installed, and a swarm's agents are Agents or RemoteAgents, with names
a delegate can tell apart, the remote ones outside what only a local agent has (entry,
placement, front doors, per-use config)."""

from __future__ import annotations

from bundle import errors as E
from bundle.loader import Resource
from bundle.rule_base import FieldPath, RuleChecker, item_path
from bundle.spec_agent import FRONT_DOORS
from bundle.spec_remote import A2A_EXTRA, a2a_client_installed
from bundle.spec_swarm import SwarmSpec

MEMBER_KINDS = ("Agent", "RemoteAgent")
"""What a Swarm's ``agents`` may list."""


def check_remote_agent(checker: RuleChecker, resource: Resource) -> None:
    """A RemoteAgent is called through the ``a2a-sdk``: without it the swarm could not."""
    if not a2a_client_installed():
        checker.report(
            resource,
            E.E_PACKAGE_NOT_INSTALLED,
            "kind RemoteAgent is called through the a2a-sdk, which is not installed",
            ("kind",),
            suggestion=f"install the a2a extra: {A2A_EXTRA}",
        )


def swarm_members(checker: RuleChecker, swarm: Resource, spec: SwarmSpec) -> list[Resource]:
    """The swarm's local Agents that resolve; every listed resource of another kind, remote
    one used as only a local agent can be, or name given twice is reported."""
    local: list[Resource] = []
    names: dict[str, str] = {}
    for i, item in enumerate(spec.agents):
        path = item_path(swarm, "agents", i)
        ref = item.ref
        if ref.kind not in MEMBER_KINDS:
            checker.report(
                swarm,
                E.E_SCHEMA_INVALID,
                f"expected a reference to an Agent or a RemoteAgent, got {ref}",
                path,
                suggestion='write "Agent/<name>" or "RemoteAgent/<name>"',
            )
            continue
        found = checker.resolve(ref, swarm, path)
        if found is None:
            continue
        other = names.setdefault(ref.name, ref.kind)
        if other != ref.kind:
            checker.report(
                swarm,
                E.E_SCHEMA_INVALID,
                f"the swarm lists an Agent and a RemoteAgent both named {ref.name!r}: a "
                "delegate names its target by name alone",
                path,
                suggestion="rename one of them",
            )
        if ref.kind == "Agent":
            local.append(found)
        elif item.config is not None:
            checker.report(
                swarm,
                E.E_SCHEMA_INVALID,
                f"{ref} takes no per-use config",
                (*path[:3], "config"),
                suggestion="remove `config` from this entry",
            )
    return local


def remote_names(spec: SwarmSpec) -> set[str]:
    """The names of the RemoteAgents a swarm lists."""
    return {item.ref.name for item in spec.agents if item.ref.kind == "RemoteAgent"}


def remote_misuse(checker: RuleChecker, swarm: Resource, spec: SwarmSpec) -> None:
    """A RemoteAgent runs nowhere here and is served by no front door: placing or exposing
    one is a mistake."""
    remote = remote_names(spec)
    for agent in spec.placement:
        if agent in remote:
            checker.report(
                swarm,
                E.E_SCHEMA_INVALID,
                f"placement names RemoteAgent {agent!r}, which runs on its own host",
                ("spec", "placement", agent),
                suggestion="place only the swarm's own Agents",
            )
    for door in FRONT_DOORS:
        for i, agent in enumerate(spec.expose.names(door) or ()):
            if agent in remote:
                field: FieldPath = ("spec", "expose", door, i)
                checker.report(
                    swarm,
                    E.E_SCHEMA_INVALID,
                    f"expose.{door} names RemoteAgent {agent!r}; front doors serve local "
                    "agents only",
                    field,
                    suggestion="expose only the swarm's own Agents",
                )


def remote_entry(checker: RuleChecker, swarm: Resource, spec: SwarmSpec) -> bool:
    """Whether ``entryAgent`` names a RemoteAgent (reported: the entry runs the swarm's
    first Turn, here)."""
    entry = spec.entry_agent
    if entry.kind != "RemoteAgent":
        return False
    checker.report(
        swarm,
        E.E_SCHEMA_INVALID,
        f"entryAgent must be a local Agent, got {entry}: a RemoteAgent runs no Turn here",
        ("spec", "entryAgent"),
        suggestion=f"make one of the swarm's Agents the entry, and let it delegate to {entry.name}",
    )
    return True
