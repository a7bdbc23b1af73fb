"""The argument parser of every command (also what shell completion reads).

Parsing imports no command's module: each command is named here by where its function lives
(:class:`~orchestrator.cli.commands.LazyCommand`), imported when it runs, and only the command given has its arguments
built (their declarations may import what that command needs anyway). ``--help`` alone, or a
completion of the command's name, builds none: the interpreter's start and ``argparse`` are
all they cost.
"""

from __future__ import annotations

import argparse
import os
import sys

from orchestrator.cli.commands import COMMANDS, NO_COMMAND, LazyCommand, Parser, command_in

__all__ = ["COMMANDS", "NO_COMMAND", "build_parser", "command_in", "run_parser"]

TEMPLATE_NAMES = ("offline", "openai", "anthropic", "multi-agent")
"""``init`` templates (orchestrator/templates; kept here so parsing imports nothing)."""
DEFAULT_REATTACH_SECONDS = 20.0
"""How long ``send`` waits for a daemon that went away mid-answer to come back."""

STREAM_HELP = (
    "print the answer's text as it is produced, the agents it asks included, each Step on a "
    "line of its own; with --json, one JSON object per line ({event: delta|approval, ...}), "
    "the last one what --json prints without --stream"
)
"""``--stream``, as ``send`` and ``run`` describe it."""
MCP_HELP = (
    "serve the running daemon's agents as MCP tools over stdio (for MCP clients that start "
    "their servers: a config runs `python -m orchestrator mcp --state-dir DIR`); needs the "
    "`mcp` extra"
)
"""``mcp`` in the list of commands."""


def run_parser() -> argparse.ArgumentParser:
    """The parser of ``run`` alone (its options are what ``run --detach`` hands the daemon)."""
    for action in build_parser("run")._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices["run"]
            assert isinstance(sub, argparse.ArgumentParser)
            return sub
    raise LookupError("no run command")


def program_name() -> str:
    """How the user called us, as usage lines should say it: ``goondan`` for the installed
    command, else ``python -m orchestrator``."""
    return "goondan" if os.path.basename(sys.argv[0]) == "goondan" else "python -m orchestrator"


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand and its arguments; with ``only``, that
    command alone (argparse dispatches to the command named only); with :data:`NO_COMMAND`,
    every command listed (for ``--help`` and for an unknown command's error), none with its
    arguments. Each parser argparse builds costs (its ``gettext`` calls look for translations
    on disk): a command's start builds three."""
    parser = Parser(
        prog=program_name(),
        description="Run and manage Goondan agent swarms.",
        epilog="Exit statuses: 0 ok, 1 internal or failed, 2 usage, 3 configuration unreadable, "
        "4 configuration invalid, 5 network (no daemon, a peer out of reach), 6 a credential "
        "missing or refused, 130 interrupted.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    parser.add_argument(
        "--version", action="store_true", help="print the version (as JSON with --json)"
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    cmds = _Commands(commands, only)
    for add in _GROUPS:
        add(cmds)
    return parser


def _common_options() -> Parser:
    """The output options every command shares (a parent of each command's parser)."""
    common = Parser(add_help=False)
    group = common.add_argument_group("output")
    group.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log lines (-vv: debug)"
    )
    group.add_argument("-q", "--quiet", action="store_true", help="errors only in the log")
    group.add_argument("--no-color", action="store_true", help="no colours on a terminal")
    return common


class _Commands:
    """The subcommands being added; ``only``: the command wanted (see :func:`build_parser`).
    A plain class: ``dataclasses`` would cost ``--help`` a third of its imports."""

    __slots__ = ("_common", "commands", "only")

    def __init__(self, commands: argparse._SubParsersAction[Parser], only: str | None) -> None:
        self.commands = commands
        self.only = only
        self._common: Parser | None = None

    @property
    def common(self) -> Parser:
        """The output options every command shares (built when a command is)."""
        if self._common is None:
            self._common = _common_options()
        return self._common

    def add(self, name: str, help: str, run: str) -> argparse.ArgumentParser | None:
        """Add command ``name``, run by the function ``run`` names (``module:function``, the
        module's name under ``orchestrator.cli``); its parser when its arguments are wanted,
        else ``None``."""
        if self.only == NO_COMMAND:  # listed, never parsed
            self.commands.add_parser(name, help=help, add_help=False)
            return None
        if self.only not in (None, name):
            return None
        sub = self.commands.add_parser(name, help=help, parents=[self.common])
        sub.set_defaults(run=LazyCommand(f"orchestrator.cli.{run}"))
        return sub


def _default_instance() -> str:
    from goondan.defaults import DEFAULT_INSTANCE_KEY

    return DEFAULT_INSTANCE_KEY


def _config_option(sub: argparse.ArgumentParser, what: str = "the configuration") -> None:
    sub.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help=f"{what}: goondan.yaml or a bundle directory (default: goondan.yaml here)",
    )
    sub.add_argument("-c", "--config", metavar="FILE", help="the same, as an option")


