"""The protocol between the Orchestrator and its AgentProcesses: every kind, every payload, typed.

Both sides build and read messages only through this protocol: this module holds its vocabulary
(names, exit codes, error codes, event kinds and who sends each, ids), :mod:`ipc.build` builds
the messages; the payloads are typed in :mod:`ipc.delegation` (``delegate``, ``delegate_result``, ``shutdown``),
:mod:`ipc.events` (what a process reports or is told, and :func:`~ipc.events.read_event`) and
:mod:`ipc.questions` (what one side asks the other, and each answer), on the base of
:mod:`ipc.payload`. A message is an :class:`~ipc.messages.IpcMessage` envelope
``{type, from, to, payload, correlationId?}``; its payload is a ``msgspec`` struct, built into the
envelope with ``to_wire`` and read back with ``from_wire``. The envelope decodes on its own and
keeps the payload undecoded, so a payload of the wrong shape is still answered by its correlation
id: ``from_wire`` refuses it with :class:`MalformedPayload` (``IPC_MALFORMED_PAYLOAD``) naming the
field, as msgspec reports it (``delegate.input: Expected `str`, got `int` - at `$.input```).

Every payload struct is ``rename="camel"`` (``instance_key`` is ``instanceKey`` on the wire),
``frozen`` (derive a changed one with ``msgspec.structs.replace``) and ``omit_defaults``: a field
at its default is left off the wire, and every reader since the first one reads an absent field as
that default. Unknown fields are ignored, not refused, so a peer of a newer version may add one.

Message types:

``delegate``         agent or Orchestrator → agent: run a Turn and answer. Payload :class:`Handoff`.
``delegate_result``  the one answer to a ``delegate``, same ``correlationId``. Payload
                     :class:`DelegateAnswer`.
``shutdown``         Orchestrator → agent: finish the running Turns and exit. Payload
                     :class:`ShutdownRequest`.
``event``            everything else; ``payload.kind`` is one of the kinds below.

Event kinds (agent → Orchestrator):

``ready``                    :class:`Ready`: booted, serving.
``boot_failed``              :class:`BootFailed`: cannot boot; the process exits with
                             :data:`EXIT_BOOT_FAILURE`.
``status``                   :class:`StatusChanged`: ``idle`` or ``processing``.
``turn_completed``           :class:`TurnCompleted`: a Turn ended (a successful one resets the
                             crash count).
``shutdown_ack``             :class:`ShutdownAck`: the drain is over.
``runtime_event``            :class:`RuntimeEventReport`: one line for the runtime event log.
``text_delta``               :class:`TextDelta`: a piece of model text of a Turn whose caller
                             streams (:attr:`Handoff.stream_id`), sent as the model produces it.
``restart_request``          :class:`RestartRequest`: a tool asked for this agent's restart.
``send``                     :class:`Send`: fire-and-forget input for another agent.
``send_started``             :class:`SendStarted`: the Turn of a delivered send started.
``send_done``                :class:`SendDone`: the Turn of a delivered send ended.
``send_refused``             :class:`SendRefused`: the target could not take a send.
``spawn_request``            :class:`SpawnRequest` (``agents__spawn``), answered ``spawn_result``.
``list_request``             :class:`ListRequest` (``agents__list``), answered ``list_result``.
``config_check``             :class:`ConfigCheck` (``self-restart``): would the configuration on
                             disk load? Answered ``config_check_result``.
``prepare_instance_result``  :class:`PrepareInstanceResult`, the answer to ``prepare_instance``.
``delete_instance_result``   :class:`DeleteInstanceResult`, the answer to ``delete_instance``.
``restart_instance_result``  :class:`RestartInstanceResult`, the answer to ``restart_instance``.
``approval_decision_result`` :class:`ApprovalDecisionResult`, the answer to ``approval_decision``.
``model_permit``             :class:`ModelPermitRequest`: may a model call start now (shared rate
                             limits, trace budget)? Answered ``model_permit_result``.
``model_usage``              :class:`ModelUsage`: a model call ended; what it used, and its permit
                             back.

Event kinds (Orchestrator → agent):

``send``                     :class:`Send`: the delivery of a send, ``source`` filled in.
``send_failed``              :class:`SendFailed`: a send of this agent was lost.
``spawn_result``             :class:`SpawnResult`.
``list_result``              :class:`ListResult`.
``config_check_result``      :class:`ConfigCheckResult`: the errors of the configuration on disk.
``prepare_instance``         :class:`PrepareInstance`: create an instance unless it exists.
``delete_instance``          :class:`DeleteInstance`: delete an idle instance.
``restart_instance``         :class:`RestartInstance`: reload an instance from disk, its running
                             Turn stopped.
``approval_decision``        :class:`ApprovalDecision`: an operator approves or rejects a tool
                             call parked for approval.
``cancel``                   :class:`Cancel`: stop the Turns of a trace at their next safe point.
``model_permit_result``      :class:`ModelPermitResult`: the permit, or why there is none.
``leader_changed``           :class:`LeaderChanged`: a cluster's new leader took this agent
                             over; what it asked of the previous one is lost.

A Connection's process (its connector) speaks a subset.

Event kinds (connector → Orchestrator):

``ready``                    :class:`Ready`: the connector runs.
``boot_failed``              :class:`BootFailed`: it cannot start (a missing secret, a module
                             without ``run``); the process exits with :data:`EXIT_BOOT_FAILURE`.
``connector_event``          :class:`ConnectorEventReport`: an event for the ingress rules.
``connector_health``         :class:`ConnectorHealth`: its source failed (a poll answered 500,
                             the network down, a crash on the way out) or works again.

Event kinds (Orchestrator → connector):

``connector_event_settled``  :class:`ConnectorEventSettled`: the Turn of an event ended, or the
                             event could not be delivered (frees its place in flight).

``from``/``to`` are agent (or Connection) names, or :data:`ORCHESTRATOR`. A payload may be any JSON value on the
wire; every kind here carries an object. Errors cross as ``{code, message, details?}``
(:class:`~ipc.messages.IpcError`).
"""

