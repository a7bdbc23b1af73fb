"""What each code of :mod:`goondan.error_codes` means and what to do about it, and the
catalogues built from them: each catalogue is built from its enum, in the enum's order, so a
member without its meaning (or a meaning without its member) fails this module's import."""

from __future__ import annotations

from goondan.catalogue import Audience, Catalogue, ErrorCode
from goondan.error_codes import ConfigCode, DeliveryCode, ToolCode

_CONFIG_MEANINGS: dict[ConfigCode, tuple[str, str | None]] = {
    ConfigCode.E_CONFIG_FILE_NOT_FOUND: (
        "the goondan.yaml (or a file it names) does not exist",
        "Check the path; paths in a bundle are relative to its goondan.yaml.",
    ),
    ConfigCode.E_CONFIG_FILE_TOO_LARGE: (
        "a configuration file is over 1 MiB",
        "Split it, or move data out of the configuration.",
    ),
    ConfigCode.E_CONFIG_TOO_MANY_DOCUMENTS: (
        "a file holds more YAML documents (or nodes) than a configuration needs",
        "Check for a generated or pasted file.",
    ),
    ConfigCode.E_CONFIG_PARSE_ERROR: (
        "the YAML does not parse, is not UTF-8, or holds a number that is not finite",
        "Fix the syntax at the line and column named.",
    ),
    ConfigCode.E_CONFIG_UNSUPPORTED_API_VERSION: (
        "a resource's apiVersion is not goondan.ai/v1",
        "Use apiVersion: goondan.ai/v1.",
    ),
    ConfigCode.E_CONFIG_UNKNOWN_KIND: (
        "a resource's kind is not one of Model, Tool, Agent, Swarm, "
        "Extension, Connector, Connection, Package",
        "Check the spelling of kind.",
    ),
    ConfigCode.E_CONFIG_INVALID_NAME: (
        "a resource name is blank, over 63 characters, holds '__', or characters other than "
        "lowercase letters, digits, '-', '_' (and '.' outside Tools)",
        "Use a name like my-agent, starting and ending with a letter or digit.",
    ),
    ConfigCode.E_CONFIG_DUPLICATE_NAME: (
        "two resources of one kind share a name",
        "Rename one of them.",
    ),
    ConfigCode.E_CONFIG_PACKAGE_DOC_DUPLICATED: (
        "a file has more than one Package document",
        "Keep one Package document per file.",
    ),
    ConfigCode.E_CONFIG_PACKAGE_DOC_POSITION: (
        "the Package document is not the first of its file",
        "Move it to the top.",
    ),
    ConfigCode.E_CONFIG_PACKAGE_NOT_INSTALLED: (
        "a dependency of the Package document is not installed in this Python environment, "
        "is of a version outside its range, or provides no such Goondan package",
        "Run `goondan package install` beside the goondan.yaml.",
    ),
    ConfigCode.E_CONFIG_INVALID_REF: (
        "a reference is not Kind/name or {kind, name}",
        "Write it as Kind/name.",
    ),
    ConfigCode.E_CONFIG_REF_NOT_FOUND: (
        "a reference names no resource of the bundle",
        "Check the name, or add the resource.",
    ),
    ConfigCode.E_CONFIG_SCHEMA_INVALID: (
        "a field has the wrong type, a value out of range, or is missing",
        "Fix the field named; the JSON Schema of goondan.yaml lists them all.",
    ),
    ConfigCode.E_CONFIG_ENTRY_NOT_FOUND: (
        "a Tool's or Extension's entry file does not exist",
        "Check spec.entry; it is relative to the goondan.yaml.",
    ),
    ConfigCode.E_CONFIG_OUTSIDE_BUNDLE: (
        "a path leaves the bundle's directory",
        "Move the file into the bundle, or pass --allow-outside-bundle.",
    ),
    ConfigCode.E_CONFIG_ENTRY_LOAD_FAILED: (
        "an entry module raised, exited or hung while it was imported",
        "Run the module by itself and fix the error it shows.",
    ),
    ConfigCode.E_CONFIG_HANDLER_MISSING: (
        "an entry module has no handler for an export",
        "Add the export's name to the module's handlers.",
    ),
    ConfigCode.E_CONFIG_SWARM_NOT_FOUND: (
        "the Swarm asked for (or any Swarm) is not in the bundle",
        "Name a Swarm of the bundle with --swarm.",
    ),
    ConfigCode.E_CONNECTOR_CONFIG: (
        "a connector cannot start as configured (a missing secret, a bad setting)",
        "Fix the Connection's config or secrets; status shows the message.",
    ),
    ConfigCode.E_CONFIG_SECRET_UNAVAILABLE: (
        "a valueFrom names an environment variable that is not set, or a malformed secretRef",
        "Set the variable in the daemon's environment.",
    ),
    ConfigCode.E_AGENT_BOOT: (
        "the agent cannot start: a Tool of its own does not load",
        "Fix the Tool; validate shows the error.",
    ),
    ConfigCode.E_EXT_LOAD: (
        "an Extension module has no register function",
        "Define register(api) in the module.",
    ),
    ConfigCode.E_EXT_INIT: (
        "an Extension module failed to import, or its register raised",
        "Fix the error in the message; the agent does not start until then.",
    ),
}

