"""Where a Tool export's YAML ``parameters`` and its handler's type hints disagree.

A handler made with ``tools_base.tool`` carries the ``exports`` entry its hints describe, as a
plain JSON object under :data:`EXPORT_ATTR`, so this package reads it without importing the SDK
(DESIGN.md arrows). The YAML stays the schema the model sees and the runtime checks; a
disagreement is a warning: a call the YAML allows that the handler refuses, or the reverse.

Compared, per property: present on one side only (a property the YAML declares and the handler
has no parameter for fails every call that passes it; a parameter the handler requires and the
YAML does not declare fails every call), required by the handler but optional in the YAML, and
the simple JSON types (``string``, ``integer``, ``number``, ``boolean``, ``array``, ``object``,
with ``null`` set aside) when both sides name them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from bundle.entry import EntryLoadError, load_entry_module, resolve_handlers
from bundle.errors import ConfigIssue

if TYPE_CHECKING:
    from bundle.bundle import Bundle

EXPORT_ATTR = "__goondan_tool_export__"
"""Where a ``@tool`` handler keeps its ``exports`` entry (``tools_base._tool.EXPORT_ATTR``)."""

W_HINTS_DIFFER = "W_CONFIG_TOOL_HINTS_DIFFER"
_SIMPLE = frozenset({"string", "integer", "number", "boolean", "array", "object"})


def parameter_differences(declared: Mapping[str, Any], derived: Mapping[str, Any]) -> list[str]:
    """What the YAML ``declared`` parameters say that the hints' ``derived`` ones do not, one
    sentence each; empty when they agree on everything compared (see the module docstring)."""
    yaml_props = _properties(declared)
    hint_props = _properties(derived)
    yaml_required = _required(declared)
    hint_required = _required(derived)
    found: list[str] = []
    closed = derived.get("additionalProperties") is False
    for name in sorted((yaml_props.keys() | yaml_required) - hint_props.keys() if closed else ()):
        required = name in yaml_required
        found.append(
            f"the YAML {'requires' if required else 'declares'} {name!r} but the handler has "
            f"no parameter {name!r} ({'every call fails' if required else 'a call that passes it fails'})"
        )
    for name in sorted(hint_required - yaml_props.keys()):
        found.append(
            f"the handler requires {name!r} but the YAML does not declare it "
            "(the model is never told to pass it)"
        )
    for name in sorted(yaml_props.keys() & hint_props.keys()):
        if name in hint_required and name not in yaml_required:
            found.append(
                f"the handler requires {name!r} but the YAML makes it optional "
                "(a call without it fails)"
            )
        yaml_types = _simple_types(yaml_props[name])
        hint_types = _simple_types(hint_props[name])
        if yaml_types and hint_types and not _compatible(yaml_types, hint_types):
            found.append(
                f"{name!r} is {_or(yaml_types)} in the YAML but {_or(hint_types)} in the "
                "handler's hints"
            )
    return found


def handler_hint_warnings(bundle: Bundle) -> list[ConfigIssue]:
    """A :data:`W_HINTS_DIFFER` warning for each export of the bundle's own Tools whose handler
    is a ``@tool`` one and disagrees with the YAML. Imports the Tools' entry modules (as
    ``validate`` already has, so each is a lookup); one that fails to load was reported as an
    error already and is skipped here."""
    warnings: list[ConfigIssue] = []
    for resource in bundle.resources:
        if resource.kind != "Tool" or resource.package is not None:
            continue
        spec = resource.spec
        try:
            module = load_entry_module((resource.base_dir / spec.entry).resolve())
            handlers = resolve_handlers(module, spec.config)
        except EntryLoadError:
            continue
        for i, export in enumerate(spec.exports):
            recorded = getattr(handlers.get(export.name), EXPORT_ATTR, None)
            if not isinstance(recorded, dict) or not isinstance(recorded.get("parameters"), dict):
                continue
            differences = parameter_differences(export.parameters, recorded["parameters"])
            if differences:
                warnings.append(
                    resource.issue(
                        W_HINTS_DIFFER,
                        f"export {export.name!r}: " + "; ".join(differences),
                        ("spec", "exports", i, "parameters"),
                        "make the YAML and the handler agree; `goondan tool schema "
                        f"{spec.entry}:{getattr(handlers[export.name], '__name__', export.name)}` "
                        "prints the entry the hints describe",
                    )
                )
    return warnings


def _properties(schema: Mapping[str, Any]) -> dict[str, Any]:
    found = schema.get("properties")
    return {str(k): v for k, v in found.items()} if isinstance(found, dict) else {}


def _required(schema: Mapping[str, Any]) -> set[str]:
    found = schema.get("required")
    return {r for r in found if isinstance(r, str)} if isinstance(found, list) else set()


def _simple_types(schema: Any) -> frozenset[str]:
    """The JSON types ``schema`` names, ``null`` aside; empty when it names none or any other
    (then nothing is compared)."""
    if not isinstance(schema, dict):
        return frozenset()
    kind = schema.get("type")
    if isinstance(kind, str):
        names = {kind}
    elif isinstance(kind, list):
        names = {k for k in kind if isinstance(k, str)}
    else:
        branches = schema.get("anyOf", schema.get("oneOf"))
        if not isinstance(branches, list):
            return frozenset()
        names = set()
        for branch in branches:
            own = _simple_types(branch)
            if not own and not (isinstance(branch, dict) and branch.get("type") == "null"):
                return frozenset()  # a branch of no simple type: do not guess
            names |= own
    names.discard("null")
    return frozenset(names) if names <= _SIMPLE else frozenset()


def _compatible(yaml_types: frozenset[str], hint_types: frozenset[str]) -> bool:
    """Equal sets, counting an ``integer`` on one side as covered by a ``number`` on the other
    (a ``float`` hint takes the integers a YAML ``integer`` allows)."""

    def widened(types: frozenset[str], other: frozenset[str]) -> frozenset[str]:
        if "integer" in types and "number" in other and "integer" not in other:
            return (types - {"integer"}) | {"number"}
        return types

    return widened(yaml_types, hint_types) == widened(hint_types, yaml_types)


def _or(types: frozenset[str]) -> str:
    return " or ".join(sorted(types))
