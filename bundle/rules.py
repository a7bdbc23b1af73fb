"""Rules that span resources: names, Package placement, refs, entries, handlers, schemas.

Each rule appends :class:`ConfigIssue` s; none stops the others, so one run reports everything.
Seed 000 §2.3 and §13 are the authority for Tools; upstream §1.5 for the codes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jsonschema
from jsonschema.exceptions import SchemaError

from bundle import errors as E
from bundle.entry import EntryLoadError, load_entry_module, resolve_handlers
from bundle.errors import ConfigIssue
from bundle.loader import FailedKey, Resource, index, tool_name_too_long
from bundle.models import AgentSpec, ObjectRef, RefItem, SwarmSpec, ToolSpec

Report = Callable[..., None]


def check_rules(
    resources: list[Resource],
    bundle_path: Path,
    *,
    check_handlers: bool,
    failed: set[FailedKey] | None = None,
) -> list[ConfigIssue]:
    """Every cross-resource rule over ``resources``.

    ``failed`` names resources that exist but did not validate: refs to them are not
    reported again (their own errors already are).
    """
    failed = failed or set()
    issues: list[ConfigIssue] = []

    def reporter(resource: Resource) -> Report:
        def report(
            code: str, message: str, *path: str | int, suggestion: str | None = None
        ) -> None:
            issues.append(
                ConfigIssue(
                    code=code,
                    message=message,
                    file=resource.file,
                    line=resource.line_of(*path),
                    resource=resource.ref_string,
                    field=_field(path),
                    suggestion=suggestion,
                )
            )

        return report

    _check_packages(resources, issues)
    _check_duplicates(resources, issues)
    idx = index(resources)

    def resolve(
        ref: ObjectRef, referrer: Resource, report: Report, *path: str | int
    ) -> Resource | None:
        package = ref.package if ref.package is not None else referrer.package
        target = idx.get(package, ref.kind, ref.name)
        if target is None and (package, ref.kind, ref.name) not in failed:
            elsewhere = idx.packages_with(ref.kind, ref.name)
            hint = (
                f"it exists in package {elsewhere[0]!r}: write {{kind: {ref.kind}, name: "
                f'{ref.name}, package: "{elsewhere[0]}"}}'
                if elsewhere
                else f"declare the {ref.kind} {ref.name!r}, or fix the reference"
            )
            scope = f"package {package!r}" if package else "this bundle"
            report(E.E_REF_NOT_FOUND, f"{ref} not found in {scope}", *path, suggestion=hint)
        return target

    for resource in resources:
        report = reporter(resource)
        spec = resource.spec
        if resource.kind == "Tool":
            _check_tool(resource, spec, report, check_handlers)
        elif resource.kind in ("Extension", "Connector"):
            _check_entry_exists(resource, spec.entry, report)
        elif resource.kind == "Agent":
            _check_agent(resource, spec, report, resolve, check_handlers)
        elif resource.kind == "Swarm":
            _check_swarm(resource, spec, report, resolve)
        elif resource.kind == "Connection":
            connector = spec.connector_ref
            resolve(connector, resource, report, "spec", "connectorRef")
            if spec.swarm_ref is not None:
                resolve(spec.swarm_ref, resource, report, "spec", "swarmRef")
            for i, rule in enumerate(spec.ingress.rules):
                if rule.route.agent_ref is not None:
                    resolve(
                        rule.route.agent_ref,
                        resource,
                        report,
                        "spec",
                        "ingress",
                        "rules",
                        i,
                        "route",
                        "agentRef",
                    )
    return issues


def _field(path: tuple[str | int, ...]) -> str | None:
    from bundle.source import format_path

    return format_path(path) or None


def _check_packages(resources: list[Resource], issues: list[ConfigIssue]) -> None:
    local = [r for r in resources if r.package is None]
    packages = [r for r in local if r.kind == "Package"]
    for extra in packages[1:]:
        issues.append(
            ConfigIssue(
                code=E.E_PACKAGE_DOC_DUPLICATED,
                message="a file may declare at most one Package",
                file=extra.file,
                line=extra.line,
                resource=extra.ref_string,
                suggestion="keep a single Package document, first in the file",
            )
        )
    if packages and packages[0].document.index != 0:
        first = packages[0]
        issues.append(
            ConfigIssue(
                code=E.E_PACKAGE_DOC_POSITION,
                message="the Package document must be the first document of the file",
                file=first.file,
                line=first.line,
                resource=first.ref_string,
                suggestion="move it to the top",
            )
        )


def _check_duplicates(resources: list[Resource], issues: list[ConfigIssue]) -> None:
    seen: dict[tuple[str | None, str, str], Resource] = {}
    for resource in resources:
        key = (resource.package, resource.kind, resource.name)
        first = seen.get(key)
        if first is None:
            seen[key] = resource
            continue
        issues.append(
            ConfigIssue(
                code=E.E_DUPLICATE_NAME,
                message=f"{resource.ref_string} is declared twice (first at line {first.line})",
                file=resource.file,
                line=resource.line_of("metadata", "name"),
                resource=resource.ref_string,
                field="metadata.name",
                suggestion="rename one of them",
            )
        )


def _check_entry_exists(resource: Resource, entry: str, report: Report) -> Path | None:
    path = (resource.base_dir / entry).resolve()
    if not path.is_file():
        report(
            E.E_ENTRY_NOT_FOUND,
            f"entry file {entry!r} not found (looked at {path})",
            "spec",
            "entry",
            suggestion="the path is relative to the YAML file that declares the resource",
        )
        return None
    return path


def _check_tool(resource: Resource, spec: ToolSpec, report: Report, check_handlers: bool) -> None:
    seen: set[str] = set()
    for i, export in enumerate(spec.exports):
        if export.name in seen:
            report(
                E.E_SCHEMA_INVALID,
                f"export name {export.name!r} is used twice",
                "spec",
                "exports",
                i,
                "name",
                suggestion="export names must be unique within a Tool",
            )
        seen.add(export.name)
        if tool_name_too_long(resource.name, export.name):
            report(
                E.E_SCHEMA_INVALID,
                f"tool name {resource.name}__{export.name} is longer than 64 characters",
                "spec",
                "exports",
                i,
                "name",
                suggestion="model providers refuse longer tool names; shorten the names",
            )
        _check_parameters(export.parameters, report, "spec", "exports", i, "parameters")
    path = _check_entry_exists(resource, spec.entry, report)
    if path is not None and check_handlers:
        _check_handlers(path, spec, spec.config, report)


def _check_parameters(schema: dict[str, object], report: Report, *path: str | int) -> None:
    if schema.get("type") != "object":
        report(
            E.E_SCHEMA_INVALID,
            "parameters must be a JSON Schema with `type: object`",
            *path,
            suggestion="tool arguments are always an object: type: object, properties: {...}",
        )
        return
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = ".".join(str(p) for p in exc.absolute_path)
        report(
            E.E_SCHEMA_INVALID,
            f"parameters is not a valid JSON Schema: {exc.message}"
            + (f" (at {where})" if where else ""),
            *path,
        )


def _check_handlers(path: Path, spec: ToolSpec, config: dict[str, object], report: Report) -> None:
    try:
        handlers = resolve_handlers(load_entry_module(path), config)
    except EntryLoadError as exc:
        report(exc.code, str(exc), "spec", "entry")
        return
    for i, export in enumerate(spec.exports):
        if export.name not in handlers:
            report(
                E.E_HANDLER_MISSING,
                f"the entry module has no handler for export {export.name!r}",
                "spec",
                "exports",
                i,
                "name",
                suggestion=f"add {export.name!r} to the module's `handlers` dict",
            )


def _check_agent(
    resource: Resource,
    spec: AgentSpec,
    report: Report,
    resolve: Callable[..., Resource | None],
    check_handlers: bool,
) -> None:
    model = resolve(
        spec.model_config_.model_ref, resource, report, "spec", "modelConfig", "modelRef"
    )
    if model is not None and model.kind != "Model":
        report(
            E.E_SCHEMA_INVALID,
            f"modelRef must name a Model, not a {model.kind}",
            "spec",
            "modelConfig",
            "modelRef",
        )
    if spec.prompt is not None and spec.prompt.system_ref is not None:
        prompt_path = (resource.base_dir / spec.prompt.system_ref).resolve()
        if not prompt_path.is_file():
            report(
                E.E_ENTRY_NOT_FOUND,
                f"systemRef file {spec.prompt.system_ref!r} not found (looked at {prompt_path})",
                "spec",
                "prompt",
                "systemRef",
                suggestion="the path is relative to the YAML file that declares the Agent",
            )
    tool_names: set[str] = set()
    all_tools_resolved = True
    for i, item in enumerate(spec.tools):
        tool = _resolve_kind(item, "Tool", resource, report, resolve, "spec", "tools", i)
        if tool is None:
            all_tools_resolved = False
            continue
        tool_spec: ToolSpec = tool.spec
        tool_names.update(f"{tool.name}__{e.name}" for e in tool_spec.exports)
        if item.config and check_handlers:
            entry = (tool.base_dir / tool_spec.entry).resolve()
            if entry.is_file():
                _check_handlers(
                    entry,
                    tool_spec,
                    {**tool_spec.config, **item.config},
                    _nested(report, "spec", "tools", i),
                )
    for i, item in enumerate(spec.extensions):
        _resolve_kind(item, "Extension", resource, report, resolve, "spec", "extensions", i)
    for i, required in enumerate(spec.required_tools):
        if required not in tool_names and all_tools_resolved:
            report(
                E.E_SCHEMA_INVALID,
                f"required tool {required!r} is not among the agent's tools",
                "spec",
                "requiredTools",
                i,
                suggestion=f"use one of: {', '.join(sorted(tool_names)) or '(the agent has no tools)'}",
            )


def _nested(report: Report, *prefix: str | int) -> Report:
    def nested(code: str, message: str, *path: str | int, suggestion: str | None = None) -> None:
        report(code, message, *prefix, "config", suggestion=suggestion)

    return nested


def _resolve_kind(
    item: RefItem,
    kind: str,
    resource: Resource,
    report: Report,
    resolve: Callable[..., Resource | None],
    *path: str | int,
) -> Resource | None:
    if item.ref.kind != kind:
        report(E.E_SCHEMA_INVALID, f"expected a reference to a {kind}, got {item.ref}", *path)
        return None
    return resolve(item.ref, resource, report, *path)


def _check_swarm(
    resource: Resource, spec: SwarmSpec, report: Report, resolve: Callable[..., Resource | None]
) -> None:
    names = set()
    for i, item in enumerate(spec.agents):
        agent = _resolve_kind(item, "Agent", resource, report, resolve, "spec", "agents", i)
        if agent is not None:
            names.add((agent.package, agent.name))
    entry = spec.entry_agent
    if entry.kind != "Agent":
        report(
            E.E_SCHEMA_INVALID, f"entryAgent must be an Agent, got {entry}", "spec", "entryAgent"
        )
        return
    listed = {item.ref.name for item in spec.agents}
    if entry.name not in listed:
        report(
            E.E_SCHEMA_INVALID,
            f"entryAgent {entry} is not one of the swarm's agents",
            "spec",
            "entryAgent",
            suggestion=f"add {entry} to spec.agents, or pick one of: {', '.join(sorted(listed))}",
        )
