"""Every error code of the runtime, once, with its meaning and what to do about it; and the
exception tree they hang from.

Codes come in four catalogues, one per audience:

* :data:`CONFIG` — what ``validate`` and ``run`` say about a goondan.yaml (``E_CONFIG_*``);
* :data:`TOOL` — the ``error.code`` of a tool result, what the model reads and acts on;
* :data:`DELIVERY` — why a request to an agent got no answer from a Turn, or the Turn failed;
  what a calling agent, the CLI or an API client gets;
* :data:`HTTP` — the ``error.code`` of the HTTP API's and the studio's own refusals (an answer
  that carries a request's failure uses its :data:`DELIVERY` code); sites name them as
  :class:`HttpCode` members, so a code outside the catalogue fails the type checker;
* :data:`CLI_EXIT` — the exit statuses of the ``goondan`` command.

A code outside these catalogues fails the test suite; the README's tables are generated from
them (``python -m goondan.errors``).

Exceptions follow the same split (in the style of httpx): :class:`GoondanError` is the root of
every error raised on purpose, with :class:`ConfigError`, :class:`ToolFailure`,
:class:`DeliveryError`, :class:`StorageError`, :class:`ModelFailure` and :class:`DaemonError`
below it. Each carries its ``code``.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Mapping

# re-exported: the catalogues' users import everything about codes from here
from goondan.catalogue import HELP_URL as HELP_URL
from goondan.catalogue import Audience as Audience
from goondan.catalogue import Catalogue as Catalogue
from goondan.catalogue import ErrorCode as ErrorCode
from goondan.http_codes import HTTP as HTTP
from goondan.http_codes import HttpCode as HttpCode

CONFIG = Catalogue(
    Audience.CONFIG,
    ErrorCode(
        "E_CONFIG_FILE_NOT_FOUND",
        "the goondan.yaml (or a file it names) does not exist",
        "Check the path; paths in a bundle are relative to its goondan.yaml.",
    ),
    ErrorCode(
        "E_CONFIG_FILE_TOO_LARGE",
        "a configuration file is over 1 MiB",
        "Split it, or move data out of the configuration.",
    ),
    ErrorCode(
        "E_CONFIG_TOO_MANY_DOCUMENTS",
        "a file holds more YAML documents (or nodes) than a configuration needs",
        "Check for a generated or pasted file.",
    ),
    ErrorCode(
        "E_CONFIG_PARSE_ERROR",
        "the YAML does not parse, is not UTF-8, or holds a number that is not finite",
        "Fix the syntax at the line and column named.",
    ),
    ErrorCode(
        "E_CONFIG_UNSUPPORTED_API_VERSION",
        "a resource's apiVersion is not goondan.ai/v1",
        "Use apiVersion: goondan.ai/v1.",
    ),
    ErrorCode(
        "E_CONFIG_UNKNOWN_KIND",
        "a resource's kind is not one of Model, Tool, Agent, Swarm, "
        "Extension, Connector, Connection, Package",
        "Check the spelling of kind.",
    ),
    ErrorCode(
        "E_CONFIG_INVALID_NAME",
        "a resource name is blank, over 63 characters, holds '__', or characters other than "
        "lowercase letters, digits, '-', '_' (and '.' outside Tools)",
        "Use a name like my-agent, starting and ending with a letter or digit.",
    ),
    ErrorCode(
        "E_CONFIG_DUPLICATE_NAME", "two resources of one kind share a name", "Rename one of them."
    ),
    ErrorCode(
        "E_CONFIG_PACKAGE_DOC_DUPLICATED",
        "a file has more than one Package document",
        "Keep one Package document per file.",
    ),
    ErrorCode(
        "E_CONFIG_PACKAGE_DOC_POSITION",
        "the Package document is not the first of its file",
        "Move it to the top.",
    ),
    ErrorCode(
        "E_CONFIG_PACKAGE_NOT_INSTALLED",
        "a dependency of the Package document is not installed in this Python environment, "
        "is of a version outside its range, or provides no such Goondan package",
        "Run `goondan package install` beside the goondan.yaml.",
    ),
    ErrorCode(
        "E_CONFIG_INVALID_REF",
        "a reference is not Kind/name or {kind, name}",
        "Write it as Kind/name.",
    ),
    ErrorCode(
        "E_CONFIG_REF_NOT_FOUND",
        "a reference names no resource of the bundle",
        "Check the name, or add the resource.",
    ),
    ErrorCode(
        "E_CONFIG_SCHEMA_INVALID",
        "a field has the wrong type, a value out of range, or is missing",
        "Fix the field named; the JSON Schema of goondan.yaml lists them all.",
    ),
    ErrorCode(
        "E_CONFIG_ENTRY_NOT_FOUND",
        "a Tool's or Extension's entry file does not exist",
        "Check spec.entry; it is relative to the goondan.yaml.",
    ),
    ErrorCode(
        "E_CONFIG_OUTSIDE_BUNDLE",
        "a path leaves the bundle's directory",
        "Move the file into the bundle, or pass --allow-outside-bundle.",
    ),
    ErrorCode(
        "E_CONFIG_ENTRY_LOAD_FAILED",
        "an entry module raised, exited or hung while it was imported",
        "Run the module by itself and fix the error it shows.",
    ),
    ErrorCode(
        "E_CONFIG_HANDLER_MISSING",
        "an entry module has no handler for an export",
        "Add the export's name to the module's handlers.",
    ),
    ErrorCode(
        "E_CONFIG_SWARM_NOT_FOUND",
        "the Swarm asked for (or any Swarm) is not in the bundle",
        "Name a Swarm of the bundle with --swarm.",
    ),
    ErrorCode(
        "E_CONNECTOR_CONFIG",
        "a connector cannot start as configured (a missing secret, a bad setting)",
        "Fix the Connection's config or secrets; status shows the message.",
    ),
    ErrorCode(
        "E_CONFIG_SECRET_UNAVAILABLE",
        "a valueFrom names an environment variable that is not set, or a malformed secretRef",
        "Set the variable in the daemon's environment.",
    ),
    ErrorCode(
        "E_AGENT_BOOT",
        "the agent cannot start: a Tool of its own does not load",
        "Fix the Tool; validate shows the error.",
    ),
    ErrorCode(
        "E_EXT_LOAD",
        "an Extension module has no register function",
        "Define register(api) in the module.",
    ),
    ErrorCode(
        "E_EXT_INIT",
        "an Extension module failed to import, or its register raised",
        "Fix the error in the message; the agent does not start until then.",
    ),
)

TOOL = Catalogue(
    Audience.TOOL,
    ErrorCode(
        "E_TOOL",
        "the handler raised (sys.exit and KeyboardInterrupt included)",
        "The tool failed with the error above. Check the arguments against the tool's "
        "description and retry, or reach the goal another way.",
    ),
    ErrorCode(
        "E_TOOL_NOT_IN_CATALOG",
        "the name is not in this Step's catalog, whether or not a tool has it",
        "Add the tool to the Agent's spec.tools, or register it dynamically and expose "
        "it from step middleware.",
    ),
    ErrorCode(
        "E_TOOL_NOT_FOUND",
        "a registry call, or a catalog entry, names no tool",
        "Call a tool of the catalog.",
    ),
    ErrorCode(
        "E_TOOL_INVALID_ARGS",
        "the arguments fail the export's JSON Schema; the handler did not run",
        "Fix the fields named and call again.",
    ),
    ErrorCode(
        "E_TOOL_TIMEOUT",
        "the handler ran past its timeout (its own running time)",
        "Ask for less work per call, or raise the Tool's timeoutSeconds.",
    ),
    ErrorCode(
        "E_TOOL_REJECTED",
        "an operator rejected the call, which needed approval (toolPolicy.approval); it did not run",
        "Read the operator's reason, then change the plan or ask the user; do not repeat the call unchanged.",
    ),
    ErrorCode(
        "E_TOOL_APPROVAL_TIMEOUT",
        "the call needed approval and no operator decided within toolPolicy.approval.timeoutSeconds; it did not run",
        "Tell the user the action is waiting for approval, or reach the goal without it.",
    ),
    ErrorCode(
        "E_TOOL_BUSY",
        "no tool thread became free within the call's timeout",
        "Retry later; other conversations of the agent hold every tool thread.",
    ),
    ErrorCode(
        "E_TOOL_MIDDLEWARE",
        "a toolCall middleware raised, or returned something that is not a result",
        "A bug in an extension: see the agent's log.",
    ),
    ErrorCode(
        "E_TOOL_LOAD_FAILED",
        "the Tool's module could not be loaded when first called",
        "Fix the module; the validator shows the error.",
    ),
    ErrorCode(
        "E_TOOL_CALL_LIMIT",
        "the response made more tool calls than one Step runs",
        "Make fewer calls per response.",
    ),
    ErrorCode(
        "E_TOOL_TOO_MANY_PENDING",
        "too many calls of this conversation run in the background",
        "Wait for a pending call to complete first.",
    ),
    ErrorCode(
        "E_TOOL_PENDING_LOST",
        "background work was lost when the agent restarted",
        "Check whether its effect happened, then call again.",
    ),
    ErrorCode(
        "E_TOOL_CANCELLED",
        "not run: the request was cancelled before this call started",
        None,
    ),
    ErrorCode(
        "E_TOOL_INTERRUPTED",
        "the agent process stopped before this call finished",
        "Check whether its effect happened before calling it again.",
    ),
    ErrorCode("E_TOOL_SEARCH_QUERY", "tool_search got an empty query", "Pass words to search for."),
    ErrorCode(
        "E_NO_RUNTIME",
        "the tool needs an Orchestrator and none is attached",
        "Run the agent in a swarm.",
    ),
    ErrorCode(
        "E_AGENT_RUNTIME_UNAVAILABLE",
        "an agents tool was called where no Orchestrator is attached",
        "Run the agent in a swarm.",
    ),
    ErrorCode(
        "E_BASH_PATH_OUTSIDE_WORKDIR",
        "bash's cwd or script path leaves the instance workdir",
        "Use a path inside the workdir.",
    ),
    ErrorCode(
        "E_BASH_CWD_NOT_FOUND",
        "bash's cwd is not an existing directory",
        "Create it first (mkdir -p) or omit cwd to run in the workdir.",
    ),
    ErrorCode(
        "E_BASH_SCRIPT_NOT_FOUND",
        "the script bash should run does not exist",
        "Write the script first (file-system__write), or check the path.",
    ),
    ErrorCode(
        "E_BASH_SPAWN_FAILED",
        "the shell could not be started",
        "Check that the shell exists and is executable.",
    ),
    ErrorCode(
        "E_SANDBOX_UNAVAILABLE",
        "a tool program must run in a sandbox and none can be made on this machine (no "
        "bubblewrap that runs, no user namespaces)",
        "Ask the operator to allow unprivileged user namespaces, or to set the Swarm's "
        "spec.policy.sandbox: off.",
    ),
    ErrorCode(
        "E_FS_PATH_OUTSIDE_WORKDIR",
        "the path leaves the instance workdir, or names a file with more than one hard link "
        "(its data may be another name's, outside the workdir)",
        "Use a path inside the workdir (a hard link: delete that name and write the file anew), "
        "or allow it in the Tool's config.",
    ),
    ErrorCode("E_FS_NOT_FOUND", "no such file or directory", "Check the path with list."),
    ErrorCode("E_FS_NOT_A_DIRECTORY", "a part of the path is not a directory", None),
    ErrorCode("E_FS_IS_A_DIRECTORY", "the path is a directory", "Use list for directories."),
    ErrorCode(
        "E_FS_NOT_A_FILE", "the path is not a regular file (a FIFO, a socket, a device)", None
    ),
    ErrorCode("E_FS_ALREADY_EXISTS", "the path exists already", None),
    ErrorCode("E_FS_NOT_EMPTY", "the directory is not empty", None),
    ErrorCode("E_FS_PERMISSION_DENIED", "the OS refused the access", None),
    ErrorCode(
        "E_FS_WRITE_TOO_LARGE",
        "the content is over the Tool's write limit",
        "Write it in smaller parts.",
    ),
    ErrorCode("E_FS_REFUSED", "the operation is not allowed by the Tool's config", None),
    ErrorCode("E_FS_IO", "another OS error (the message names it)", None),
    ErrorCode(
        "E_HTTP_INVALID_URL", "the URL does not parse or has no host", "Pass an absolute URL."
    ),
    ErrorCode("E_HTTP_UNSUPPORTED_PROTOCOL", "the scheme is not http or https", None),
    ErrorCode(
        "E_HTTP_FORBIDDEN_ADDRESS",
        "the host resolves to a loopback, private, link-local or metadata address",
        "Allow the host in the Tool's config if it is meant.",
    ),
    ErrorCode("E_HTTP_DNS_FAILED", "the host name does not resolve", "Check the host name."),
    ErrorCode("E_HTTP_TOO_MANY_REDIRECTS", "more redirects than the Tool follows", None),
    ErrorCode("E_HTTP_INVALID_HEADER", "a request header is not valid", None),
    ErrorCode(
        "E_HTTP_TIMEOUT", "no complete answer within the timeout", "Retry, or raise timeoutMs."
    ),
    ErrorCode("E_HTTP_TLS_ERROR", "the TLS handshake or certificate check failed", None),
    ErrorCode("E_HTTP_PROTOCOL_ERROR", "the server broke the HTTP protocol", None),
    ErrorCode("E_HTTP_CONNECTION_FAILED", "the connection was refused or reset", "Retry later."),
    ErrorCode(
        "E_TELEGRAM_API_ERROR",
        "the Telegram Bot API answered ok: false (the message has its code and description)",
        "Fix what the description names; do not repeat the call unchanged.",
    ),
    ErrorCode(
        "E_TELEGRAM_RATE_LIMITED",
        "Telegram answered 429 Too Many Requests; the message names retry_after",
        "Wait retry_after seconds, then call again: the call is safe to retry.",
    ),
    ErrorCode(
        "E_SLACK_API_ERROR",
        "the Slack Web API answered ok: false (the message has its error), or refused a download",
        "Fix what the error names; do not repeat the call unchanged.",
    ),
    ErrorCode(
        "E_SLACK_RATE_LIMITED",
        "Slack answered 429 (or ratelimited); the message names Retry-After",
        "Wait Retry-After seconds, then call again: the call is safe to retry.",
    ),
    ErrorCode(
        "E_SLACK_FILE_URL_REFUSED",
        "download_file was given a URL off Slack's file hosts; the bot token is not sent there",
        "Pass a file's url_private, or ask the operator to add the host to fileHosts.",
    ),
    ErrorCode(
        "E_CHAT_TOKEN_MISSING",
        "a telegram, slack, discord or github tool has no usable token (config or environment)",
        "Ask the operator to set the token; retrying will not help.",
    ),
    ErrorCode(
        "E_CHAT_BAD_RESPONSE",
        "the chat API answered with something that is not its JSON, or too much of it",
        "Check the Tool config apiBaseUrl; retry later.",
    ),
    ErrorCode(
        "E_CHAT_FILE_TOO_LARGE",
        "the file to download is over the call's maxBytes",
        "Raise maxBytes (at most 20000000), or do without the file.",
    ),
    ErrorCode(
        "E_CHAT_PATH_OUTSIDE_WORKDIR",
        "a download's savePath leaves the instance workdir",
        "Use a path relative to the workdir.",
    ),
    ErrorCode(
        "E_CHAT_SETTING_INVALID",
        "a setting a tool shares with its connector (TELEGRAM_API_BASE_URL, its allowed hosts, "
        "...) is not valid",
        "Ask the operator to fix the environment variable named; retrying will not help.",
    ),
    ErrorCode(
        "E_DISCORD_API_ERROR",
        "the Discord API answered with an error status (the message has its code and message)",
        "Fix what the message names; an expired interaction (15 minutes) needs discord__send.",
    ),
    ErrorCode(
        "E_DISCORD_RATE_LIMITED",
        "Discord answered 429; the message names retry_after",
        "Wait retry_after seconds, then call again.",
    ),
    ErrorCode(
        "E_DISCORD_NO_INTERACTION",
        "no interaction to answer: the Turn was not started by a Discord interaction",
        "Post with discord__send and a channelId instead.",
    ),
    ErrorCode(
        "E_GITHUB_API_ERROR",
        "the GitHub API answered with an error status (the message has GitHub's message)",
        "Fix what the message names (repo, number, permissions); do not repeat it unchanged.",
    ),
    ErrorCode(
        "E_GITHUB_RATE_LIMITED",
        "GitHub answered 429, or 403 with the rate limit spent; the message names when to retry",
        "Wait the time named, then call again.",
    ),
    ErrorCode("E_JSON_PARSE", "the text is not JSON", "Pass valid JSON."),
    ErrorCode(
        "E_JSON_TYPE_MISMATCH", "the value at the path is not of the type the operation needs", None
    ),
    ErrorCode("E_MCP_TOOL_ERROR", "the MCP tool reported an error", None),
    ErrorCode("E_MCP_TIMEOUT", "the MCP server did not answer in time", "Retry later."),
    ErrorCode("E_MCP_ERROR", "the MCP server refused the request", None),
    ErrorCode(
        "E_MCP_SERVER_UNAVAILABLE",
        "the MCP server is not running, or died",
        "Retry; the next call starts it again.",
    ),
)

DELIVERY = Catalogue(
    Audience.DELIVERY,
    ErrorCode(
        "AGENT_NOT_FOUND",
        "the target is not an agent of the Swarm",
        "Call agents__catalog to see which agents exist.",
    ),
    ErrorCode(
        "CIRCULAR_CALL_DETECTED",
        "the request would close a cycle (A → B → A), within one "
        "chain of requests or across requests",
        "Answer the caller yourself instead of calling back up the chain.",
    ),
    ErrorCode(
        "AGENT_CRASHED",
        "the target process died before answering",
        "The target is being restarted. Retry once, then report the failure.",
    ),
    ErrorCode(
        "AGENT_UNAVAILABLE",
        "the target is in crash-loop backoff, or cannot boot",
        "Retry later; status shows why.",
    ),
    ErrorCode(
        "AGENT_REQUEST_TIMEOUT",
        "no answer within the request's timeout",
        "Retry with a smaller request or a larger timeoutMs.",
    ),
    ErrorCode("SHUTTING_DOWN", "the swarm or the agent is stopping", None),
    ErrorCode(
        "LEADER_LOST",
        "the cluster's leader went away before answering; a standby leader takes over",
        "Ask again through the next leader: whether the request ran is not known.",
    ),
    ErrorCode(
        "CANCELLED",
        "an operator cancelled the request; its Turns stopped at their next safe point",
        "Do not retry unless asked again.",
    ),
    ErrorCode(
        "TOO_MANY_PENDING_REQUESTS",
        "the caller already waits on (or has in flight) 1024 requests or sends",
        "Wait for answers before asking more.",
    ),
    ErrorCode("EMPTY_INPUT", "the request's text is empty or white space", "Send some text."),
    ErrorCode(
        "AGENT_TURN_FAILED",
        "the target ran the Turn and it failed (the Turn's own code is given when it has one)",
        None,
    ),
    ErrorCode(
        "E_MAX_STEPS",
        "the Turn reached maxStepsPerTurn without a text answer",
        "Raise maxStepsPerTurn, or ask for less.",
    ),
    ErrorCode(
        "E_TURN", "a turn or step middleware raised", "A bug in an extension: see the agent's log."
    ),
    ErrorCode("E_MODEL", "the model provider failed", None),
    ErrorCode(
        "E_MODEL_AUTH",
        "the provider refused the API key (the message names where it came from, never the key)",
        "Check the key in the Model's valueFrom.",
    ),
    ErrorCode(
        "E_MODEL_RATE_LIMITED",
        "the provider's rate limit, past the Model's retries (a Model with limits pauses its "
        "whole pool for the provider's retry-after)",
        "Retry later.",
    ),
    ErrorCode(
        "E_MODEL_PERMIT_TIMEOUT",
        "the Model's shared limits (maxConcurrent, requestsPerMinute, tokensPerMinute, or a "
        "429 pause) gave no permit within the model call's timeoutSeconds",
        "Raise the pool's limits, lower the swarm's load, or raise timeoutSeconds.",
    ),
    ErrorCode(
        "E_BUDGET_EXCEEDED",
        "a token or cost budget (turn, instance or trace) is used up; the message names the "
        "budget and its figures, and no model call was made past it",
        "Do not retry the same request; raise the budget or ask for less.",
    ),
    ErrorCode("E_MODEL_API", "the provider answered with an error", None),
    ErrorCode("E_MODEL_CONNECTION", "the provider could not be reached", "Retry later."),
    ErrorCode(
        "E_MODEL_PROVIDER_UNAVAILABLE",
        "the provider's SDK is not installed",
        "Install the extra named in the message.",
    ),
    ErrorCode("E_MODEL_EMPTY_OUTPUT", "the model answered nothing, three times in a row", None),
    ErrorCode(
        "E_MODEL_SCRIPT_NO_MATCH",
        "no rule of the scripted model matches the conversation",
        "Add a rule, or a catch-all rule last.",
    ),
    ErrorCode(
        "E_MODEL_SCRIPT_TEMPLATE",
        "a scripted rule's template names a value it does not have",
        "Fix the template.",
    ),
    ErrorCode("E_MODEL_SCRIPTED_FAILURE", "a scripted rule fails on purpose", None),
    ErrorCode(
        "E_INSTANCE_QUEUE_FULL", "256 Turns already wait in the instance's queue", "Retry later."
    ),
    ErrorCode(
        "E_INSTANCE_KEY_CONFLICT",
        "the instance key maps onto another instance's directory",
        "Use another key.",
    ),
    ErrorCode(
        "E_STORAGE",
        "the conversation could not be written (disk full, read-only)",
        "Free space or fix the mount; nothing already written is lost.",
    ),
    ErrorCode(
        "E_CONVERSATION_UNREADABLE",
        "the conversation cannot be read (the message names the file)",
        "Repair or remove the file named.",
    ),
    ErrorCode(
        "E_MESSAGE_TARGET_NOT_FOUND",
        "a message event names a message the conversation does not have",
        None,
    ),
    ErrorCode(
        "E_INBOX_FULL",
        "an instance's inbox (background results, async answers, send reports) holds 256 "
        "messages; one more is dropped, logged and reported as an inbox.overflow event",
        "Let the instance run a Turn to take what waits.",
    ),
    ErrorCode(
        "E_SPAWN_CWD_REFUSED",
        "agents__spawn asked for a workdir outside the caller's own workspace: the state "
        "directory, anything else in it or a directory holding it (always), or any other path "
        "unless the Swarm's policy.allowSpawnOutsideState is true",
        "Use a directory inside your own workspace (a relative cwd is taken from it).",
    ),
    ErrorCode(
        "E_RESULT_TOO_LARGE", "the answer is over the 16 MiB frame limit", "Answer with less."
    ),
    ErrorCode("E_INTERNAL", "a bug: the agent could not take the request", "See the agent's log."),
    ErrorCode("IPC_ERROR", "an error from the other side without a code", None),
    ErrorCode("IPC_MALFORMED_PAYLOAD", "a message whose payload is not what its kind needs", None),
    ErrorCode("IPC_UNKNOWN_EVENT", "an event of a kind the protocol does not have", None),
)


class ExitCode(enum.IntEnum):
    """The exit statuses of ``goondan`` (as the original runtime's), by meaning; a failing
    command with ``--json`` prints the same number as ``exitCode``."""

    OK = 0
    INTERNAL = 1
    USAGE = 2
    CONFIG = 3
    VALIDATION = 4
    NETWORK = 5
    AUTH = 6
    INTERRUPTED = 130

    @property
    def error_name(self) -> str:
        """``CONFIG_ERROR`` style name, as ``--json`` output carries it."""
        special = {"OK": "OK", "USAGE": "INVALID_ARGUMENT", "INTERRUPTED": "INTERRUPTED"}
        return special.get(self.name, f"{self.name}_ERROR")


CLI_EXIT: Mapping[int, str] = {
    ExitCode.OK: "done",
    ExitCode.INTERNAL: "failed: an internal error, a request refused or failed, a daemon or "
    "cluster that refuses to start",
    ExitCode.USAGE: "usage error: an unknown command or option, two configurations, a missing "
    "--env-file, init over existing files",
    ExitCode.CONFIG: "the configuration cannot be read (no goondan.yaml, unparsable YAML)",
    ExitCode.VALIDATION: "the configuration is invalid (validate --strict: or has warnings)",
    ExitCode.NETWORK: "nobody answers: no daemon running, a daemon gone silent after taking "
    "the request, a cluster or model provider out of reach",
    ExitCode.AUTH: "a credential is missing or refused: a Model's API key or a Connection's "
    "secret (doctor names it), an API token, the cluster's credentials or certificate",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}
"""Exit statuses of ``goondan``."""

CATALOGUES = (CONFIG, TOOL, DELIVERY, HTTP)


def known(code: str) -> bool:
    """Whether ``code`` is in a catalogue."""
    return any(code in catalogue for catalogue in CATALOGUES)


def describe(code: str) -> ErrorCode | None:
    """The catalogue entry of ``code``, whichever audience it belongs to."""
    for catalogue in CATALOGUES:
        if code in catalogue:
            return catalogue[code]
    return None


# -- the exception tree ----------------------------------------------------------------------------


class GoondanError(Exception):
    """The root of every error the runtime raises on purpose; :attr:`code` is in a catalogue."""

    code: str = "E_INTERNAL"


class ConfigError(GoondanError):
    """A configuration cannot be loaded or used (:data:`CONFIG`)."""

    code = "E_CONFIG_SCHEMA_INVALID"


class ToolFailure(GoondanError):
    """A tool call failed in a way the model can act on (:data:`TOOL`)."""

    code = "E_TOOL"


class DeliveryError(GoondanError):
    """A request to an agent got no Turn's answer, or its Turn failed (:data:`DELIVERY`)."""

    code = "IPC_ERROR"


class StorageError(GoondanError):
    """State on disk could not be written or read."""

    code = "E_STORAGE"


def newer_format(path: object, record: str, version: object, supported: int) -> str | None:
    """Why a stored ``record`` (``"metadata"``, ``"conversation"``, ...) at ``path`` is refused
    when its format ``version`` is newer than the ``supported`` one this runtime reads, so it
    is named instead of misread; ``None`` when it is readable."""
    if isinstance(version, int) and not isinstance(version, bool) and version > supported:
        return (
            f"{path} is in {record} format {version}; this runtime reads up to {supported}: "
            "upgrade goondan"
        )
    return None


class ModelFailure(GoondanError):
    """The model provider failed; the Turn fails with the code."""

    code = "E_MODEL"


class DaemonError(GoondanError):
    """The CLI could not reach a daemon, or the daemon refused to start."""

    code = "E_INTERNAL"


def _main() -> None:
    """Print the README tables."""
    for title, catalogue in (
        ("Configuration errors", CONFIG),
        ("Tool results", TOOL),
        ("Requests to agents", DELIVERY),
        ("HTTP API refusals", HTTP),
    ):
        print(f"### {title}\n\n{catalogue.markdown()}\n")
    print("### Exit statuses of `goondan`\n\n| status | meaning |\n|---|---|")
    for status, meaning in CLI_EXIT.items():
        print(f"| {status} | {meaning} |")


if __name__ == "__main__":
    _main()
    sys.exit(0)