CONFIG = Catalogue(
    Audience.CONFIG, *(ErrorCode(code, *_CONFIG_MEANINGS[code]) for code in ConfigCode)
)
"""The catalogue of :class:`ConfigCode`, in its order."""

_TOOL_MEANINGS: dict[ToolCode, tuple[str, str | None]] = {
    ToolCode.E_TOOL: (
        "the handler raised (sys.exit and KeyboardInterrupt included)",
        "The tool failed with the error above. Check the arguments against the tool's "
        "description and retry, or reach the goal another way.",
    ),
    ToolCode.E_TOOL_NOT_IN_CATALOG: (
        "the name is not in this Step's catalog, whether or not a tool has it",
        "Add the tool to the Agent's spec.tools, or register it dynamically and expose "
        "it from step middleware.",
    ),
    ToolCode.E_TOOL_NOT_FOUND: (
        "a registry call, or a catalog entry, names no tool",
        "Call a tool of the catalog.",
    ),
    ToolCode.E_TOOL_INVALID_ARGS: (
        "the arguments fail the export's JSON Schema; the handler did not run",
        "Fix the fields named and call again.",
    ),
    ToolCode.E_TOOL_TIMEOUT: (
        "the handler ran past its timeout (its own running time)",
        "Ask for less work per call, or raise the Tool's timeoutSeconds.",
    ),
    ToolCode.E_TOOL_REJECTED: (
        "an operator rejected the call, which needed approval (toolPolicy.approval); it did not run",
        "Read the operator's reason, then change the plan or ask the user; do not repeat the call unchanged.",
    ),
    ToolCode.E_TOOL_APPROVAL_TIMEOUT: (
        "the call needed approval and no operator decided within toolPolicy.approval.timeoutSeconds; it did not run",
        "Tell the user the action is waiting for approval, or reach the goal without it.",
    ),
    ToolCode.E_TOOL_BUSY: (
        "no tool thread became free within the call's timeout",
        "Retry later; other conversations of the agent hold every tool thread.",
    ),
    ToolCode.E_TOOL_MIDDLEWARE: (
        "a toolCall middleware raised, or returned something that is not a result",
        "A bug in an extension: see the agent's log.",
    ),
    ToolCode.E_TOOL_LOAD_FAILED: (
        "the Tool's module could not be loaded when first called",
        "Fix the module; the validator shows the error.",
    ),
    ToolCode.E_TOOL_CALL_LIMIT: (
        "the response made more tool calls than one Step runs",
        "Make fewer calls per response.",
    ),
    ToolCode.E_TOOL_TOO_MANY_PENDING: (
        "too many calls of this conversation run in the background",
        "Wait for a pending call to complete first.",
    ),
    ToolCode.E_TOOL_PENDING_LOST: (
        "background work was lost when the agent restarted",
        "Check whether its effect happened, then call again.",
    ),
    ToolCode.E_TOOL_CANCELLED: (
        "not run: the request was cancelled before this call started",
        None,
    ),
    ToolCode.E_TOOL_INTERRUPTED: (
        "the agent process stopped before this call finished",
        "Check whether its effect happened before calling it again.",
    ),
    ToolCode.E_TOOL_SEARCH_QUERY: ("tool_search got an empty query", "Pass words to search for."),
    ToolCode.E_NO_RUNTIME: (
        "the tool needs an Orchestrator and none is attached",
        "Run the agent in a swarm.",
    ),
    ToolCode.E_AGENT_RUNTIME_UNAVAILABLE: (
        "an agents tool was called where no Orchestrator is attached",
        "Run the agent in a swarm.",
    ),
    ToolCode.E_BASH_PATH_OUTSIDE_WORKDIR: (
        "bash's cwd or script path leaves the instance workdir",
        "Use a path inside the workdir.",
    ),
    ToolCode.E_BASH_CWD_NOT_FOUND: (
        "bash's cwd is not an existing directory",
        "Create it first (mkdir -p) or omit cwd to run in the workdir.",
    ),
    ToolCode.E_BASH_SCRIPT_NOT_FOUND: (
        "the script bash should run does not exist",
        "Write the script first (file-system__write), or check the path.",
    ),
    ToolCode.E_BASH_SPAWN_FAILED: (
        "the shell could not be started",
        "Check that the shell exists and is executable.",
    ),
    ToolCode.E_SANDBOX_UNAVAILABLE: (
        "a tool program must run in a sandbox and none can be made on this machine (no "
        "bubblewrap that runs, no user namespaces)",
        "Ask the operator to allow unprivileged user namespaces, or to set the Swarm's "
        "spec.policy.sandbox: off.",
    ),
    ToolCode.E_WORKSPACE_QUOTA: (
        "the workspace is over the Tool's disk quota (sandbox.diskMiB), or its disk is nearly "
        "full: the write was refused, or the running program was ended",
        "Delete files the workspace no longer needs, or ask the operator to raise diskMiB.",
    ),
    ToolCode.E_FS_PATH_OUTSIDE_WORKDIR: (
        "the path leaves the instance workdir, or names a file with more than one hard link "
        "(its data may be another name's, outside the workdir)",
        "Use a path inside the workdir (a hard link: delete that name and write the file anew), "
        "or allow it in the Tool's config.",
    ),
    ToolCode.E_FS_NOT_FOUND: ("no such file or directory", "Check the path with list."),
    ToolCode.E_FS_NOT_A_DIRECTORY: ("a part of the path is not a directory", None),
    ToolCode.E_FS_IS_A_DIRECTORY: ("the path is a directory", "Use list for directories."),
    ToolCode.E_FS_NOT_A_FILE: ("the path is not a regular file (a FIFO, a socket, a device)", None),
    ToolCode.E_FS_ALREADY_EXISTS: ("the path exists already", None),
    ToolCode.E_FS_NOT_EMPTY: ("the directory is not empty", None),
    ToolCode.E_FS_PERMISSION_DENIED: ("the OS refused the access", None),
    ToolCode.E_FS_WRITE_TOO_LARGE: (
        "the content is over the Tool's write limit",
        "Write it in smaller parts.",
    ),
    ToolCode.E_FS_REFUSED: ("the operation is not allowed by the Tool's config", None),
    ToolCode.E_FS_IO: ("another OS error (the message names it)", None),
    ToolCode.E_HTTP_INVALID_URL: ("the URL does not parse or has no host", "Pass an absolute URL."),
    ToolCode.E_HTTP_UNSUPPORTED_PROTOCOL: ("the scheme is not http or https", None),
    ToolCode.E_HTTP_FORBIDDEN_ADDRESS: (
        "the host resolves to a loopback, private, link-local or metadata address",
        "Allow the host in the Tool's config if it is meant.",
    ),
    ToolCode.E_HTTP_DNS_FAILED: ("the host name does not resolve", "Check the host name."),
    ToolCode.E_HTTP_TOO_MANY_REDIRECTS: ("more redirects than the Tool follows", None),
    ToolCode.E_HTTP_INVALID_HEADER: ("a request header is not valid", None),
    ToolCode.E_HTTP_TIMEOUT: (
        "no complete answer within the timeout",
        "Retry, or raise timeoutMs.",
    ),
    ToolCode.E_HTTP_TLS_ERROR: ("the TLS handshake or certificate check failed", None),
    ToolCode.E_HTTP_PROTOCOL_ERROR: ("the server broke the HTTP protocol", None),
    ToolCode.E_HTTP_CONNECTION_FAILED: ("the connection was refused or reset", "Retry later."),
    ToolCode.E_TELEGRAM_API_ERROR: (
        "the Telegram Bot API answered ok: false (the message has its code and description)",
        "Fix what the description names; do not repeat the call unchanged.",
    ),
    ToolCode.E_TELEGRAM_RATE_LIMITED: (
        "Telegram answered 429 Too Many Requests; the message names retry_after",
        "Wait retry_after seconds, then call again: the call is safe to retry.",
    ),
    ToolCode.E_SLACK_API_ERROR: (
        "the Slack Web API answered ok: false (the message has its error), or refused a download",
        "Fix what the error names; do not repeat the call unchanged.",
    ),
    ToolCode.E_SLACK_RATE_LIMITED: (
        "Slack answered 429 (or ratelimited); the message names Retry-After",
        "Wait Retry-After seconds, then call again: the call is safe to retry.",
    ),
    ToolCode.E_SLACK_FILE_URL_REFUSED: (
        "download_file was given a URL off Slack's file hosts; the bot token is not sent there",
        "Pass a file's url_private, or ask the operator to add the host to fileHosts.",
    ),
    ToolCode.E_CHAT_TOKEN_MISSING: (
        "a telegram, slack, discord or github tool has no usable token (config or environment)",
        "Ask the operator to set the token; retrying will not help.",
    ),
    ToolCode.E_CHAT_BAD_RESPONSE: (
        "the chat API answered with something that is not its JSON, or too much of it",
        "Check the Tool config apiBaseUrl; retry later.",
    ),
    ToolCode.E_CHAT_FILE_TOO_LARGE: (
        "the file to download is over the call's maxBytes",
        "Raise maxBytes (at most 20000000), or do without the file.",
    ),
    ToolCode.E_CHAT_PATH_OUTSIDE_WORKDIR: (
        "a download's savePath leaves the instance workdir",
        "Use a path relative to the workdir.",
    ),
    ToolCode.E_CHAT_SETTING_INVALID: (
        "a setting a tool shares with its connector (TELEGRAM_API_BASE_URL, its allowed hosts, "
        "...) is not valid",
        "Ask the operator to fix the environment variable named; retrying will not help.",
    ),
    ToolCode.E_DISCORD_API_ERROR: (
        "the Discord API answered with an error status (the message has its code and message)",
        "Fix what the message names; an expired interaction (15 minutes) needs discord__send.",
    ),
    ToolCode.E_DISCORD_RATE_LIMITED: (
        "Discord answered 429; the message names retry_after",
        "Wait retry_after seconds, then call again.",
    ),
    ToolCode.E_DISCORD_NO_INTERACTION: (
        "no interaction to answer: the Turn was not started by a Discord interaction",
        "Post with discord__send and a channelId instead.",
    ),
    ToolCode.E_GITHUB_API_ERROR: (
        "the GitHub API answered with an error status (the message has GitHub's message)",
        "Fix what the message names (repo, number, permissions); do not repeat it unchanged.",
    ),
    ToolCode.E_GITHUB_RATE_LIMITED: (
        "GitHub answered 429, or 403 with the rate limit spent; the message names when to retry",
        "Wait the time named, then call again.",
    ),
    ToolCode.E_JSON_PARSE: ("the text is not JSON", "Pass valid JSON."),
    ToolCode.E_JSON_TYPE_MISMATCH: (
        "the value at the path is not of the type the operation needs",
        None,
    ),
    ToolCode.E_MCP_TOOL_ERROR: ("the MCP tool reported an error", None),
    ToolCode.E_MCP_TIMEOUT: ("the MCP server did not answer in time", "Retry later."),
    ToolCode.E_MCP_ERROR: ("the MCP server refused the request", None),
    ToolCode.E_MCP_SERVER_UNAVAILABLE: (
        "the MCP server is not running, or died",
        "Retry; the next call starts it again.",
    ),
}

