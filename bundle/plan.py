"""The resolved plan of one agent: everything its AgentProcess needs, as plain data.

The Orchestrator builds a plan per agent from the validated bundle and hands it to the child
process, which builds its registry, model and Turn loop from it without reading goondan.yaml
again. Comparing two plans tells whether an edit of goondan.yaml changed an agent.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bundle.cassette_plan import CassettePlan
from bundle.scripted import ScriptSpec
from bundle.spec_agent import (
    FRONT_DOORS,
    Budgets,
    Concurrency,
    FrontDoor,
    ModelLimits,
    ModelPricing,
    ModelSpec,
)
from bundle.spec_base import ValueSource
from goondan.defaults import (
    APPROVAL_TIMEOUT_SECONDS,
    CONCURRENCY,
    CONNECTOR_EVENTS_IN_FLIGHT,
    ERROR_MESSAGE_LIMIT,
    MAX_BACKGROUND_CALLS_PER_INSTANCE,
    MAX_STEPS_PER_TURN,
    MAX_TOOL_CALLS_PER_STEP,
    MAX_TURN_ATTEMPTS,
    MODEL_MAX_RETRIES,
    MODEL_TIMEOUT_SECONDS,
    ON_MAX_STEPS,
    REQUEST_TIMEOUT_SECONDS,
    SHUTDOWN_GRACE_SECONDS,
)


class _Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolExportPlan(_Plan):
    """One export of a Tool."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    idempotent: bool = False
    """Its calls may run again when a Turn resumes after a crash (the export's
    ``idempotent``, else the Tool's)."""


class ToolPlan(_Plan):
    """A Tool resource resolved for this agent."""

    name: str
    """``metadata.name``; the model sees ``{name}__{export}``."""
    package: str | None = None
    entry_path: str
    """Absolute path of the handler module."""
    error_message_limit: int = ERROR_MESSAGE_LIMIT
    timeout_seconds: float | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    """``Tool.spec.config`` with the agent reference's ``config`` over it."""
    sandboxed: bool = False
    """``Tool.spec.sandboxed``: its handlers start programs in the tool sandbox."""
    exports: list[ToolExportPlan]


class ModelPlan(_Plan):
    """The agent's Model resource, as its provider reads it (secrets stay references)."""

    name: str
    provider: str
    model: str
    api_key: ValueSource | None = None
    """Where the API key comes from; ``None``: the provider's usual environment variable."""
    base_url: str | None = None
    """An API-compatible server instead of the provider's own (``baseUrl`` or ``endpoint``)."""
    timeout_seconds: float = MODEL_TIMEOUT_SECONDS
    max_retries: int = MODEL_MAX_RETRIES
    script: ScriptSpec | None = None
    """The rules of the ``scripted`` provider."""
    limits: ModelLimits | None = None
    """The limits of the Model's pool (``pool`` always set), merged over the Models sharing it;
    ``None``: calls need no permit."""
    pricing: ModelPricing | None = None
    cassette: CassettePlan | None = None
    """Under ``goondan test``: calls recorded to, or answered from, a cassette."""

    @property
    def pool(self) -> str | None:
        """The rate-limit pool its calls take permits from (``None`` without limits)."""
        return self.limits.pool if self.limits is not None else None

    @classmethod
    def of(cls, name: str, spec: ModelSpec, limits: ModelLimits | None = None) -> ModelPlan:
        """The plan of Model ``name`` with ``spec``; ``limits`` are its pool's (see
        ``Bundle.model_pools``), else its own."""
        if limits is None and spec.limits is not None:
            limits = spec.limits.model_copy(update={"pool": spec.limits.pool or name})
        return cls(
            name=name,
            provider=spec.provider,
            model=spec.model,
            api_key=spec.api_key,
            base_url=spec.base_url or spec.endpoint,
            timeout_seconds=spec.timeout_seconds or MODEL_TIMEOUT_SECONDS,
            max_retries=MODEL_MAX_RETRIES if spec.max_retries is None else spec.max_retries,
            script=spec.script,
            limits=limits,
            pricing=spec.pricing,
        )


class ExtensionPlan(_Plan):
    """An Extension resource resolved for this agent."""

    name: str
    entry_path: str
    config: dict[str, Any] = Field(default_factory=dict)


class ClusterStoragePlan(_Plan):
    """Where an agent on a cluster node keeps its conversations and instance records: the
    cluster's NATS JetStream (see ``agent_process.jetstream_store``). Secrets never travel
    here: a password or token reaches the process as an environment variable its plan names,
    and the files below are paths on the node."""

    url: str = Field(repr=False)
    """The NATS server(s), as the node was given them (a password in the URL stays out of
    ``repr``; the agent shows the URL redacted)."""
    cluster: str
    """The cluster's name as one subject token: names its streams and buckets."""
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    replicas: int = Field(default=1, ge=1, le=5)
    """JetStream replicas of the conversation streams and buckets (3 on a NATS cluster)."""