def _state_options(sub: argparse.ArgumentParser) -> None:
    from orchestrator.state_dir import add_state_options

    add_state_options(sub)


def _env_file_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--env-file",
        metavar="PATH",
        help="variables to load after .env and .env.local beside the configuration (they "
        "win over the environment; a missing file is an error)",
    )


def _cluster_options(sub: argparse.ArgumentParser, required: bool) -> None:
    group = sub.add_argument_group(
        "cluster",
        "several hosts over NATS (extra `cluster`); a password or token comes from "
        "GOONDAN_NATS_PASSWORD (with GOONDAN_NATS_USER) or GOONDAN_NATS_TOKEN, the key "
        "every member shares (signing leadership records) from GOONDAN_CLUSTER_KEY",
    )
    group.add_argument(
        "--cluster",
        metavar="URL",
        required=required,
        help="NATS server(s) of the cluster, e.g. nats://10.0.0.5:4222 (JetStream enabled)"
        + ("" if required else "; this daemon becomes the cluster's leader"),
    )
    group.add_argument("--cluster-name", help="the cluster's name (default: the Swarm's name)")
    group.add_argument("--cluster-creds", metavar="FILE", help="a NATS .creds file")
    group.add_argument("--cluster-nkey", metavar="FILE", help="a file holding an nkey seed")
    group.add_argument("--cluster-tls-ca", metavar="FILE", help="CA bundle for tls://")
    group.add_argument("--cluster-tls-cert", metavar="FILE", help="client certificate")
    group.add_argument("--cluster-tls-key", metavar="FILE", help="client certificate key")
    group.add_argument(
        "--insecure-nats",
        action="store_true",
        help="accept a NATS server that admits clients without credentials, and run "
        "without GOONDAN_CLUSTER_KEY (only on a network no one else reaches)",
    )
    group.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=1.0,
        help="membership heartbeat; a member silent for 3 of them is lost (default: 1; "
        "the leader's value applies to every node)",
    )


def _daemon_options(sub: argparse.ArgumentParser) -> None:
    from orchestrator.cli.api_options import add_options

    sub.add_argument(
        "-c", "--config", metavar="FILE", help="goondan.yaml (locates the state; default here)"
    )
    _state_options(sub)
    sub.add_argument("--json", action="store_true", help="print JSON")
    add_options(sub)


def _add_validate(cmds: _Commands) -> None:
    """``validate``."""
    validate = cmds.add(
        "validate", "check a configuration and report every error", "validate:cmd_validate"
    )
    if validate is not None:
        _config_option(validate)
        validate.add_argument("--json", action="store_true", help="print the result as JSON")
        validate.add_argument(
            "--format",
            choices=("text", "json", "github"),
            default="text",
            help="text (default), json, or github (workflow annotations ::error file=...)",
        )
        validate.add_argument(
            "--strict", action="store_true", help="warnings count as errors (exit 4)"
        )
        validate.add_argument(
            "--fix",
            action="store_true",
            help="first repair in place what needs no judgement (name case, a missing "
            "apiVersion, trailing whitespace), printing each change",
        )
        validate.add_argument(
            "--no-handlers",
            action="store_true",
            help="do not import tool modules to check handlers",
        )
        validate.add_argument(
            "--allow-outside-bundle",
            action="store_true",
            help="let entry modules and systemRef files lie outside the bundle directory",
        )
        validate.add_argument(
            "--verdict-from-child", action="store_true", help=argparse.SUPPRESS
        )  # internal: the child process that runs the checks


