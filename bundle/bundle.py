"""A validated bundle: look up resources, follow refs, and build each agent's plan."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundle import errors as E
from bundle.environment import component_names, connection_names, environment_list, model_names
from bundle.errors import BundleError, ConfigIssue
from bundle.loader import Resource, index
from bundle.plan import (
    AgentPlan,
    ConnectionPlan,
    ExtensionPlan,
    ModelPlan,
    ToolExportPlan,
    ToolPlan,
)
from bundle.spec_agent import (
    FRONT_DOORS,
    AgentSpec,
    Budgets,
    FrontDoor,
    ModelLimits,
    ModelSpec,
    ToolSpec,
)
from bundle.spec_base import ObjectRef, RefItem
from bundle.spec_connector import ConnectionSpec, ConnectorSpec, ExtensionSpec
from bundle.spec_swarm import AgentPlacement, Exposure, SwarmSpec
from goondan.defaults import APPROVAL_TIMEOUT_SECONDS, MAX_TURN_ATTEMPTS

BASE_PACKAGE = "@goondan/base"
GUARD = "required-tools-guard"


@dataclass(frozen=True, slots=True)
class ResolvedTool:
    """A Tool as one agent uses it."""

    name: str
    package: str | None
    spec: ToolSpec
    entry_path: Path
    config: dict[str, Any]
    """``Tool.spec.config`` with the agent reference's ``config`` over it (agent wins)."""
    declared_in: Path


@dataclass(frozen=True, slots=True)
class ResolvedExtension:
    """An Extension as one agent uses it."""

    name: str
    package: str | None
    spec: ExtensionSpec
    entry_path: Path
    config: dict[str, Any]


