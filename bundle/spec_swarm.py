"""``kind: Swarm``: the agents that run together, their policy (steps, timeouts, shutdown,
the HTTP API, the sandbox) and where each runs in a cluster."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, StringConstraints, model_validator

from bundle.spec_agent import (
    CONCURRENCY_DESCRIPTION,
    Budgets,
    Concurrency,
    CrashPolicy,
    FrontDoor,
)
from bundle.spec_base import MAX_SECONDS, ObjectRef, RefItemLike, Spec, ValueFrom
from goondan.defaults import (
    CONCURRENCY,
    MAX_STEPS_PER_TURN,
    ON_MAX_STEPS,
    REQUEST_TIMEOUT_SECONDS,
    SHUTDOWN_GRACE_SECONDS,
)

NODE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
"""A cluster node's name: it becomes part of NATS subjects and keys, so no dots or spaces."""
LABEL_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,62}$"
"""A node label's name (``orchestrator node --label KEY=VALUE``)."""
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9_.-]{1,63}$"
"""A node label's value."""


class ShutdownPolicy(Spec):
    """Graceful shutdown of the swarm's agents."""

    grace_period_seconds: float = Field(
        default=SHUTDOWN_GRACE_SECONDS,
        ge=0,
        le=MAX_SECONDS,
        description="Time a Turn gets to finish before it is killed.",
    )


class LifecyclePolicy(Spec):
    """Instance lifecycle (reserved: accepted and validated, not acted on yet)."""

    ttl_seconds: float | None = Field(
        default=None, gt=0, description="Idle time after which an instance may be collected."
    )
    gc_grace_seconds: float | None = Field(
        default=None, ge=0, description="Extra time before a collected instance is deleted."
    )


class ApiPolicy(Spec):
    """The daemon's HTTP API beyond its Unix socket (``run --listen`` and
    ``--api-token-env`` override these)."""

    listen: str | None = Field(
        default=None,
        pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$",
        description="HOST:PORT of a TCP listener, e.g. 127.0.0.1:8080 (off loopback it needs a token).",
    )
    token_from: ValueFrom | None = Field(
        default=None,
        description="The bearer token every request must carry, e.g. {env: GOONDAN_API_TOKEN}.",
    )
    allowed_hosts: list[
        Annotated[
            str,
            StringConstraints(
                pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?$", max_length=255
            ),
        ]
    ] = Field(
        default_factory=list,
        max_length=256,
        description=(
            "More names the TCP listener answers to in the Host header (HOST, or HOST:PORT for "
            "that port only), e.g. the DNS name clients use; besides these it serves only its "
            "bound address, localhost, 127.0.0.1 and [::1] with its port (421 otherwise)."
        ),
    )
    cors_origins: list[
        Annotated[
            str,
            StringConstraints(
                pattern=r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$",
                max_length=255,
            ),
        ]
    ] = Field(
        default_factory=list,
        max_length=256,
        description=(
            "Origins of web pages that may call the API from a browser, e.g. "
            "https://app.example.com (no path, no wildcard); a request from any other origin "
            "is refused (403). None by default."
        ),
    )


class SwarmPolicy(Spec):
    """Limits of a Swarm."""

    max_steps_per_turn: int = Field(
        default=MAX_STEPS_PER_TURN, ge=1, le=10_000, description="Steps before a Turn stops."
    )
    on_max_steps: Literal["answer", "error"] = Field(
        default=ON_MAX_STEPS,
        description="A Turn that used up its Steps: answer (its last text, or a notice; "
        "finishReason max_steps) or error (E_MAX_STEPS, which fails its caller).",
    )
    concurrency: Concurrency = Field(
        default=CONCURRENCY,
        description=CONCURRENCY_DESCRIPTION + " An Agent's policy.concurrency overrides it.",
    )
    request_timeout_seconds: float = Field(
        default=REQUEST_TIMEOUT_SECONDS,
        gt=0,
        le=MAX_SECONDS,
        description="Default timeout of agents__request.",
    )
    shutdown: ShutdownPolicy = Field(
        default_factory=ShutdownPolicy, description="Graceful shutdown settings."
    )
    lifecycle: LifecyclePolicy = Field(
        default_factory=LifecyclePolicy, description="Instance lifecycle (reserved)."
    )
    allow_spawn_outside_state: bool = Field(
        default=False,
        description=(
            "Let agents__spawn give an instance a cwd outside the state directory (by default "
            "a cwd must lie in the caller's own workspace; the state directory, the rest of "
            "it and its parents are refused either way)."
        ),
    )
    api: ApiPolicy = Field(default_factory=ApiPolicy, description="The daemon's HTTP API.")
    crash: CrashPolicy = Field(
        default_factory=CrashPolicy,
        description="Turns whose agent process dies (an Agent's policy.crash overrides it).",
    )
    sandbox: Literal["auto", "bwrap", "namespaces", "off"] = Field(
        default="auto",
        description="The sandbox of tool programs (bash, MCP stdio servers): auto (bubblewrap, "
        "else the kernel's namespaces, else `run` refuses), bwrap, namespaces, or off "
        "(programs run as the agent, unconfined).",
    )