def _add_run(cmds: _Commands) -> None:
    """``run``."""
    run = cmds.add("run", "run a swarm (one --input, or as a daemon)", "run:cmd_run")
    if run is not None:
        run.set_defaults(run_parser=run_parser)  # what run --detach forwards; run imports not us
        _config_option(run)
        _env_file_option(run)
        given = run.add_mutually_exclusive_group()
        given.add_argument(
            "--input", help="send this text to the entry agent, print the answer, exit"
        )
        given.add_argument(
            "--input-file", metavar="PATH", help="the same with a file's text (- for stdin)"
        )
        run.add_argument("--agent", help="send --input to this agent instead of the entry agent")
        run.add_argument(
            "--instance", default=_default_instance(), help="instance key (default: default)"
        )
        _state_options(run)
        run.add_argument("--swarm", help="which Swarm to run (default: `default`, or the only one)")
        run.add_argument(
            "--detach",
            action="store_true",
            help="start the daemon in the background, wait until it is ready, print its pid "
            "(a live one of the same state is used instead)",
        )
        run.add_argument(
            "--interactive",
            action="store_true",
            help="prompt on the terminal even when started in the background: the prompt "
            "shows once the job is in the foreground (fg). Without it the daemon prompts only "
            "when it owns the terminal's foreground at start. Needs a terminal on stdin and "
            "the daemon mode (exit 2 otherwise)",
        )
        run.add_argument("--json", action="store_true", help="print the answer as JSON")
        run.add_argument("--stream", action="store_true", help=f"with --input: {STREAM_HELP}")
        run.add_argument(
            "--watch",
            action="store_true",
            help="apply edits of the configuration live (daemon mode)",
        )
        run.add_argument("--log-level", help="debug, info, warning, error (default: info)")
        run.add_argument(
            "--allow-outside-bundle",
            action="store_true",
            help="let entry modules and systemRef files lie outside the bundle directory",
        )
        run.add_argument(
            "--listen",
            metavar="HOST:PORT",
            help="serve the HTTP API on TCP too (besides .goondan/api.sock); off loopback it needs "
            "--api-token-env",
        )
        run.add_argument(
            "--api-token-env",
            metavar="NAME",
            help="environment variable holding the bearer token every HTTP request must carry",
        )
        run.add_argument(
            "--otlp-endpoint",
            metavar="URL",
            help="export every Turn, Step and tool call as OpenTelemetry spans over OTLP/HTTP, e.g. "
            "http://127.0.0.1:4318 (extra `otel`; default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)",
        )
        _cluster_options(run, required=False)


def _add_node(cmds: _Commands) -> None:
    """``node``."""
    node = cmds.add("node", "run agents of a clustered swarm on this host", "run:cmd_node")
    if node is not None:
        _config_option(node, "the same configuration as the leader's")
        _env_file_option(node)
        node.add_argument(
            "--name", required=True, help="this node's name, as Swarm.spec.placement uses it"
        )
        node.add_argument(
            "--label",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a label this node declares, for Swarm.spec.placement's `labels` (repeatable)",
        )
        _state_options(node)
        node.add_argument("--swarm", help="which Swarm (default: `default`, or the only one)")
        node.add_argument("--log-level", help="debug, info, warning, error (default: info)")
        _cluster_options(node, required=True)