from __future__ import annotations

import enum
import secrets
from collections.abc import Mapping

from goondan.defaults import DEFAULT_INSTANCE_KEY as DEFAULT_INSTANCE_KEY  # part of the wire
from goondan.errors import DeliveryCode
from goondan.http_codes import HttpCode
from ipc.messages import (
    IpcError,
)

ORCHESTRATOR = "orchestrator"
"""The ``from``/``to`` name of the Orchestrator itself."""
CONNECTION_SENDER_PREFIX = "connection:"
"""``from`` of the sends a Connection's events become (``connection:<name>``), never an agent's
name (agent names have no colon)."""
EXTERNAL_CALLER = "user"
"""The caller name of requests from outside the swarm (CLI, HTTP API)."""

EXIT_BOOT_FAILURE = 78
"""An AgentProcess that cannot boot exits with this code (``EX_CONFIG``); the supervisor backs off
at once, since restarting cannot fix a broken configuration."""
EXIT_BROKEN_FDS = 71
"""An AgentProcess whose stdin, stdout or stderr a tool closed or replaced exits with this code
(``EX_OSERR``) to be restarted clean."""
EXIT_MEMORY_LIMIT = 72
"""An AgentProcess that ran out of its ``limits.memoryMiB`` outside a tool exits with this code."""
EXIT_NODE_LOST = 69
"""Not an AgentProcess's own code: the exit the cluster leader records for an agent whose node
stopped answering (``EX_UNAVAILABLE``). Callers it owed get ``AGENT_CRASHED`` as for any crash."""
EXIT_REASONS = {
    EXIT_BOOT_FAILURE: "cannot boot",
    EXIT_NODE_LOST: "its cluster node was lost",
    EXIT_BROKEN_FDS: "a tool broke stdin, stdout or stderr",
    EXIT_MEMORY_LIMIT: "memory limit reached",
}
"""What the exit codes AgentProcesses reserve mean (shown in ``status`` as the last exit)."""

MALFORMED_PAYLOAD = DeliveryCode.IPC_MALFORMED_PAYLOAD


class MalformedPayload(IpcError):
    """A payload that is not the object its message or event kind needs."""

    code = MALFORMED_PAYLOAD


class UnknownEvent(IpcError):
    """An ``event`` whose kind this protocol does not have."""

    code = DeliveryCode.IPC_UNKNOWN_EVENT


APPROVAL_NOT_FOUND = HttpCode.APPROVAL_NOT_FOUND
"""An :class:`~ipc.questions.ApprovalDecision` names no approval of the agent (HTTP 404)."""
APPROVAL_ALREADY_DECIDED = HttpCode.APPROVAL_ALREADY_DECIDED
"""The approval was decided already, or expired (HTTP 409)."""
APPROVAL_INVALID_ARGUMENTS = HttpCode.APPROVAL_INVALID_ARGUMENTS
"""The edited arguments of an approval fail the tool's JSON Schema (HTTP 400)."""