@dataclass(frozen=True)
class Bundle:
    """The resources of a goondan.yaml and of the packages it references, all validated."""

    path: Path
    """goondan.yaml (for a bundle directory: its first file)."""
    resources: list[Resource]
    files: list[Path] = field(default_factory=list)
    """Every file of the bundle itself (one, or those of a bundle directory)."""
    directory: Path | None = None
    """The bundle directory it was loaded from, if it was (not a single file)."""
    _index: Any = field(init=False, repr=False, compare=False)
    _memo: dict[tuple[str, ...], Any] = field(init=False, repr=False, compare=False)
    """What every agent's plan asks of the whole bundle (a swarm's agents, the pools), worked
    out once: building the plans of N agents must not cost N times the swarm."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", index(self.resources))
        object.__setattr__(self, "_memo", {})
        if not self.files:
            object.__setattr__(self, "files", [self.path])

    @property
    def root(self) -> Path:
        """The directory of goondan.yaml."""
        return self.path.parent

    def get(self, kind: str, name: str, package: str | None = None) -> Resource:
        """The resource ``kind/name`` of ``package`` (``None``: this bundle); KeyError if absent."""
        found: Resource | None = self._index.get(package, kind, name)
        if found is None:
            raise KeyError(f"{kind}/{name}" + (f" in {package}" if package else ""))
        return found

    def of_kind(self, kind: str) -> list[Resource]:
        """Every resource of ``kind`` in this bundle (packages excluded), in file order."""
        return [r for r in self.resources if r.kind == kind and r.package is None]

    def resolve_ref(self, ref: ObjectRef, referrer: Resource) -> Resource:
        """Follow ``ref`` from ``referrer`` (same package unless the ref names one)."""
        package = ref.package if ref.package is not None else referrer.package
        return self.get(ref.kind, ref.name, package)

    def swarm(self, name: str | None = None) -> Resource:
        """The Swarm ``name``; else the one named ``default``; else the only one."""
        swarms = self.of_kind("Swarm")
        if name is not None:
            for swarm in swarms:
                if swarm.name == name:
                    return swarm
        elif len(swarms) == 1:
            return swarms[0]
        else:
            for swarm in swarms:
                if swarm.name == "default":
                    return swarm
        candidates = ", ".join(s.name for s in swarms) or "(none)"
        wanted = f"Swarm {name!r} not found" if name else "cannot choose a Swarm"
        raise BundleError(
            [
                ConfigIssue(
                    code=E.E_SWARM_NOT_FOUND,
                    message=f"{wanted}; swarms in {self.path.name}: {candidates}",
                    file=self.path,
                    suggestion="name one with --swarm, or call one of them `default`",
                )
            ]
        )

    def agent(self, name: str) -> Resource:
        """The local Agent ``name``."""
        return self.get("Agent", name)

    def swarm_agents(self, swarm: Resource) -> list[Resource]:
        """The Agents of ``swarm``, in declaration order."""
        key = ("swarm_agents", swarm.package or "", swarm.name)
        if key not in self._memo:
            spec: SwarmSpec = swarm.spec
            self._memo[key] = [
                self.resolve_ref(item.ref, swarm)
                for item in spec.agents
                if item.ref.kind == "Agent"
            ]
        return list(self._memo[key])

    def swarm_remote_agents(self, swarm: Resource) -> list[Resource]:
        """The RemoteAgents of ``swarm`` (delegation targets reached over A2A), in order."""
        spec: SwarmSpec = swarm.spec
        return [
            self.resolve_ref(item.ref, swarm)
            for item in spec.agents
            if item.ref.kind == "RemoteAgent"
        ]

    def _resolve_items(
        self, agent: Resource, items: list[RefItem]
    ) -> list[tuple[Resource, dict[str, Any]]]:
        """Each referenced resource with its ``spec.config`` under the reference's ``config``."""
        out = []
        for item in items:
            resource = self.resolve_ref(item.ref, agent)
            out.append((resource, {**resource.spec.config, **(item.config or {})}))
        return out

    def agent_tools(self, agent: Resource) -> list[ResolvedTool]:
        """The Tools of ``agent`` in ``spec.tools`` order, with per-agent config merged."""
        spec: AgentSpec = agent.spec
        # A Tool listed twice (the same ref, or a string and an object ref to it) is one tool:
        # first position, last entry's config, as upstream normalises by identity.
        unique: dict[tuple[str | None, str, str], tuple[Resource, dict[str, Any]]] = {}
        for tool, config in self._resolve_items(agent, spec.tools):
            key = (tool.package, tool.kind, tool.name)
            unique[key] = (unique[key][0] if key in unique else tool, config)
        return [_resolved_tool(tool, config) for tool, config in unique.values()]

    def registry_tools(self, agent: Resource) -> list[ResolvedTool]:
        """Every other Tool of the bundle (packages included), with its own ``spec.config``.

        With ``agent_tools`` they make the agent's Tool Registry: not offered to
        the model unless step middleware adds them to a Step's catalog, and loaded on first call.
        """
        own = {(t.package, t.name) for t in self.agent_tools(agent)}
        return [
            _resolved_tool(tool, dict(tool.spec.config))
            for tool in self.resources
            if tool.kind == "Tool" and (tool.package, tool.name) not in own
        ]

    def agent_extensions(self, agent: Resource) -> list[ResolvedExtension]:
        """The Extensions of ``agent`` in order, with per-agent config merged.

        An agent with ``requiredTools`` gets the base ``required-tools-guard`` appended (as
        upstream wires it), its ``requiredTools`` merged into the guard's config, unless the
        agent lists the guard itself.
        """
        spec: AgentSpec = agent.spec
        resolved = self._resolve_items(agent, spec.extensions)
        if spec.required_tools and not any(ext.name == GUARD for ext, _ in resolved):
            guard = self._index.get(BASE_PACKAGE, "Extension", GUARD)
            if guard is not None:
                resolved.append(
                    (guard, {**guard.spec.config, "requiredTools": list(spec.required_tools)})
                )
        return [
            ResolvedExtension(
                name=ext.name,
                package=ext.package,
                spec=ext.spec,
                entry_path=(ext.base_dir / ext.spec.entry).resolve(),
                config=config,
            )
            for ext, config in resolved
        ]

    def agent_system_prompt(self, agent: Resource) -> str | None:
        """``prompt.system``, or the text of ``prompt.systemRef``; ``None`` when blank."""
        spec: AgentSpec = agent.spec
        if spec.prompt is None:
            return None
        if spec.prompt.system_ref is not None:
            text = (agent.base_dir / spec.prompt.system_ref).read_text(encoding="utf-8")
        else:
            text = spec.prompt.system or ""
        return text if text.strip() else None

    def agent_plan(
        self, agent_name: str, state_dir: Path, swarm_name: str | None = None
    ) -> AgentPlan:
        """Everything the AgentProcess of ``agent_name`` needs (see :mod:`bundle.plan`)."""
        swarm = self.swarm(swarm_name)
        swarm_spec: SwarmSpec = swarm.spec
        agent = self.agent(agent_name)
        spec: AgentSpec = agent.spec
        model = self.resolve_ref(spec.model_config_.model_ref, agent)
        model_spec: ModelSpec = model.spec
        tools = self.agent_tools(agent)
        temperature, max_tokens = _sampling(spec, model_spec)
        approval_tools, approval_timeout = _approval(spec)
        pool = model_pool(model.name, model_spec)
        swarm_budgets = swarm_spec.budgets or Budgets()
        registry = self.registry_tools(agent)
        extensions = self.agent_extensions(agent)
        return AgentPlan(
            swarm_name=swarm.name,
            entry_agent=swarm_spec.entry_agent.name,
            agents=sorted(
                a.name for a in [*self.swarm_agents(swarm), *self.swarm_remote_agents(swarm)]
            ),
            agent_name=agent.name,
            description=spec.description,
            front_doors=_front_doors(agent.name, spec.expose, swarm_spec.expose),
            system_prompt=self.agent_system_prompt(agent),
            model=ModelPlan.of(model.name, model_spec, self.model_pools().get(pool or "")),
            temperature=temperature,
            max_tokens=max_tokens,
            tools=[_tool_plan(t) for t in tools],
            registry_tools=[_tool_plan(t) for t in registry],
            catalog_tools=_catalog(tools),
            required_tools=list(spec.required_tools),
            extensions=[
                ExtensionPlan(name=x.name, entry_path=str(x.entry_path), config=x.config)
                for x in extensions
            ],
            allow_registry_calls=spec.tool_policy.allow_registry_calls,
            parallel_tool_calls=spec.tool_policy.parallel_tool_calls,
            handler_timeout_seconds=spec.tool_policy.handler_timeout_seconds,
            max_tool_calls_per_step=spec.tool_policy.max_tool_calls_per_step,
            max_pending_calls=spec.tool_policy.max_pending_calls,
            approval_tools=approval_tools,
            approval_timeout_seconds=approval_timeout,
            max_steps_per_turn=swarm_spec.policy.max_steps_per_turn,
            on_max_steps=swarm_spec.policy.on_max_steps,
            concurrency=spec.policy.concurrency or swarm_spec.policy.concurrency,
            request_timeout_seconds=swarm_spec.policy.request_timeout_seconds,
            shutdown_grace_seconds=swarm_spec.policy.shutdown.grace_period_seconds,
            max_turn_attempts=(
                spec.policy.crash.max_turn_attempts
                or swarm_spec.policy.crash.max_turn_attempts
                or MAX_TURN_ATTEMPTS
            ),
            allow_spawn_outside_state=swarm_spec.policy.allow_spawn_outside_state,
            sandbox=swarm_spec.policy.sandbox,
            memory_limit_mib=spec.limits.memory_mib,
            budgets=_budgets(spec, swarm_budgets),
            ask_permits=pool is not None or self.has_trace_budget(swarm),
            trace_budgets=self.has_trace_budget(swarm),
            state_dir=str(state_dir),
            environment=_environment(spec, model_spec, tools, registry, extensions),
        )

    def model_pools(self) -> dict[str, ModelLimits]:
        """``pool → limits`` of every rate-limit pool: the Models naming one share it, their
        figures merged (the rules refuse two Models giving one figure different values)."""
        cached: dict[str, ModelLimits] | None = self._memo.get(("model_pools",))
        if cached is not None:
            return dict(cached)
        pools: dict[str, ModelLimits] = {}
        for model in self.of_kind("Model"):
            spec: ModelSpec = model.spec
            pool = model_pool(model.name, spec)
            if pool is None or spec.limits is None:
                continue
            known = pools.get(pool)
            own = spec.limits.model_copy(update={"pool": pool})
            pools[pool] = own if known is None else _merged_limits(known, own)
        self._memo[("model_pools",)] = pools
        return dict(pools)

    def has_trace_budget(self, swarm: Resource) -> bool:
        """Whether the swarm or one of its agents declares a trace budget."""
        key = ("has_trace_budget", swarm.package or "", swarm.name)
        if key not in self._memo:
            specs: list[Budgets | None] = [swarm.spec.budgets]
            specs += [agent.spec.budgets for agent in self.swarm_agents(swarm)]
            self._memo[key] = any(
                b is not None and b.trace is not None and b.trace.limits() for b in specs
            )
        return bool(self._memo[key])

    def connection_plans(
        self, state_dir: Path, swarm_name: str | None = None
    ) -> list[ConnectionPlan]:
        """The plan of every Connection bound to the swarm (its ``swarmRef``, or none)."""
        swarm = self.swarm(swarm_name)
        plans = []
        for connection in self.of_kind("Connection"):
            spec: ConnectionSpec = connection.spec
            if spec.swarm_ref is not None and spec.swarm_ref.name != swarm.name:
                continue
            connector = self.resolve_ref(spec.connector_ref, connection)
            connector_spec: ConnectorSpec = connector.spec
            plans.append(
                ConnectionPlan(
                    swarm_name=swarm.name,
                    connection_name=connection.name,
                    connector_name=connector.name,
                    entry_path=str((connector.base_dir / connector_spec.entry).resolve()),
                    events=[event.name for event in connector_spec.events],
                    config=dict(spec.config),
                    secrets=dict(spec.secrets),
                    state_dir=str(state_dir),
                    environment=environment_list(connection_names(spec, connector_spec)),
                )
            )
        return plans

    def placement(self, swarm_name: str | None = None) -> dict[str, AgentPlacement]:
        """Which hosts may run each agent ``Swarm.spec.placement`` puts on other hosts."""
        spec: SwarmSpec = self.swarm(swarm_name).spec
        return dict(spec.placement)

    def fingerprint(self) -> str:
        """A digest of what the swarm runs: every resource (built-in packages' too), each
        entry module and each ``systemRef`` prompt, by content.

        Two hosts holding the same bundle get the same digest wherever its directory lies, so
        a cluster tells version skew from a mere move.
        """
        digest = hashlib.sha256()

        def add(*parts: str | bytes) -> None:
            for part in parts:
                data = part.encode() if isinstance(part, str) else part
                digest.update(len(data).to_bytes(8, "big"))
                digest.update(data)

        for resource in sorted(self.resources, key=lambda r: (r.package or "", r.kind, r.name)):
            spec = resource.spec.model_dump(mode="json", by_alias=True)
            add(resource.package or "", resource.kind, resource.name)
            add(json.dumps(spec, sort_keys=True, separators=(",", ":")))
            for relative in (getattr(resource.spec, "entry", None), _system_ref(resource)):
                if relative is None:
                    continue
                try:
                    add(relative, (resource.base_dir / relative).read_bytes())
                except OSError as exc:  # named in the digest, so it differs from a readable one
                    add(relative, type(exc).__name__)
        return digest.hexdigest()

    def summary(self) -> str:
        """``1 Swarm, 2 Agents, 3 Tools, 1 Model`` (this bundle's own resources)."""
        counts: dict[str, int] = {}
        for resource in self.resources:
            if resource.package is None and resource.kind != "Package":
                counts[resource.kind] = counts.get(resource.kind, 0) + 1
        order = [
            "Swarm",
            "Agent",
            "Tool",
            "Model",
            "Extension",
            "Connector",
            "Connection",
            "RemoteAgent",
        ]
        return ", ".join(
            f"{counts[k]} {k}{'s' if counts[k] != 1 else ''}" for k in order if k in counts
        )