def _add_operate(cmds: _Commands) -> None:
    """The commands that operate the running daemon (``status`` ... ``instances``)."""
    status = cmds.add("status", "show every agent of the running daemon", "operate:cmd_status")
    if status is not None:
        _daemon_options(status)

    usage = cmds.add(
        "usage", "tokens, cost and budgets left per agent, instance and trace", "operate:cmd_usage"
    )
    if usage is not None:
        usage.add_argument("--trace", metavar="TRACE_ID", help="one trace (see `logs`)")
        usage.add_argument(
            "--traces", type=int, default=20, metavar="N", help="latest traces shown (default: 20)"
        )
        _daemon_options(usage)

    send = cmds.add("send", "deliver text to an agent of the running daemon", "send:cmd_send")
    if send is not None:
        send.add_argument("agent", help="target agent")
        send.add_argument("text", help="the input")
        send.add_argument(
            "--instance", default=_default_instance(), help="instance key (default: default)"
        )
        send.add_argument("--no-wait", action="store_true", help="return once accepted")
        send.add_argument("--stream", action="store_true", help=STREAM_HELP)
        send.add_argument(
            "--timeout",
            type=float,
            metavar="SECONDS",
            help="how long the request may take (default: the swarm's requestTimeoutSeconds)",
        )
        send.add_argument(
            "--idempotency-key",
            metavar="KEY",
            help="the request's Idempotency-Key: the same key and input within the daemon's "
            "retention run one Turn, however often sent (default: a fresh key per invocation, "
            "the same on its retries)",
        )
        send.add_argument(
            "--reattach",
            type=float,
            default=DEFAULT_REATTACH_SECONDS,
            metavar="SECONDS",
            help="when the daemon goes away mid-answer, wait this long for it to come back "
            "and pick the request up by its id (default: %(default)g; 0: give up at once)",
        )
        _daemon_options(send)

    restart = cmds.add("restart", "gracefully restart an agent (or --all)", "operate:cmd_restart")
    if restart is not None:
        restart.add_argument("agent", nargs="?", help="agent to restart")
        restart.add_argument("--all", action="store_true", help="restart every agent")
        restart.add_argument(
            "--fresh",
            action="store_true",
            help="delete the agent's conversations (every instance) before it starts again",
        )
        _daemon_options(restart)

    requests = cmds.add(
        "requests",
        "the requests waiting for an answer (their ids, for cancel)",
        "operate:cmd_requests",
    )
    if requests is not None:
        _daemon_options(requests)

    cancel = cmds.add(
        "cancel", "cancel a running request (by request id or trace id)", "operate:cmd_cancel"
    )
    if cancel is not None:
        cancel.add_argument("id", metavar="TRACE_OR_REQUEST_ID", help="see `requests` or `logs`")
        cancel.add_argument(
            "--reason", default="cancelled by an operator", help="told to the caller"
        )
        _daemon_options(cancel)

    for name in ("instances", "instance"):  # `instance`: the original runtime's name
        instances = cmds.add(
            name,
            "list conversation instances; `instances delete AGENT KEY`, "
            "`instances restart [AGENT] KEY`",
            "operate:cmd_instances",
        )
        if instances is not None:
            instances.add_argument(
                "words",
                nargs="*",
                metavar="[AGENT] | delete AGENT KEY | restart [AGENT] KEY",
            )
            _daemon_options(instances)


def _add_approvals(cmds: _Commands) -> None:
    """``approvals``, ``approve`` and ``reject``."""
    approvals = cmds.add(
        "approvals", "list tool calls waiting for an operator's approval", "approvals:cmd_approvals"
    )
    if approvals is not None:
        approvals.add_argument("--agent", help="only this agent's")
        approvals.add_argument("--all", action="store_true", help="decided ones too")
        _daemon_options(approvals)

    approve = cmds.add("approve", "approve a parked tool call: it runs", "approvals:cmd_approve")
    if approve is not None:
        approve.add_argument("id", help="the approval id (apr_...)")
        approve.add_argument("--args", help="JSON object of arguments to run it with instead")
        approve.add_argument("--wait", action="store_true", help="print the Turn's answer too")
        _daemon_options(approve)

    reject = cmds.add(
        "reject", "reject a parked tool call: the model is told why", "approvals:cmd_reject"
    )
    if reject is not None:
        reject.add_argument("id", help="the approval id (apr_...)")
        reject.add_argument("--reason", required=True, help="why (the model reads it)")
        reject.add_argument("--wait", action="store_true", help="print the Turn's answer too")
        _daemon_options(reject)


def _add_logs(cmds: _Commands) -> None:
    """``logs``."""
    logs = cmds.add(
        "logs", "show the runtime event log (Turns, Steps, tools, processes)", "events:cmd_logs"
    )
    if logs is not None:
        _config_option(logs, "locates the state")
        _state_options(logs)
        logs.add_argument("--agent", help="only this agent's events")
        logs.add_argument("--trace", help="only this trace id: one request across every agent")
        logs.add_argument("--since", help="only newer events: 30s, 10m, 2h, 1d or an ISO timestamp")
        logs.add_argument(
            "--follow",
            "-f",
            action="store_true",
            help="keep printing new events (after the last 10, as tail -f; see -n)",
        )
        logs.add_argument("--json", action="store_true", help="one JSON event per line")
        from orchestrator.cli.logs import add_arguments as process_options

        process_options(logs)
        from orchestrator.cli.api_options import add_options

        add_options(logs)