class AgentPlan(_Plan):
    """Everything an AgentProcess needs to serve one agent."""

    swarm_name: str
    entry_agent: str
    agents: list[str]
    """Every agent of the Swarm, sorted: its own and its RemoteAgents (delegation targets
    reached over A2A)."""
    agent_name: str
    description: str | None = None
    """``Agent.spec.description``: what the front doors tell their callers the agent does."""
    front_doors: list[FrontDoor] = Field(default_factory=lambda: list(FRONT_DOORS))
    """The front doors that show the agent (its ``expose`` and the Swarm's)."""
    system_prompt: str | None = None
    model: ModelPlan
    temperature: float | None = None
    max_tokens: int | None = None
    tools: list[ToolPlan] = Field(default_factory=list)
    """The agent's own Tools (``Agent.spec.tools``, duplicates merged): loaded at boot."""
    registry_tools: list[ToolPlan] = Field(default_factory=list)
    """Every other Tool of the bundle: in the registry, loaded on first call."""
    catalog_tools: list[str] = Field(default_factory=list)
    """Full tool names of ``Agent.spec.tools``, in order: the start of every Step's catalog."""
    required_tools: list[str] = Field(default_factory=list)
    extensions: list[ExtensionPlan] = Field(default_factory=list)
    allow_registry_calls: bool = False
    parallel_tool_calls: bool = False
    """Run the calls of one model response concurrently (``toolPolicy.parallelToolCalls``)."""
    handler_timeout_seconds: float | None = None
    max_tool_calls_per_step: int = MAX_TOOL_CALLS_PER_STEP
    max_pending_calls: int = MAX_BACKGROUND_CALLS_PER_INSTANCE
    approval_tools: list[str] = Field(default_factory=list)
    """``toolPolicy.approval.tools``: calls of these tools wait for an operator's decision."""
    approval_timeout_seconds: float = APPROVAL_TIMEOUT_SECONDS
    """``toolPolicy.approval.timeoutSeconds``."""
    max_steps_per_turn: int = MAX_STEPS_PER_TURN
    on_max_steps: Literal["answer", "error"] = ON_MAX_STEPS
    """``Swarm.spec.policy.onMaxSteps``: what a Turn that used up its Steps is."""
    concurrency: Concurrency = CONCURRENCY
    """``policy.concurrency`` of the Agent, else of the Swarm: what a message for an instance
    whose Turn is running does."""
    request_timeout_seconds: float = REQUEST_TIMEOUT_SECONDS
    shutdown_grace_seconds: float = SHUTDOWN_GRACE_SECONDS
    max_turn_attempts: int = MAX_TURN_ATTEMPTS
    """``policy.crash.maxTurnAttempts`` (the Agent's, else the Swarm's): attempts at a Turn
    whose agent process dies under it before its caller is answered ``AGENT_CRASHED``."""
    memory_limit_mib: int | None = None
    """``Agent.spec.limits.memoryMiB``: the agent's data limit (``RLIMIT_DATA``)."""
    budgets: Budgets = Field(default_factory=Budgets)
    """The Agent's budgets over the Swarm's (``Budgets.over``)."""
    ask_permits: bool = False
    """Ask the Orchestrator before each model call: the Model has limits, or a trace budget
    applies somewhere in the swarm (the Orchestrator counts every trace's usage)."""
    trace_budgets: bool = False
    """A trace budget applies somewhere in the swarm: each model call reserves its tokens (and
    their cost) against its trace with its permit request."""
    allow_spawn_outside_state: bool = False
    """``Swarm.spec.policy.allowSpawnOutsideState``: spawn workdirs may lie outside the state
    directory, not only in the caller's workspace (see ``agent_process.spawn``)."""
    sandbox: Literal["auto", "bwrap", "namespaces", "off"] = "auto"
    """``Swarm.spec.policy.sandbox``: the sandbox tool programs run in."""
    state_dir: str
    """Root of the swarm's state; the agent's instances live under ``agents/<name>/``."""
    environment: list[str] = Field(default_factory=list)
    """The environment variables the process gets besides ``BASE_ENVIRONMENT``: names and
    ``PREFIX*`` patterns, sorted (see :mod:`bundle.environment`). Values never travel in a
    plan: they are the daemon's own, taken when the process starts on its host."""
    cluster_storage: ClusterStoragePlan | None = None
    """Set by a cluster node: conversations and records live in JetStream, so the agent can
    move between hosts; ``None`` keeps them in files under ``state_dir``."""


class ConnectionPlan(_Plan):
    """Everything the process of one Connection needs to run its connector."""

    swarm_name: str
    connection_name: str
    connector_name: str
    entry_path: str
    """The connector module (absolute path)."""
    events: list[str]
    """The event names the Connector declares; any other is refused at ``emit``."""
    config: dict[str, ValueSource] = Field(default_factory=dict)
    secrets: dict[str, ValueSource] = Field(default_factory=dict)
    """Resolved in the connector's process, never in a plan on disk or in a log."""
    state_dir: str
    stdin_path: str | None = None
    """Where the connector process opens its standard input (the daemon's own, through
    ``/proc``, so the ``cli`` connector reads what the daemon was given)."""
    max_events_in_flight: int = CONNECTOR_EVENTS_IN_FLIGHT
    """Events of the connection between ``emit`` and the end of their Turn; past it, ``emit``
    waits (back-pressure)."""
    environment: list[str] = Field(default_factory=list)
    """The environment variables the process gets besides ``BASE_ENVIRONMENT`` (as
    ``AgentPlan.environment``)."""


Plan = AgentPlan | ConnectionPlan
"""What a supervised process is started from."""