def _system_ref(resource: Resource) -> str | None:
    prompt = getattr(resource.spec, "prompt", None)
    ref: str | None = getattr(prompt, "system_ref", None)
    return ref


def _resolved_tool(tool: Resource, config: dict[str, Any]) -> ResolvedTool:
    return ResolvedTool(
        name=tool.name,
        package=tool.package,
        spec=tool.spec,
        entry_path=(tool.base_dir / tool.spec.entry).resolve(),
        config=config,
        declared_in=tool.file,
    )


def _environment(
    spec: AgentSpec,
    model: ModelSpec,
    tools: list[ResolvedTool],
    registry: list[ResolvedTool],
    extensions: list[ResolvedExtension],
) -> list[str]:
    """The environment variables the agent's process reads: its model's, its tools', its
    extensions' and its own ``spec.env``."""
    # Registry tools run only when the model may call any tool; middleware that offers
    # one otherwise has the Agent's spec.env name what it reads.
    callable_tools = [*tools, *(registry if spec.tool_policy.allow_registry_calls else [])]
    return environment_list(
        model_names(model),
        *(component_names(t.spec.env, t.config) for t in callable_tools),
        *(component_names(x.spec.env, x.config) for x in extensions),
        spec.env,
    )


def _catalog(tools: list[ResolvedTool]) -> list[str]:
    """The ``{tool}__{export}`` names of ``tools``' exports."""
    return [f"{t.name}__{e.name}" for t in tools for e in t.spec.exports]


