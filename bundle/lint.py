"""Warnings: a valid bundle that is probably not what its author meant.

``validate`` prints them; ``validate --strict`` counts them as errors. Each names the file,
line, resource and field, as errors do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bundle.errors import ConfigIssue
from bundle.loader import Resource
from bundle.spec_base import ObjectRef
from bundle.tool_hints import handler_hint_warnings

if TYPE_CHECKING:
    from bundle.bundle import Bundle

W_UNUSED = "W_CONFIG_UNUSED_RESOURCE"
W_LITERAL_SECRET = "W_CONFIG_LITERAL_SECRET"
_REFERABLE = ("Model", "Tool", "Extension", "Agent", "Connector")


def bundle_warnings(bundle: Bundle, *, handlers: bool = False) -> list[ConfigIssue]:
    """Every warning of ``bundle``'s own resources (packages' are not its author's).

    With ``handlers`` (``validate`` without ``--no-handlers``, which imports the Tools' modules
    anyway), also each ``@tool`` handler whose hints disagree with its export's YAML
    (:mod:`bundle.tool_hints`).
    """
    own = [r for r in bundle.resources if r.package is None]
    used = _referenced(bundle)
    warnings = []
    for resource in own:
        if resource.kind in _REFERABLE and (resource.kind, resource.name) not in used:
            warnings.append(
                resource.issue(
                    W_UNUSED,
                    f"{resource.ref_string} is declared but nothing uses it",
                    ("metadata", "name"),
                    "reference it, or remove it",
                )
            )
        key = resource.spec.api_key if resource.kind == "Model" else None
        if key is not None and key.value is not None:
            warnings.append(
                resource.issue(
                    W_LITERAL_SECRET,
                    "the API key is written in the file",
                    ("spec", "apiKey", "value"),
                    "use apiKey.valueFrom.env and keep the key in .env",
                )
            )
    if handlers:
        warnings.extend(handler_hint_warnings(bundle))
    return warnings


def _referenced(bundle: Bundle) -> set[tuple[str, str]]:
    """``(kind, name)`` of every bundle-local resource some other resource points at."""
    used: set[tuple[str, str]] = set()

    def mark(ref: ObjectRef | None, referrer: Resource) -> None:
        if ref is None:
            return
        try:
            target = bundle.resolve_ref(ref, referrer)
        except Exception:  # a dangling ref is an error reported elsewhere
            return
        used.add((target.kind, target.name))

    for resource in bundle.resources:
        spec = resource.spec
        if resource.kind == "Swarm":
            for item in spec.agents:
                mark(item.ref, resource)
            mark(spec.entry_agent, resource)
        elif resource.kind == "Agent":
            mark(spec.model_config_.model_ref, resource)
            for item in [*spec.tools, *spec.extensions]:
                mark(item.ref, resource)
        elif resource.kind == "Connection":
            mark(spec.connector_ref, resource)
    return used