class EventKind(enum.StrEnum):
    """Every ``payload.kind`` of an ``event`` (see the module docstring for direction and body)."""

    READY = "ready"
    BOOT_FAILED = "boot_failed"
    STATUS = "status"
    TURN_COMPLETED = "turn_completed"
    SHUTDOWN_ACK = "shutdown_ack"
    RUNTIME_EVENT = "runtime_event"
    TEXT_DELTA = "text_delta"
    RESTART_REQUEST = "restart_request"
    SEND = "send"
    SEND_STARTED = "send_started"
    SEND_DONE = "send_done"
    SEND_REFUSED = "send_refused"
    SEND_FAILED = "send_failed"
    SPAWN_REQUEST = "spawn_request"
    SPAWN_RESULT = "spawn_result"
    LIST_REQUEST = "list_request"
    LIST_RESULT = "list_result"
    CONFIG_CHECK = "config_check"
    CONFIG_CHECK_RESULT = "config_check_result"
    PREPARE_INSTANCE = "prepare_instance"
    PREPARE_INSTANCE_RESULT = "prepare_instance_result"
    DELETE_INSTANCE = "delete_instance"
    DELETE_INSTANCE_RESULT = "delete_instance_result"
    RESTART_INSTANCE = "restart_instance"
    RESTART_INSTANCE_RESULT = "restart_instance_result"
    APPROVAL_DECISION = "approval_decision"
    APPROVAL_DECISION_RESULT = "approval_decision_result"
    CANCEL = "cancel"
    MODEL_PERMIT = "model_permit"
    MODEL_PERMIT_RESULT = "model_permit_result"
    MODEL_USAGE = "model_usage"
    LEADER_CHANGED = "leader_changed"
    CONNECTOR_EVENT = "connector_event"
    CONNECTOR_EVENT_SETTLED = "connector_event_settled"
    CONNECTOR_HEALTH = "connector_health"


# -- ids and call chains ---------------------------------------------------------------------


def new_correlation_id() -> str:
    """The id pairing a ``delegate`` (or a question) with its one answer."""
    return f"corr_{secrets.token_hex(12)}"


def new_event_id() -> str:
    """The id of one request or send, as the caller's tool result reports it."""
    return f"agent_event_{secrets.token_hex(8)}"


def new_trace_id() -> str:
    """A 32-hex trace id (W3C trace-context size), for input that starts a causal chain."""
    return secrets.token_hex(16)


def call_node(agent: str, instance_key: str) -> str:
    """One node of a call chain: the conversation ``agent@instanceKey``."""
    return f"{agent}@{instance_key}"


# -- who sends what -------------------------------------------------------------------------

QUESTION_ANSWERS: Mapping[EventKind, EventKind] = {
    EventKind.PREPARE_INSTANCE: EventKind.PREPARE_INSTANCE_RESULT,
    EventKind.DELETE_INSTANCE: EventKind.DELETE_INSTANCE_RESULT,
    EventKind.RESTART_INSTANCE: EventKind.RESTART_INSTANCE_RESULT,
    EventKind.APPROVAL_DECISION: EventKind.APPROVAL_DECISION_RESULT,
}
"""The questions the Orchestrator asks an agent, and the kind of each answer."""

AGENT_TO_ORCHESTRATOR = frozenset(
    {
        EventKind.READY,
        EventKind.BOOT_FAILED,
        EventKind.STATUS,
        EventKind.TURN_COMPLETED,
        EventKind.SHUTDOWN_ACK,
        EventKind.RUNTIME_EVENT,
        EventKind.TEXT_DELTA,
        EventKind.RESTART_REQUEST,
        EventKind.SEND,
        EventKind.SEND_STARTED,
        EventKind.SEND_DONE,
        EventKind.SEND_REFUSED,
        EventKind.SPAWN_REQUEST,
        EventKind.LIST_REQUEST,
        EventKind.CONFIG_CHECK,
        EventKind.PREPARE_INSTANCE_RESULT,
        EventKind.DELETE_INSTANCE_RESULT,
        EventKind.RESTART_INSTANCE_RESULT,
        EventKind.APPROVAL_DECISION_RESULT,
        EventKind.MODEL_PERMIT,
        EventKind.MODEL_USAGE,
    }
)
"""The kinds an Orchestrator must handle."""
ORCHESTRATOR_TO_AGENT = frozenset(
    {
        EventKind.SEND,
        EventKind.SEND_FAILED,
        EventKind.SPAWN_RESULT,
        EventKind.LIST_RESULT,
        EventKind.CONFIG_CHECK_RESULT,
        EventKind.PREPARE_INSTANCE,
        EventKind.DELETE_INSTANCE,
        EventKind.RESTART_INSTANCE,
        EventKind.APPROVAL_DECISION,
        EventKind.CANCEL,
        EventKind.MODEL_PERMIT_RESULT,
        EventKind.LEADER_CHANGED,
    }
)
"""The kinds an AgentProcess must handle."""
CONNECTOR_TO_ORCHESTRATOR = frozenset(
    {
        EventKind.READY,
        EventKind.BOOT_FAILED,
        EventKind.CONNECTOR_EVENT,
        EventKind.CONNECTOR_HEALTH,
    }
)
"""The kinds a connector's process sends."""
ORCHESTRATOR_TO_CONNECTOR = frozenset({EventKind.CONNECTOR_EVENT_SETTLED})
"""The kinds a connector's process must handle."""