def _add_studio(cmds: _Commands) -> None:
    """``studio``."""
    studio = cmds.add(
        "studio", "a local web app: agents, traces, conversations, logs", "studio:cmd_studio"
    )
    if studio is not None:
        from orchestrator.studio import DEFAULT_PORT

        studio.add_argument(
            "-c", "--config", metavar="FILE", help="goondan.yaml (locates the state; default here)"
        )
        _state_options(studio)
        studio.add_argument(
            "--host",
            default="127.0.0.1",
            help="address to listen on (default: 127.0.0.1; anything else is reachable by others)",
        )
        studio.add_argument(
            "--port",
            type=int,
            default=DEFAULT_PORT,
            help=f"port to listen on (default: {DEFAULT_PORT}; 0 picks a free one)",
        )
        studio.add_argument(
            "--open",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="open a browser tab (default: only when the output is a terminal)",
        )
        studio.add_argument("--log-level", help="debug, info, warning, error (default: info)")


def _add_project(cmds: _Commands) -> None:
    """The commands of a project: ``schema``, ``init``, ``doctor``, ``package``, ``tool``, ``completion``."""
    cmds.add("schema", "print the JSON Schema of goondan.yaml resources", "validate:cmd_schema")

    init = cmds.add("init", "start a swarm of your own from a template", "project:cmd_init")
    if init is not None:
        init.add_argument("path", nargs="?", default=".", help="where (default: here)")
        init.add_argument(
            "-t",
            "--template",
            choices=TEMPLATE_NAMES,
            default="offline",
            help="offline (default: runs with no key), openai, anthropic, multi-agent",
        )
        init.add_argument("-n", "--name", help="the Package name (default: the directory's)")
        init.add_argument("-f", "--force", action="store_true", help="overwrite existing files")
        init.add_argument("--json", action="store_true", help="print what was written as JSON")

    doctor = cmds.add(
        "doctor", "check this machine is ready to run the swarm", "project:cmd_doctor"
    )
    if doctor is not None:
        _config_option(doctor)
        _env_file_option(doctor)
        _state_options(doctor)
        doctor.add_argument("--json", action="store_true", help="print the checks as JSON")

    package = cmds.add(
        "package", "add, install, update or publish Goondan packages", "project:cmd_package"
    )
    if package is not None:
        from orchestrator.cli.packages import add_arguments

        add_arguments(package, cmds.common)

    tool = cmds.add(
        "tool", "derive a Tool's exports entry from a typed handler", "project:cmd_tool"
    )
    if tool is not None:
        from orchestrator.cli.tool import add_arguments as tool_arguments

        tool_arguments(tool, cmds.common)

    completion = cmds.add(
        "completion", "print a shell completion script (bash, zsh, fish)", "project:cmd_completion"
    )
    if completion is not None:
        completion.add_argument("shell", choices=("bash", "zsh", "fish"))


def _add_mcp(cmds: _Commands) -> None:
    """``mcp``: the daemon's MCP server over stdio."""
    mcp = cmds.add("mcp", MCP_HELP, "mcp_stdio:cmd_mcp")
    if mcp is not None:
        from orchestrator.cli.api_options import add_options
        from orchestrator.cli.mcp_stdio import add_mcp_arguments

        add_mcp_arguments(mcp)
        _state_options(mcp)
        add_options(mcp)


def _add_test(cmds: _Commands) -> None:
    """``test``."""
    test = cmds.add(
        "test", "run the bundle's TestSuites, model calls from cassettes", "test_command:cmd_test"
    )
    if test is not None:
        _config_option(test, "the bundle")
        _env_file_option(test)
        from orchestrator.cli.test_command import add_test_options

        add_test_options(test)


_GROUPS = (
    _add_validate,
    _add_run,
    _add_node,
    _add_operate,
    _add_approvals,
    _add_mcp,
    _add_logs,
    _add_studio,
    _add_project,
    _add_test,
)
"""Who adds each command, in the order ``--help`` lists them."""