TOOL = Catalogue(Audience.TOOL, *(ErrorCode(code, *_TOOL_MEANINGS[code]) for code in ToolCode))
"""The catalogue of :class:`ToolCode`, in its order."""

_DELIVERY_MEANINGS: dict[DeliveryCode, tuple[str, str | None]] = {
    DeliveryCode.AGENT_NOT_FOUND: (
        "the target is not an agent of the Swarm",
        "Call agents__catalog to see which agents exist.",
    ),
    DeliveryCode.CIRCULAR_CALL_DETECTED: (
        "the request would close a cycle (A → B → A), within one "
        "chain of requests or across requests",
        "Answer the caller yourself instead of calling back up the chain.",
    ),
    DeliveryCode.AGENT_CRASHED: (
        "the target process died under the Turn policy.crash.maxTurnAttempts times, or at "
        "every start made for the request (a Turn whose agent dies fewer times resumes once "
        "it is back)",
        "The Turn itself kills its agent: report the failure rather than retrying it.",
    ),
    DeliveryCode.AGENT_UNAVAILABLE: (
        "the target is in crash-loop backoff, or cannot boot",
        "Retry later; status shows why.",
    ),
    DeliveryCode.AGENT_REQUEST_TIMEOUT: (
        "no answer within the request's timeout",
        "Retry with a smaller request or a larger timeoutMs.",
    ),
    DeliveryCode.SHUTTING_DOWN: ("the swarm or the agent is stopping", None),
    DeliveryCode.LEADER_LOST: (
        "the cluster's leader went away before answering; a standby leader takes over",
        "Ask again through the next leader: whether the request ran is not known.",
    ),
    DeliveryCode.CANCELLED: (
        "an operator cancelled the request; its Turns stopped at their next safe point",
        "Do not retry unless asked again.",
    ),
    DeliveryCode.TOO_MANY_PENDING_REQUESTS: (
        "the caller already waits on (or has in flight) 1024 requests or sends",
        "Wait for answers before asking more.",
    ),
    DeliveryCode.EMPTY_INPUT: ("the request's text is empty or white space", "Send some text."),
    DeliveryCode.AGENT_TURN_FAILED: (
        "the target ran the Turn and it failed (the Turn's own code is given when it has one)",
        None,
    ),
    DeliveryCode.E_MAX_STEPS: (
        "the Turn reached maxStepsPerTurn without a text answer",
        "Raise maxStepsPerTurn, or ask for less.",
    ),
    DeliveryCode.E_TURN: (
        "a turn or step middleware raised",
        "A bug in an extension: see the agent's log.",
    ),
    DeliveryCode.E_MODEL: ("the model provider failed", None),
    DeliveryCode.E_MODEL_AUTH: (
        "the provider refused the API key (the message names where it came from, never the key)",
        "Check the key in the Model's valueFrom.",
    ),
    DeliveryCode.E_MODEL_RATE_LIMITED: (
        "the provider's rate limit, past the Model's retries (a Model with limits pauses its "
        "whole pool for the provider's retry-after)",
        "Retry later.",
    ),
    DeliveryCode.E_MODEL_PERMIT_TIMEOUT: (
        "the Model's shared limits (maxConcurrent, requestsPerMinute, tokensPerMinute, or a "
        "429 pause) gave no permit within the model call's timeoutSeconds",
        "Raise the pool's limits, lower the swarm's load, or raise timeoutSeconds.",
    ),
    DeliveryCode.E_BUDGET_EXCEEDED: (
        "a token or cost budget (turn, instance or trace) is used up; the message names the "
        "budget and its figures, and no model call was made past it",
        "Do not retry the same request; raise the budget or ask for less.",
    ),
    DeliveryCode.E_MODEL_API: ("the provider answered with an error", None),
    DeliveryCode.E_MODEL_CONNECTION: ("the provider could not be reached", "Retry later."),
    DeliveryCode.E_MODEL_PROVIDER_UNAVAILABLE: (
        "the provider's SDK is not installed",
        "Install the extra named in the message.",
    ),
    DeliveryCode.E_MODEL_EMPTY_OUTPUT: ("the model answered nothing, three times in a row", None),
    DeliveryCode.E_MODEL_SCRIPT_NO_MATCH: (
        "no rule of the scripted model matches the conversation",
        "Add a rule, or a catch-all rule last.",
    ),
    DeliveryCode.E_MODEL_SCRIPT_TEMPLATE: (
        "a scripted rule's template names a value it does not have",
        "Fix the template.",
    ),
    DeliveryCode.E_MODEL_SCRIPTED_FAILURE: ("a scripted rule fails on purpose", None),
    DeliveryCode.E_INSTANCE_QUEUE_FULL: (
        "256 Turns already wait in the instance's queue",
        "Retry later.",
    ),
    DeliveryCode.INSTANCE_BUSY: (
        "the conversation is running a Turn and its agent's policy.concurrency is reject "
        "(409 over HTTP)",
        "Retry once the running Turn has answered.",
    ),
    DeliveryCode.E_INSTANCE_KEY_CONFLICT: (
        "the instance key maps onto another instance's directory",
        "Use another key.",
    ),
    DeliveryCode.E_STORAGE: (
        "the conversation could not be written (disk full, read-only)",
        "Free space or fix the mount; nothing already written is lost.",
    ),
    DeliveryCode.E_CONVERSATION_UNREADABLE: (
        "the conversation cannot be read (the message names the file)",
        "Repair or remove the file named.",
    ),
    DeliveryCode.E_MESSAGE_TARGET_NOT_FOUND: (
        "a message event names a message the conversation does not have",
        None,
    ),
    DeliveryCode.E_INBOX_FULL: (
        "an instance's inbox (background results, async answers, send reports) holds 256 "
        "messages; one more is dropped, logged and reported as an inbox.overflow event",
        "Let the instance run a Turn to take what waits.",
    ),
    DeliveryCode.E_SPAWN_CWD_REFUSED: (
        "agents__spawn asked for a workdir outside the caller's own workspace: the state "
        "directory, anything else in it or a directory holding it (always), or any other path "
        "unless the Swarm's policy.allowSpawnOutsideState is true; or an instance's workdir is "
        "no longer the directory it was given (swapped for a symlink, replaced or moved), "
        "refused at each tool call and on load",
        "Use a directory inside your own workspace (a relative cwd is taken from it); restore "
        "a swapped workdir, or delete the instance.",
    ),
    DeliveryCode.E_RESULT_TOO_LARGE: (
        "the answer is over the 16 MiB frame limit",
        "Answer with less.",
    ),
    DeliveryCode.E_INTERNAL: (
        "a bug: the agent could not take the request",
        "See the agent's log.",
    ),
    DeliveryCode.IPC_ERROR: ("an error from the other side without a code", None),
    DeliveryCode.IPC_MALFORMED_PAYLOAD: (
        "a message whose payload is not what its kind needs",
        None,
    ),
    DeliveryCode.IPC_UNKNOWN_EVENT: ("an event of a kind the protocol does not have", None),
    DeliveryCode.REMOTE_AGENT_FAILED: (
        "the RemoteAgent (an A2A agent elsewhere) could not be reached, or its task failed, was "
        "rejected, needs other credentials or asks for more input (the message says which)",
        "Report the failure; retry only if the message says the remote was unreachable.",
    ),
}

DELIVERY = Catalogue(
    Audience.DELIVERY, *(ErrorCode(code, *_DELIVERY_MEANINGS[code]) for code in DeliveryCode)
)
"""The catalogue of :class:`DeliveryCode`, in its order."""
