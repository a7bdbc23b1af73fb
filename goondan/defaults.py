"""Every default number of the runtime, written once (DESIGN.md "Numbers").

The config models, the Orchestrator and the AgentProcess import these; a resource may override
most of them (the field is named next to each).
"""

from __future__ import annotations

from typing import Final

DEFAULT_INSTANCE_KEY = "default"
"""The conversation instance of a request that names none."""

# -- Turns and Steps --------------------------------------------------------------------------

MAX_STEPS_PER_TURN = 32
"""Steps a Turn may take without a text answer (``Swarm.spec.policy.maxStepsPerTurn``)."""
ON_MAX_STEPS: Final = "answer"
"""What a Turn that used up its Steps is (``Swarm.spec.policy.onMaxSteps``): ``answer``, its
last text (or a notice) with ``finishReason: max_steps``, as upstream; or ``error``
(``E_MAX_STEPS``)."""
CONCURRENCY: Final = "enqueue"
"""What a message for a conversation whose Turn is running does (``policy.concurrency`` of
the Agent, else of the Swarm): ``enqueue`` (waits its turn), ``reject`` (refused
``INSTANCE_BUSY``) or ``interrupt`` (the running Turn stops at its next Step boundary and the
new one sees both messages)."""
MAX_TOOL_CALLS_PER_STEP = 32
"""Calls of one model response that run; the rest are answered ``E_TOOL_CALL_LIMIT``
(``Agent.spec.maxToolCallsPerStep``)."""
ERROR_MESSAGE_LIMIT = 1000
"""Characters kept of a tool error's message (``Tool.spec.errorMessageLimit``)."""
TOOL_TIMEOUT_SECONDS = 300.0
"""A tool handler's running time when neither the Tool nor the policy sets one."""
MAX_BACKGROUND_CALLS_PER_INSTANCE = 16
"""Tool calls of one instance that may run on in the background (answered ``pending``)."""
APPROVAL_TIMEOUT_SECONDS = 3600.0
"""How long a tool call parked for human approval waits for a decision before it is answered
``E_TOOL_APPROVAL_TIMEOUT`` (``Agent.spec.toolPolicy.approval.timeoutSeconds``)."""

MODEL_TIMEOUT_SECONDS = 60.0
"""One model call's timeout (``Model.spec.timeoutSeconds``)."""
MODEL_MAX_RETRIES = 2
"""Retries of a model call on 429 and 5xx (``Model.spec.maxRetries``)."""
MODEL_MAX_TOKENS = 1000
"""The output a model call reserves against budgets when neither the Agent nor the Model sets
``maxTokens``; the ``anthropic`` provider asks for as much (its API needs a figure)."""

# -- requests between agents ------------------------------------------------------------------

REQUEST_TIMEOUT_SECONDS = 60.0
"""An ``agents__request`` without ``timeoutMs`` (``Swarm.spec.policy.requestTimeoutSeconds``)."""
REQUEST_TIMEOUT_MS = int(REQUEST_TIMEOUT_SECONDS * 1000)
MAX_REQUEST_TIMEOUT_MS = 7 * 24 * 3600 * 1000
"""The longest request timeout (a week, as for every timeout of the configuration): the HTTP
API refuses more, and a longer one from a model is cut to it."""
MAX_PENDING_PER_CALLER = 1024
"""Requests one caller may wait on at once (``TOO_MANY_PENDING_REQUESTS`` past it)."""
MAX_SENDS_IN_FLIGHT_PER_CALLER = 1024
"""Sends of one caller delivered but not finished."""
SEND_DELIVERY_ATTEMPTS = 2
"""A send whose target died before starting its Turn is delivered once more, then reported."""
MAX_TURN_ATTEMPTS = 3
"""Attempts at one Turn whose agent dies under it before its caller is answered
``AGENT_CRASHED`` (``policy.crash.maxTurnAttempts``)."""
AGENT_QUESTION_TIMEOUT_SECONDS = 10.0
"""How long the Orchestrator waits for an agent's answer to a question of its own (prepare or
delete an instance)."""
ANSWER_SAFETY_MARGIN_SECONDS = 5.0
"""How much longer than a request's own timeout its caller waits before giving up by itself (the
Orchestrator answers at the timeout; this guards against an Orchestrator that vanished)."""

# -- instances ----------------------------------------------------------------------------------

MAX_QUEUED_TURNS_PER_INSTANCE = 256
"""Turns waiting in one instance's queue; one more is refused (``E_INSTANCE_QUEUE_FULL``)."""
MAX_INBOX_PER_INSTANCE = 256
"""Messages (background completions, async answers, send reports) an instance's inbox holds."""

# -- processes ----------------------------------------------------------------------------------

SHUTDOWN_GRACE_SECONDS = 300.0
"""How long running Turns may finish when an agent stops (``Swarm.spec.policy.shutdown``).
Upstream's documented figure: a bound, not a wait (a drain ends when its Turns do), long enough
for a Turn of many Steps and delegations to finish at a restart instead of being cut."""
READY_TIMEOUT_SECONDS = 30.0
"""How long a new AgentProcess may take to report ready."""
KILL_WAIT_SECONDS = 2.0
"""After SIGTERM, how long the supervisor waits before SIGKILL."""
CRASH_THRESHOLD = 5
"""Crashes in a row restarted at once before backoff starts."""
INITIAL_BACKOFF_SECONDS = 1.0
"""The first backoff delay (crash ``CRASH_THRESHOLD + 1``); it doubles with every crash."""
MAX_BACKOFF_SECONDS = 300.0
"""The longest backoff delay."""
QUICK_EXIT_SECONDS = 10.0
"""A clean exit nobody asked for this soon after ready counts toward backoff once
``CRASH_THRESHOLD`` of them come in a row (an agent that exits 0 right after every start)."""
RECONCILE_INTERVAL_SECONDS = 5.0
"""How often the supervisor checks that every wanted agent runs."""

# -- the wire -----------------------------------------------------------------------------------

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""Largest IPC message body: far above any real message, small enough that one bad peer cannot
make the Orchestrator buffer gigabytes."""

# -- connectors ---------------------------------------------------------------------------------

CONNECTOR_EVENTS_IN_FLIGHT = 256
"""Events of one Connection between ``emit`` and the end of their Turn; past it, the
connector's ``emit`` waits (back-pressure instead of an unbounded queue)."""
CONNECTIONS_DIR = "connections"
"""Under the state directory, a directory per Connection for its connector's own state (the
connector writes it, the Orchestrator reads what was delivered from it)."""

INSTANCE_METADATA_FORMAT = 1
"""``formatVersion`` of an instance's ``metadata.json`` (written by agents, read by the CLI
too); a reader meeting a newer one refuses it instead of misreading it."""
EVENT_LOG_FORMAT = 1
"""``formatVersion`` of the runtime event log, in the ``eventlog.opened`` line heading each
file."""