def _label_value(value: Any) -> Any:
    # YAML reads `gpu: true` as a boolean and `rack: 2` as a number; a node's `--label`
    # is always text, so compare as text.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return value


NodeName = Annotated[str, StringConstraints(pattern=NODE_NAME_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[
    str, BeforeValidator(_label_value), StringConstraints(pattern=LABEL_VALUE_PATTERN)
]


class AgentPlacement(Spec):
    """Which hosts of a clustered swarm may run one agent: a node, any of several nodes, or
    any node declaring some labels (``orchestrator node --label KEY=VALUE``); the leader's own
    host too with ``allowLeader``. When the node running it is lost, the leader starts it again
    on another host that qualifies."""

    node: NodeName | None = Field(
        default=None,
        description="Name of the node (`orchestrator node --name`) that runs the agent.",
    )
    nodes: list[NodeName] | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Nodes that may run the agent, the first one up preferred, e.g. "
        "[node-b, node-c].",
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        max_length=32,
        description="Labels a node must declare (every one, with this value) to run the agent, "
        'e.g. {gpu: "true"}; with `node`/`nodes`, only those nodes that declare them.',
    )
    allow_leader: bool = Field(
        default=False,
        description="When no node that qualifies is up, run the agent on the leader instead.",
    )

    @model_validator(mode="after")
    def _says_where(self) -> AgentPlacement:
        if self.node is not None and self.nodes is not None:
            raise ValueError("give `node` or `nodes`, not both")
        if self.node is None and self.nodes is None and not self.labels:
            raise ValueError("say which hosts may run the agent: `node`, `nodes` or `labels`")
        return self

    @property
    def named_nodes(self) -> tuple[str, ...]:
        """The nodes named (``node`` or ``nodes``), in order of preference; empty when any
        node with the labels will do."""
        if self.node is not None:
            return (self.node,)
        return tuple(self.nodes or ())

    def admits(self, node: str, labels: dict[str, str]) -> bool:
        """Whether node ``node``, declaring ``labels``, may run the agent."""
        named = self.named_nodes
        if named and node not in named:
            return False
        return all(labels.get(key) == value for key, value in self.labels.items())

    def describe(self) -> str:
        """The constraint in a few words, for messages and ``status``."""
        parts = ["|".join(self.named_nodes)] if self.named_nodes else []
        parts += [f"{key}={value}" for key, value in sorted(self.labels.items())]
        return ",".join(parts)


class Exposure(Spec):
    """Which agents each front door shows, by agent name; a door left out shows them all."""

    openai: list[str] | None = Field(
        default=None, description="Agents `/v1/models`, Chat Completions and Responses show."
    )
    mcp: list[str] | None = Field(default=None, description="Agents the MCP server offers.")
    a2a: list[str] | None = Field(default=None, description="Agents with an A2A card.")
    ag_ui: list[str] | None = Field(default=None, description="Agents served over AG-UI.")

    def names(self, door: FrontDoor) -> list[str] | None:
        """The agents ``door`` shows (``None``: every one)."""
        chosen: list[str] | None = getattr(self, "ag_ui" if door == "agUi" else door)
        return chosen


class SwarmSpec(Spec):
    """``kind: Swarm``: the agents that run together."""

    entry_agent: ObjectRef = Field(
        description="The agent that receives input; must be one of `agents`."
    )
    agents: list[RefItemLike] = Field(min_length=1, description="Every agent of the swarm.")
    instance_key: str | None = Field(
        default=None, min_length=1, description="Swarm instance key (default: the swarm's name)."
    )
    policy: SwarmPolicy = Field(default_factory=SwarmPolicy, description="Limits and timeouts.")
    placement: dict[str, AgentPlacement] = Field(
        default_factory=dict,
        description="Agents that run on other hosts when the swarm runs with `--cluster`, by "
        "agent name, e.g. {worker: {node: gpu-1}}, {worker: {nodes: [gpu-1, gpu-2]}} or "
        '{worker: {labels: {gpu: "true"}, allowLeader: true}}; the others run on the leader. '
        "Ignored without --cluster.",
    )
    expose: Exposure = Field(
        default_factory=Exposure,
        description="Which agents each front door (openai, mcp, a2a, agUi) shows, e.g. "
        "{mcp: [researcher]}; a door left out shows every agent (an Agent's own `expose` can "
        "still hide it).",
    )
    budgets: Budgets | None = Field(
        default=None,
        description="Token and cost ceilings for every agent of the swarm (an Agent's own "
        "override them figure by figure).",
    )
