"""The answers of the swarm's operations: one struct per body the HTTP API sends.

Each is a msgspec struct whose fields, renamed to camelCase, are the body's keys in the order
they are sent; a field that is :data:`~msgspec.UNSET` is left out of the body (``pools`` of a
swarm without rate limits), one that is ``None`` is sent as ``null``. The daemon builds them
(:mod:`orchestrator.operations.service`), the HTTP API encodes them
(:func:`orchestrator.operations.encoding.encode`), and the client decodes the bodies back into
them (:mod:`orchestrator.http.client`), so the CLI, the ``instance`` view and the studio read
attributes. :mod:`orchestrator.operations.schema` exports their JSON Schemas.

Numbers that may be whole or not are ``int | float``: each keeps the spelling it was computed
with (``60`` stays ``60``, ``0.5`` stays ``0.5``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, UnsetType

Json = Annotated[object, msgspec.Meta(extra_json_schema={"description": "any JSON value"})]
"""A value the swarm passes through as it found it (a tool's arguments)."""
Number = int | float
"""A count or an amount, whole or not."""


class Answer(msgspec.Struct, rename="camel", kw_only=True):
    """A body of the HTTP API (camelCase keys, in declaration order)."""


# -- errors ----------------------------------------------------------------------------------


class ErrorDetail(Answer):
    """What went wrong."""

    code: str
    """The error code (``goondan.error_codes``)."""
    message: str
    """What went wrong, in words."""
    field: str | UnsetType = UNSET
    """The field of the request body that is wrong (a body refused at the door)."""


class ErrorBody(Answer):
    """Every failure's body: ``{"error": {code, message, field?}}``."""

    error: ErrorDetail
    """What went wrong."""


# -- the daemon ------------------------------------------------------------------------------


class Health(Answer):
    """``GET /healthz``: the process is up."""

    ok: bool
    """Always true."""
    pid: int
    """The daemon's pid."""


class Readiness(Answer):
    """``GET /readyz``: whether the entry agent is ready."""

    ready: bool
    """The entry agent runs and is ready, and the daemon is not stopping."""
    entry_agent: str
    """The agent a request goes to when it names none."""
    status: str
    """The entry agent's process status (``ProcessStatus``)."""


# -- status ----------------------------------------------------------------------------------


class UsageTally(Answer):
    """What model calls used."""

    input_tokens: int = 0
    """Tokens sent to models."""
    output_tokens: int = 0
    """Tokens models produced."""
    total_tokens: int = 0
    """Both."""
    cost: Number = 0
    """What they cost (rounded to 1e-6), in the prices' currency."""
    calls: int = 0
    """Model calls."""


class LastExit(Answer):
    """How a process last ended."""

    exit_code: int | None
    """Its exit code (``None`` when a signal ended it)."""
    signal: str | None
    """The signal that ended it (``SIGKILL``)."""
    reason: str
    """How it ended, in words."""


class ProcessRow(Answer, kw_only=True):
    """A supervised process, as an agent's row and a Connection's row both report it.

    Keyword-only, so these fields come after a subclass's positional ones in the body and before
    its keyword-only ones: an agent's row starts with ``agent``, and a Connection's ends with
    ``connection``, ``connector`` and ``health``, as the bodies always had them.
    """

    pid: int | None
    """Its process (``None`` when it does not run)."""
    status: str
    """Its process status (``ProcessStatus``: ``idle``, ``busy``, ``notStarted``...)."""
    restarts: int
    """Times it was restarted."""
    crashes: int
    """Times it crashed."""
    consecutive_crashes: int
    """Crashes since it last ran well."""
    uptime_seconds: Number | None
    """Seconds since its process started (``None`` when it does not run)."""
    node: str | None
    """The cluster node it runs on (``None``: this host; always so for a Connection's)."""
    last_exit: LastExit | None
    """How its process last ended."""
    boot_error: str | None
    """Why it last failed to start."""
    next_start_in_seconds: Number | None
    """Seconds until it is started again (in a crash-loop back-off)."""


class _NamedAgent(ProcessRow):
    """An agent's process, its name first."""

    agent: str
    """The agent's name."""


class AgentRow(_NamedAgent, kw_only=True):
    """One agent in ``GET /v1/agents``: its process, conversations, requests and usage."""

    instances: list[str]
    """Its conversation instances on disk (directory names)."""
    pending_delegates: int
    """Requests waiting for its answer."""
    sends_in_flight: int
    """Agents' sends to it delivered but not yet done."""
    permits_waiting: int
    """Its model calls waiting for a rate-limit permit."""
    usage: UsageTally | None
    """What its model calls used since the daemon started (``None``: none yet)."""


class ConnectionHealthRow(Answer):
    """How a Connection fares."""

    up: bool
    """Its process runs and its last report was no failure."""
    last_error: str | None
    """Its last failure, in words."""
    last_error_at: str | None
    """When it failed last (UTC, ISO 8601)."""
    consecutive_failures: int
    """Failures since its last success."""
    failures: int
    """Failures since the daemon started."""
    last_event_at: str | None
    """When it last delivered an event."""


class ConnectionRow(ProcessRow, kw_only=True):
    """One Connection in ``GET /v1/agents``: its connector process and its health."""

    connection: str
    """The Connection's name."""
    connector: str
    """Its Connector's name."""
    health: ConnectionHealthRow
    """How it fares."""


class NodeRow(Answer):
    """One node of the cluster."""

    node: str
    """The node's name."""
    up: bool
    """It answers and is ready."""
    host: str | None
    """The host it runs on."""
    pid: int | None
    """Its process."""
    labels: dict[str, str]
    """Its labels (what placement rules match)."""
    same_bundle: bool | None
    """It runs the leader's bundle."""
    agents: list[str]
    """The agents it runs for this swarm."""
    last_heartbeat_seconds_ago: Number | None
    """Seconds since it was last heard of."""


class Cluster(Answer):
    """The cluster, with ``--cluster``."""

    cluster: str
    """Its name."""
    server: str
    """The NATS server(s), without credentials."""
    fingerprint: str
    """The bundle's fingerprint as the leader runs it."""
    nodes: list[NodeRow]
    """Each node named by a placement rule or present."""


class PoolRow(Answer):
    """One rate-limit pool as it stands."""

    pool: str
    """The pool's name (its Model's)."""
    in_use: int
    """Permits held now."""
    waiting: int
    """Model calls waiting for a permit."""
    max_concurrent: int | None
    """Calls at once it allows."""
    requests_per_minute: Number | None
    """Calls a minute it allows."""
    tokens_per_minute: Number | None
    """Tokens a minute it allows."""
    granted: int
    """Permits granted since the daemon started."""
    waited: int
    """Permits that had to wait."""
    timed_out: int
    """Permit requests that timed out."""
    pauses: int
    """Pauses a provider asked for (429 with ``Retry-After``)."""
    wait_seconds: Number
    """Seconds spent waiting, all calls together."""
    paused_for_seconds: Number
    """Seconds the pool stays paused."""
    requests_available: Number | UnsetType = UNSET
    """Calls its bucket holds now (with ``requestsPerMinute``)."""
    tokens_available: Number | UnsetType = UNSET
    """Tokens its bucket holds now (with ``tokensPerMinute``)."""


class SwarmStatus(Answer, kw_only=True):
    """``GET /v1/agents``: the swarm, a row per agent and per Connection, the cluster and the
    rate-limit pools when there are any."""

    swarm: str
    """The swarm's name."""
    pid: int | UnsetType = UNSET
    """The daemon's pid (set by the HTTP API)."""
    agents: list[AgentRow]
    """One row per agent."""
    connections: list[ConnectionRow]
    """One row per Connection."""
    cluster: Cluster | UnsetType = UNSET
    """The cluster, with ``--cluster``."""
    pools: list[PoolRow] | UnsetType = UNSET
    """Each rate-limit pool, when there are any."""


# -- requests --------------------------------------------------------------------------------


class PendingRow(Answer):
    """One request waiting for an answer."""

    request_id: str
    """The request's id."""
    trace_id: str
    """Its trace."""
    caller: str
    """Who asked (an agent, or ``external``)."""
    agent: str
    """The agent asked."""
    instance_key: str
    """The conversation asked."""
    started_at: str
    """When it was asked (UTC, ISO 8601)."""


class Requests(Answer):
    """``GET /v1/requests``."""

    requests: list[PendingRow]
    """The requests waiting for an answer."""


class Accepted(Answer):
    """``POST /v1/agents/{agent}/sends`` (202): delivered, nobody waits."""

    accepted: bool
    """Always true."""
    agent: str
    """The agent it goes to."""
    instance_key: str
    """The conversation it goes to."""
    request_id: str | None = None
    """The request's id (``GET /v1/requests/{id}`` answers it)."""


class RequestState(Answer, omit_defaults=True):
    """``GET /v1/requests/{id}``: an accepted request, running or answered."""

    request_id: str
    """The request's id."""
    state: Literal["running", "done"]
    """Whether it was answered."""
    answer: dict[str, Json] | None = None
    """Once done: the body its POST answers (a chat completion for ``/v1/chat/completions``)."""


class Cancelled(Answer):
    """``POST /v1/requests/{id}/cancel``."""

    cancelled: list[str]
    """The traces cancelled."""
    reason: str
    """Why, as the Turns are told."""


class Restarted(Answer):
    """``POST /v1/agents/{agent}/restart``."""

    agent: str
    """The agent restarted."""
    pid: int | None
    """Its new process."""
    deleted_instances: list[str] | UnsetType = UNSET
    """With ``?fresh=1``: the conversations deleted in between."""


# -- conversations ---------------------------------------------------------------------------


class SpawnedBy(Answer):
    """Who created an instance with ``agents__spawn``."""

    agent: str
    """The asking agent."""
    instance_key: str
    """Its conversation."""
    at: str | UnsetType = UNSET
    """When (UTC, ISO 8601)."""


class InstanceRow(Answer, kw_only=True):
    """One conversation instance on disk: its ``metadata.json`` and where it is."""

    format_version: int | UnsetType = UNSET
    """The record's format."""
    agent_name: str | UnsetType = UNSET
    """Its agent."""
    instance_key: str | UnsetType | None = UNSET
    """Its key (``None`` for a record of a newer format than this runtime reads)."""
    status: str | UnsetType = UNSET
    """``idle`` or ``processing``."""
    created_at: str | UnsetType = UNSET
    """When it was created (UTC, ISO 8601)."""
    updated_at: str | UnsetType = UNSET
    """When its record was last written."""
    workdir: str | UnsetType = UNSET
    """The working directory chosen at spawn."""
    spawned_by: SpawnedBy | UnsetType = UNSET
    """Who created it with ``agents__spawn``."""
    usage: UsageTally | UnsetType = UNSET
    """What its model calls used, lasting."""
    error: str | UnsetType = UNSET
    """Why it cannot be read (a newer format)."""
    directory: str
    """Its directory."""


class Instances(Answer):
    """``GET /v1/instances``."""

    instances: list[InstanceRow]
    """The conversation instances on disk."""


class InstanceDeleted(Answer):
    """``DELETE /v1/agents/{agent}/instances/{key}``."""

    ok: bool
    """Always true (a refusal is an error body)."""
    deleted: bool
    """Files were deleted (false: there were none)."""


class InstanceRestarted(Answer):
    """``POST /v1/agents/{agent}/instances/{key}/restart``."""

    agent: str
    """The agent."""
    instance_key: str
    """The conversation."""
    ok: bool
    """Always true (a refusal is an error body)."""
    loaded: bool
    """It was loaded (false: nothing to restart)."""
    stopped_turns: int
    """Its running Turns stopped (answered ``CANCELLED``)."""


# -- usage -----------------------------------------------------------------------------------

Ceilings = dict[str, Number]
"""A budget's ceilings, or what is left of them: figure (``outputTokens``) → amount."""


class AgentUsage(Answer):
    """One agent in ``GET /v1/usage``."""

    agent: str
    """The agent."""
    usage: UsageTally
    """What its model calls used since the daemon started."""
    budgets: dict[str, Ceilings]
    """Its budgets: scope (``trace``, ``instance``...) → ceilings."""
    price_source: str | UnsetType | None = UNSET
    """Where its model's prices come from (``model``, ``genai-prices``; ``None``: none)."""


class InstanceUsage(Answer):
    """One conversation in ``GET /v1/usage``."""

    agent: str
    """Its agent."""
    instance_key: str | None
    """Its key."""
    usage: UsageTally
    """What its model calls used, lasting."""
    budget: Ceilings | UnsetType = UNSET
    """Its instance budget."""
    remaining: Ceilings | UnsetType = UNSET
    """What is left of it."""


class TraceUsage(Answer):
    """One trace's usage (``GET /v1/usage?trace=ID``, and the rows of ``traces``)."""

    trace_id: str
    """The trace."""
    root: str
    """The agent it started at."""
    agents: list[str]
    """The agents that made model calls in it."""
    started_at: str | None
    """When its first call was recorded."""
    usage: UsageTally
    """What its model calls used."""
    budget: Ceilings | UnsetType = UNSET
    """Its trace budget."""
    remaining: Ceilings | UnsetType = UNSET
    """What is left of it."""
    reserved: UsageTally | UnsetType = UNSET
    """What calls not yet settled hold."""
    exceeded: str | UnsetType = UNSET
    """The ceiling it went past, in words."""


class UsageReport(Answer):
    """``GET /v1/usage``: what model calls used and what budgets are left."""

    total: UsageTally
    """Everything since the daemon started."""
    agents: list[AgentUsage]
    """Per agent."""
    instances: list[InstanceUsage]
    """Per conversation instance."""
    traces: list[TraceUsage]
    """The latest traces, newest first."""
    pools: list[PoolRow]
    """Each rate-limit pool."""


# -- approvals -------------------------------------------------------------------------------

ApprovalStatus = Literal["pending", "approved", "rejected", "expired", "cancelled"]


class ApprovalRow(Answer, kw_only=True):
    """One tool call parked for an operator's approval, as its record on disk holds it
    (``goondan.state_files.approvals``; the fields its agent may not have written yet are
    left out when absent)."""

    v: int | UnsetType = UNSET
    """The record's format (only in a decision's answer, as the agent sends it)."""
    approval_id: str
    """The approval's id (``apr_`` and 16 hex digits)."""
    tool_call_id: str | UnsetType = UNSET
    """The model's id of the call."""
    tool_name: str
    """The tool (``bash__exec``)."""
    arguments: dict[str, Json] | UnsetType = UNSET
    """The model's arguments."""
    agent_name: str
    """The agent whose Turn waits."""
    instance_key: str
    """Its conversation."""
    trace_id: str | UnsetType = UNSET
    """The trace of the Turn."""
    turn_id: str | UnsetType = UNSET
    """The Turn."""
    requested_at: str | UnsetType = UNSET
    """When it was parked (UTC, ISO 8601)."""
    expires_at: str | UnsetType = UNSET
    """When it expires undecided."""
    expires_at_unix: Number
    """The same, in seconds since the epoch."""
    status: ApprovalStatus
    """Where it stands (a pending one past its deadline is shown ``expired``)."""
    started: bool | UnsetType = UNSET
    """The agent began carrying the decision out."""
    settled: bool | UnsetType = UNSET
    """The agent finished carrying it out."""
    decided_at: str | UnsetType = UNSET
    """When it was decided."""
    decided_arguments: dict[str, Json] | UnsetType = UNSET
    """The operator's arguments, when an approval edited them."""
    reason: str | UnsetType = UNSET
    """A rejection's reason (the model reads it)."""
    decided_by: dict[str, Json] | UnsetType = UNSET
    """Who decided, as the daemon found them (``{via, pid, uid...}``)."""


class Approvals(Answer):
    """``GET /v1/approvals``."""

    approvals: list[ApprovalRow]
    """The approvals, oldest request first."""


class TurnError(Answer):
    """Why a Turn failed."""

    code: str
    """The error code."""
    message: str | None
    """What went wrong, in words."""


class TurnEnd(Answer):
    """How the Turn parked on an approval ended (``?wait=1``)."""

    status: Literal["ok", "error"]
    """Whether it answered."""
    output: Json
    """Its answer (text, as the Turn produced it)."""
    turn_id: str | None
    """The Turn."""
    error: TurnError | UnsetType = UNSET
    """Why it failed."""


class ApprovalAnswer(Answer):
    """``GET /v1/approvals/{id}`` and a decision's 200."""

    approval: ApprovalRow
    """The approval as it now stands."""
    turn: TurnEnd | UnsetType | None = UNSET
    """With ``?wait=1``: how its Turn ended (``None`` past the swarm's request timeout)."""


ANSWERS: tuple[type[Answer], ...] = (
    ErrorBody,
    Health,
    Readiness,
    SwarmStatus,
    Requests,
    Accepted,
    Cancelled,
    Restarted,
    Instances,
    InstanceDeleted,
    InstanceRestarted,
    UsageReport,
    TraceUsage,
    Approvals,
    ApprovalAnswer,
)
"""Every top-level body (the answer of a request is ``ipc.delegation.DelegateAnswer``'s wire
form, the OpenAI-compatible bodies are OpenAI's)."""
