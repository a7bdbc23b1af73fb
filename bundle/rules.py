"""Rules that span resources: names, Package placement, refs, entries, handlers, schemas.

Each rule appends :class:`ConfigIssue` s; none stops the others, so one run reports everything.
"""

from __future__ import annotations

from pathlib import Path

from bundle import errors as E
from bundle.connector_config import connection_config_issues
from bundle.entry import EntryLoadError, load_entry_module, resolve_handlers
from bundle.errors import ConfigIssue
from bundle.loader import FailedKey, Resource, tool_name_too_long
from bundle.prices import CATALOGUE_EXTRA, catalogue_installed, model_price
from bundle.rule_base import FieldPath, RuleChecker, item_path
from bundle.rules_remote import (
    check_remote_agent,
    remote_entry,
    remote_misuse,
    remote_names,
    swarm_members,
)
from bundle.schema_check import schema_problem
from bundle.script_tools import check_script_tools
from bundle.spec_agent import FRONT_DOORS, AgentSpec, Budgets, ModelLimits, ModelSpec, ToolSpec
from bundle.spec_base import ObjectRef
from bundle.spec_connector import ConnectionSpec, ConnectorSpec
from bundle.spec_swarm import SwarmSpec


def check_rules(
    resources: list[Resource],
    bundle_path: Path,
    *,
    check_handlers: bool,
    failed: set[FailedKey] | None = None,
    allow_outside_bundle: bool = False,
) -> list[ConfigIssue]:
    """Every cross-resource rule over ``resources``.

    ``failed`` names resources that exist but did not validate: refs to them are not
    reported again (their own errors already are). Unless ``allow_outside_bundle``, an entry
    module or ``systemRef`` must lie inside the directory of the YAML file that declares it
    (symlinks resolved), so a bundle cannot make the runtime read or run any file it likes.
    """
    checker = _Checker(resources, failed or set(), check_handlers, allow_outside_bundle)
    checker.check_packages()
    checker.check_duplicates()
    checker.check_pools()
    for resource in resources:
        checker.check(resource)
    checker.issues.extend(check_script_tools(resources, checker.index))
    return checker.issues