def _front_doors(agent: str, own: list[FrontDoor] | None, swarm: Exposure) -> list[FrontDoor]:
    """The front doors that show ``agent``: those its own ``expose`` names (all without one)
    whose Swarm ``expose`` list, if it has one, names it."""
    wanted = FRONT_DOORS if own is None else own
    return [
        door
        for door in FRONT_DOORS
        if door in wanted and ((names := swarm.names(door)) is None or agent in names)
    ]


def _budgets(spec: AgentSpec, swarm_budgets: Budgets) -> Budgets:
    """The Agent's budgets over the swarm's (the swarm's alone when it has none)."""
    return spec.budgets.over(swarm_budgets) if spec.budgets else swarm_budgets


def _sampling(spec: AgentSpec, model: ModelSpec) -> tuple[float | None, int | None]:
    """The temperature and max tokens: the Agent's params, else the Model's."""
    params = spec.model_config_.params
    temperature = params.temperature if params.temperature is not None else model.temperature
    max_tokens = params.max_tokens if params.max_tokens is not None else model.max_tokens
    return temperature, max_tokens


def _approval(spec: AgentSpec) -> tuple[list[str], float]:
    """The tools that wait for approval, and how long they wait."""
    approval = spec.tool_policy.approval
    if approval is None:
        return [], APPROVAL_TIMEOUT_SECONDS
    return list(approval.tools), approval.timeout_seconds


def _tool_plan(tool: ResolvedTool) -> ToolPlan:
    return ToolPlan(
        name=tool.name,
        package=tool.package,
        entry_path=str(tool.entry_path),
        error_message_limit=tool.spec.error_message_limit,
        timeout_seconds=tool.spec.timeout_seconds,
        config=tool.config,
        sandboxed=tool.spec.sandboxed,
        exports=[
            ToolExportPlan(
                name=e.name,
                description=e.description,
                parameters=e.parameters,
                idempotent=tool.spec.idempotent if e.idempotent is None else e.idempotent,
            )
            for e in tool.spec.exports
        ],
    )


def model_pool(name: str, spec: ModelSpec) -> str | None:
    """The rate-limit pool of Model ``name`` (``None`` when it declares no limits)."""
    if spec.limits is None:
        return None
    return spec.limits.pool or name


def _merged_limits(a: ModelLimits, b: ModelLimits) -> ModelLimits:
    """``a`` with the figures it leaves unset taken from ``b``."""
    return a.model_copy(
        update={name: getattr(b, name) for name in ModelLimits.FIGURES if getattr(a, name) is None}
    )