class _Checker(RuleChecker):
    """The rules, run over one bundle's resources."""

    def check(self, resource: Resource) -> None:
        if resource.kind == "Tool":
            self.check_tool(resource, resource.spec)
        elif resource.kind == "Extension":
            path = self.check_entry_exists(resource, resource.spec.entry)
            if path is not None and self.check_handlers:
                self.check_register(resource, path)
        elif resource.kind == "Connector":
            self.check_connector(resource, resource.spec)
        elif resource.kind == "Agent":
            self.check_agent(resource, resource.spec)
        elif resource.kind == "Swarm":
            self.check_swarm(resource, resource.spec)
        elif resource.kind == "Connection":
            self.check_connection(resource, resource.spec)
        elif resource.kind == "RemoteAgent":
            check_remote_agent(self, resource)
        elif resource.kind == "TestSuite":
            from bundle.testsuite_rules import check_suite

            check_suite(self, resource)

    # -- whole-bundle rules ------------------------------------------------------------------

    def check_packages(self) -> None:
        packages = self._placed_packages()
        for extra in packages[1:]:
            self.report(
                extra,
                E.E_PACKAGE_DOC_DUPLICATED,
                "a file may declare at most one Package",
                ("kind",),
                suggestion="keep a single Package document, first in the file",
            )
        if not packages:
            return
        if packages[0].document.index != 0:
            self.report(
                packages[0],
                E.E_PACKAGE_DOC_POSITION,
                "the Package document must be the first document of the file",
                ("kind",),
                suggestion="move it to the top",
            )
        self.check_dependencies(packages[0])

    def _placed_packages(self) -> list[Resource]:
        """The bundle's own Package documents, but those outside goondan.yaml (reported)."""
        local = [r for r in self.resources if r.package is None]
        packages = [r for r in local if r.kind == "Package"]
        for stray in [p for p in packages if p.file.stem != "goondan" and len(self.files) > 1]:
            self.report(
                stray,
                E.E_PACKAGE_DOC_POSITION,
                "the Package document belongs in goondan.yaml",
                ("kind",),
                suggestion="move it to the top of goondan.yaml",
            )
            packages.remove(stray)
        return packages

    def check_dependencies(self, package: Resource) -> None:
        """Every dependency installed, within its range, providing its Goondan package."""
        from bundle.packages import INSTALL_HINT, Dependency, dependency_problem
        from bundle.ranges import RangeError

        for i, declared in enumerate(package.spec.dependencies):
            field = ("spec", "dependencies", i)
            try:
                dependency = Dependency.of(declared)
            except RangeError as exc:
                self.report(package, E.E_SCHEMA_INVALID, str(exc), (*field, "version"))
                continue
            problem = dependency_problem(dependency)
            if problem is not None:
                self.missing_packages.add(dependency.name)
                self.report(
                    package, E.E_PACKAGE_NOT_INSTALLED, problem, field, suggestion=INSTALL_HINT
                )

    def check_duplicates(self) -> None:
        seen: dict[tuple[str | None, str, str], Resource] = {}
        for resource in self.resources:
            key = (resource.package, resource.kind, resource.name)
            first = seen.setdefault(key, resource)
            if first is not resource:
                where = (
                    f"line {first.line}"
                    if first.file == resource.file
                    else f"{first.file.name}:{first.line}"
                )
                self.report(
                    resource,
                    E.E_DUPLICATE_NAME,
                    f"{resource.ref_string} is declared twice (first at {where})",
                    ("metadata", "name"),
                    suggestion="rename one of them",
                )

    def check_pools(self) -> None:
        """Models sharing a rate-limit pool may leave a figure to another, never contradict it."""
        first: dict[tuple[str, str], tuple[Resource, object]] = {}
        for model in self.resources:
            if model.kind != "Model" or model.spec.limits is None:
                continue
            limits = model.spec.limits
            pool = limits.pool or model.name
            for name in ModelLimits.FIGURES:
                figure = ModelLimits.model_fields[name].alias or name
                value = getattr(limits, name)
                if value is None:
                    continue
                seen = first.setdefault((pool, name), (model, value))
                if seen[1] != value:
                    self.report(
                        model,
                        E.E_SCHEMA_INVALID,
                        f"pool {pool!r} gets {figure} {value} here and {seen[1]} from "
                        f"{seen[0].ref_string}",
                        ("spec", "limits", figure),
                        suggestion="give the figure once, on one Model of the pool",
                    )

    def check_budget_pricing(
        self, resource: Resource, budgets: Budgets | None, agents: list[Resource]
    ) -> None:
        """A cost ceiling needs a price for every model it counts: the Model's ``pricing``, or
        the genai-prices catalogue's (looked up only when a cost ceiling is set)."""
        if budgets is None or all(c.cost is None for c in budgets.scopes().values()):
            return
        unpriced = self._unpriced(agents)
        if not unpriced:
            return
        for scope, ceilings in budgets.scopes().items():
            if ceilings.cost is not None:
                self.report(
                    resource,
                    E.E_SCHEMA_INVALID,
                    f"a cost ceiling needs token prices, and {', '.join(unpriced)} "
                    f"{'has' if len(unpriced) == 1 else 'have'} none",
                    ("spec", "budgets", scope, "cost"),
                    suggestion="add spec.pricing {inputPerMillionTokens, outputPerMillionTokens}"
                    " to the Model (genai-prices lists no price for it), or cap tokens instead"
                    + (
                        ""
                        if catalogue_installed()
                        else f" (the genai-prices catalogue is not installed: {CATALOGUE_EXTRA})"
                    ),
                )

    def _unpriced(self, agents: list[Resource]) -> list[str]:
        """The Models of ``agents`` with no price, sorted."""
        models = [model for agent in agents if (model := self._model_of(agent)) is not None]
        return sorted(
            {
                model.ref_string
                for model in models
                if model_price(model.spec, model.spec.base_url or model.spec.endpoint) is None
            }
        )

    def _model_of(self, agent: Resource) -> Resource | None:
        spec: AgentSpec = agent.spec
        ref = spec.model_config_.model_ref
        model = self.index.get(ref.package or agent.package, "Model", ref.name)
        return model if model is not None and isinstance(model.spec, ModelSpec) else None

    # -- per-kind rules ----------------------------------------------------------------------

    def check_entry_exists(self, resource: Resource, entry: str) -> Path | None:
        path = (resource.base_dir / entry).resolve()
        if not self.confined(resource, path, ("spec", "entry"), "entry file"):
            return None
        if path.is_file():
            return path
        self.report(
            resource,
            E.E_ENTRY_NOT_FOUND,
            f"entry file {entry!r} not found (looked at {path})",
            ("spec", "entry"),
            suggestion="the path is relative to the YAML file that declares the resource",
        )
        return None

    def check_tool(self, resource: Resource, spec: ToolSpec) -> None:
        seen: set[str] = set()
        for i, export in enumerate(spec.exports):
            at: FieldPath = ("spec", "exports", i, "name")
            if export.name in seen:
                self.report(
                    resource,
                    E.E_SCHEMA_INVALID,
                    f"export name {export.name!r} is used twice",
                    at,
                    suggestion="export names must be unique within a Tool",
                )
            seen.add(export.name)
            if tool_name_too_long(resource.name, export.name):
                self.report(
                    resource,
                    E.E_SCHEMA_INVALID,
                    f"tool name {resource.name}__{export.name} is longer than 64 characters",
                    at,
                    suggestion="model providers refuse longer tool names; shorten the names",
                )
            self.check_parameters(resource, export.parameters, ("spec", "exports", i, "parameters"))
        path = self.check_entry_exists(resource, spec.entry)
        if path is not None and self.check_handlers:
            self.check_handlers_of(resource, path, spec, spec.config, ("spec",))

    def check_parameters(
        self, resource: Resource, schema: dict[str, object], path: FieldPath
    ) -> None:
        if schema.get("type") != "object":
            self.report(
                resource,
                E.E_SCHEMA_INVALID,
                "parameters must be a JSON Schema with `type: object`",
                path,
                suggestion="tool arguments are always an object: type: object, properties: {...}",
            )
            return
        problem = schema_problem(schema)
        if problem is not None:
            self.report(
                resource,
                E.E_SCHEMA_INVALID,
                f"parameters is not a valid JSON Schema: {problem}",
                path,
                suggestion="see https://json-schema.org/understanding-json-schema/",
            )

    def check_handlers_of(
        self,
        resource: Resource,
        entry: Path,
        spec: ToolSpec,
        config: dict[str, object],
        at: FieldPath,
    ) -> None:
        """Import ``entry`` and check a handler exists for every export.

        ``at`` says whose config this is: ``("spec",)`` for the Tool itself (module problems are
        reported at ``spec.entry``, a rejected config at ``spec.config``), or ``spec.tools[i]``
        for an agent's per-tool config (everything reported at its ``config``).
        """
        own = at == ("spec",)
        where = (*at, "entry") if own else (*at, "config")
        try:
            handlers = resolve_handlers(load_entry_module(entry), config)
        except EntryLoadError as exc:
            if own and exc.code == E.E_SCHEMA_INVALID:
                where = ("spec", "config")
            self.report(resource, exc.code, str(exc), where, suggestion=_entry_hint(exc.code))
            return
        for i, export in enumerate(spec.exports):
            if export.name not in handlers:
                self.report(
                    resource,
                    E.E_HANDLER_MISSING,
                    f"{entry.name} has no handler for export {export.name!r}",
                    ("spec", "exports", i, "name") if own else where,
                    suggestion=f"add {export.name!r} to the module's `handlers` dict",
                )

    def check_register(self, resource: Resource, entry: Path) -> None:
        """Import an Extension's module and check it has a ``register`` function."""
        try:
            module = load_entry_module(entry)
        except EntryLoadError as exc:
            self.report(
                resource, exc.code, str(exc), ("spec", "entry"), suggestion=_entry_hint(exc.code)
            )
            return
        if not callable(getattr(module, "register", None)):
            self.report(
                resource,
                E.E_HANDLER_MISSING,
                f"{entry.name} has no `register(api)` function",
                ("spec", "entry"),
                suggestion="define `def register(api):` (or `register(api, config)`, may be async)",
            )

    def check_connector(self, resource: Resource, spec: ConnectorSpec) -> None:
        seen: set[str] = set()
        for i, event in enumerate(spec.events):
            if event.name in seen:
                self.report(
                    resource,
                    E.E_SCHEMA_INVALID,
                    f"event name {event.name!r} is used twice",
                    ("spec", "events", i, "name"),
                    suggestion="event names must be unique within a Connector",
                )
            seen.add(event.name)
        self.check_entry_exists(resource, spec.entry)

    def check_agent(self, resource: Resource, spec: AgentSpec) -> None:
        self.resolve_kind(
            spec.model_config_.model_ref, "Model", resource, ("spec", "modelConfig", "modelRef")
        )
        self.check_budget_pricing(resource, spec.budgets, [resource])
        self.check_system_ref(resource, spec)
        tool_names = self.check_agent_tools(resource, spec)
        for i, item in enumerate(spec.extensions):
            self.resolve_kind(item.ref, "Extension", resource, item_path(resource, "extensions", i))
        if tool_names is None:
            return  # an unresolved tool already failed; its exports are unknown
        if spec.tool_policy.approval is not None:
            self.check_approval_tools(resource, spec, tool_names)
        for i, required in enumerate(spec.required_tools):
            if required not in tool_names:
                self.report(
                    resource,
                    E.E_SCHEMA_INVALID,
                    f"required tool {required!r} is not among the agent's tools",
                    ("spec", "requiredTools", i),
                    suggestion=_use_one_of(tool_names),
                )

    def check_system_ref(self, resource: Resource, spec: AgentSpec) -> None:
        if spec.prompt is None or spec.prompt.system_ref is None:
            return
        prompt_path = (resource.base_dir / spec.prompt.system_ref).resolve()
        field: FieldPath = ("spec", "prompt", "systemRef")
        if self.confined(resource, prompt_path, field, "systemRef file") and (
            not prompt_path.is_file()
        ):
            self.report(
                resource,
                E.E_ENTRY_NOT_FOUND,
                f"systemRef file {spec.prompt.system_ref!r} not found (looked at {prompt_path})",
                field,
                suggestion="the path is relative to the YAML file that declares the Agent",
            )

    def check_agent_tools(self, resource: Resource, spec: AgentSpec) -> set[str] | None:
        """The names of the agent's tools (``None`` when one does not resolve), each item's
        config checked against its Tool's handlers."""
        tool_names: set[str] = set()
        all_tools_resolved = True
        for i, item in enumerate(spec.tools):
            tool = self.resolve_kind(item.ref, "Tool", resource, item_path(resource, "tools", i))
            if tool is None:
                all_tools_resolved = False
                continue
            tool_spec: ToolSpec = tool.spec
            tool_names.update(f"{tool.name}__{e.name}" for e in tool_spec.exports)
            if not item.config or not self.check_handlers:
                continue
            entry = (tool.base_dir / tool_spec.entry).resolve()
            if entry.is_file():
                merged = {**tool_spec.config, **item.config}
                self.check_handlers_of(resource, entry, tool_spec, merged, ("spec", "tools", i))
        return tool_names if all_tools_resolved else None

    def check_approval_tools(
        self, resource: Resource, spec: AgentSpec, tool_names: set[str]
    ) -> None:
        """``toolPolicy.approval.tools`` name tools the agent can call: its own, a tool an
        extension of it registers (``{extension}__{tool}``, known only at run time), or any
        Tool export of the bundle when registry calls are allowed."""
        assert spec.tool_policy.approval is not None
        extensions = {item.ref.name for item in spec.extensions}
        callable_names = set(tool_names)
        if spec.tool_policy.allow_registry_calls:
            callable_names.update(self.exports())
        for i, name in enumerate(spec.tool_policy.approval.tools):
            if name in callable_names or name.split("__", 1)[0] in extensions:
                continue
            self.report(
                resource,
                E.E_SCHEMA_INVALID,
                f"approval tool {name!r} is not among the agent's tools",
                ("spec", "toolPolicy", "approval", "tools", i),
                suggestion=_use_one_of(tool_names),
            )

    def exports(self) -> set[str]:
        """Every Tool export of the bundle, as ``{tool}__{export}``."""
        tools = [r for r in self.resources if r.kind == "Tool"]
        return {f"{tool.name}__{e.name}" for tool in tools for e in tool.spec.exports}

    def check_swarm(self, resource: Resource, spec: SwarmSpec) -> None:
        resolved = swarm_members(self, resource, spec)
        self.check_budget_pricing(resource, spec.budgets, resolved)
        remote_misuse(self, resource, spec)
        if not self.check_entry_agent(resource, spec):
            return  # not an Agent ref: nothing to place beside it
        remote = remote_names(spec)  # reported by remote_misuse
        members = {item.ref.name for item in spec.agents} - remote
        for agent in spec.placement:
            if agent not in members | remote:
                self.report(
                    resource,
                    E.E_SCHEMA_INVALID,
                    f"placement names {agent!r}, which is not one of the swarm's agents",
                    ("spec", "placement", agent),
                    suggestion="place one of: " + ", ".join(sorted(members)),
                )
        for door in FRONT_DOORS:
            for i, agent in enumerate(spec.expose.names(door) or ()):
                if agent not in members | remote:
                    self.report(
                        resource,
                        E.E_SCHEMA_INVALID,
                        f"expose.{door} names {agent!r}, which is not one of the swarm's agents",
                        ("spec", "expose", door, i),
                        suggestion="expose some of: " + ", ".join(sorted(members)),
                    )

    def check_entry_agent(self, resource: Resource, spec: SwarmSpec) -> bool:
        """Whether ``entryAgent`` is an Agent ref (and so worth checking further)."""
        entry = spec.entry_agent
        if remote_entry(self, resource, spec):
            return False
        if entry.kind != "Agent":
            self.report(
                resource,
                E.E_SCHEMA_INVALID,
                f"entryAgent must be an Agent, got {entry}",
                ("spec", "entryAgent"),
                suggestion='write "Agent/<name>"',
            )
            return False
        listed = [item.ref for item in spec.agents if item.ref.kind == "Agent"]
        if not any(_same_agent(entry, ref) for ref in listed):
            self.report(
                resource,
                E.E_SCHEMA_INVALID,
                f"entryAgent {entry} is not one of the swarm's agents",
                ("spec", "entryAgent"),
                suggestion=f"add {entry} to spec.agents, or pick one of: "
                + ", ".join(sorted({ref.name for ref in listed})),
            )
        return True

    def check_connection(self, resource: Resource, spec: ConnectionSpec) -> None:
        connector = self.resolve_kind(
            spec.connector_ref, "Connector", resource, ("spec", "connectorRef")
        )
        if connector is not None and self.check_handlers:
            self.issues.extend(
                connection_config_issues(
                    resource, connector, allow_outside_bundle=self.allow_outside_bundle
                )
            )
        swarms = self._connection_swarms(resource, spec)
        for i, rule in enumerate(spec.ingress.rules):
            ref = rule.route.agent_ref
            if ref is None:
                continue
            path: FieldPath = ("spec", "ingress", "rules", i, "route", "agentRef")
            agent = self.resolve_kind(ref, "Agent", resource, path)
            if agent is None or swarms is None:
                continue
            if not any(self._swarm_has(swarm, agent) for swarm in swarms):
                scope = f"Swarm/{swarms[0].name}" if spec.swarm_ref is not None else "any Swarm"
                self.report(
                    resource,
                    E.E_SCHEMA_INVALID,
                    f"{ref} is not an agent of {scope}",
                    path,
                    suggestion="route to one of the swarm's agents, or add it to spec.agents",
                )

    def _connection_swarms(self, resource: Resource, spec: ConnectionSpec) -> list[Resource] | None:
        """The swarms a Connection routes into: its ``swarmRef``'s (``None`` when that does not
        resolve), else every Swarm of its package."""
        if spec.swarm_ref is None:
            return [
                r for r in self.resources if r.kind == "Swarm" and r.package == resource.package
            ]
        swarm = self.resolve_kind(spec.swarm_ref, "Swarm", resource, ("spec", "swarmRef"))
        return [swarm] if swarm is not None else None

    def _swarm_has(self, swarm: Resource, agent: Resource) -> bool:
        spec: SwarmSpec = swarm.spec
        return any(
            (item.ref.package or swarm.package, item.ref.name) == (agent.package, agent.name)
            for item in spec.agents
        )


def _same_agent(a: ObjectRef, b: ObjectRef) -> bool:
    """Name match; packages are compared only when both refs give one (upstream's rule)."""
    if a.name != b.name:
        return False
    return a.package is None or b.package is None or a.package == b.package


def _use_one_of(tool_names: set[str]) -> str:
    return "use one of: " + (", ".join(sorted(tool_names)) or "(the agent has no tools)")


def _entry_hint(code: str) -> str | None:
    if code == E.E_ENTRY_LOAD_FAILED:
        return "fix the module: importing it, and its configure(config), must not raise"
    if code == E.E_SCHEMA_INVALID:
        return "fix the config the module rejected (see its configure(config))"
    if code == E.E_HANDLER_MISSING:
        return "export `handlers = {'<export>': function}` (and `configure(config)` to take config)"
    return None
