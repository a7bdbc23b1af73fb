"""``python -m orchestrator``: the command line (one function per subcommand).

Each command imports what it needs when it runs: ``status`` and the other commands that only
ask the daemon start without asyncio, the bundle or the HTTP server stack, so an operator
waits for little more than the interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.defaults import DEFAULT_INSTANCE_KEY
from goondan.errors import ExitCode

if TYPE_CHECKING:
    from ipc.delegation import DelegateAnswer
    from orchestrator.callers import ApiToken

Command = Callable[[argparse.Namespace], int]
DEFAULT_CONFIG = "goondan.yaml"


def _fail(args: argparse.Namespace, code: int, message: str, suggestion: str | None = None) -> int:
    """Report a failure as the command's output calls for (one JSON object on stdout with
    ``--json``, else ``error: ...`` on stderr) and return its exit status."""
    if getattr(args, "json", False):
        error: dict[str, Any] = {"code": ExitCode(code).error_name, "message": message}
        if suggestion:
            error["suggestion"] = suggestion
        print(json.dumps({"error": error, "exitCode": int(code)}))
    else:
        print(f"error: {message}", file=sys.stderr)
        if suggestion:
            print(f"  hint: {suggestion}", file=sys.stderr)
    return int(code)


def _bundle_path(args: argparse.Namespace) -> Path:
    """The configuration a command works on: its FILE argument or ``-c/--config`` (the same
    option on every command), else goondan.yaml here. Either may name a bundle directory."""
    given = getattr(args, "file", None)
    config = getattr(args, "config", None)
    if given and config and Path(given) != Path(config):
        raise _UsageError(f"two configurations given: {given} and -c {config}")
    return Path(given or config or DEFAULT_CONFIG)


class _UsageError(ValueError):
    """A command line that cannot mean anything (exit 2)."""


def _log_level(args: argparse.Namespace, one_shot: bool = False) -> str | None:
    """``--log-level`` if given; else ``-v`` debug, ``-q`` error; a one-shot command printing
    to a terminal keeps its answer readable: warning (info with ``-v``)."""
    if getattr(args, "log_level", None):
        return str(args.log_level)
    verbose, quiet = getattr(args, "verbose", 0), getattr(args, "quiet", False)
    if quiet:
        return "error"
    if verbose >= (2 if one_shot else 1):
        return "debug"
    if one_shot and sys.stdout.isatty():
        return "info" if verbose else "warning"
    return None


def _config_exit(errors: Sequence[Any]) -> int:
    """CONFIG when the configuration could not be read at all, else VALIDATION."""
    unread = {"E_CONFIG_FILE_NOT_FOUND", "E_CONFIG_FILE_TOO_LARGE", "E_CONFIG_PARSE_ERROR"}
    codes = {
        getattr(e, "code", None) or (e.get("code") if isinstance(e, dict) else None) for e in errors
    }
    return ExitCode.CONFIG if codes and codes <= unread else ExitCode.VALIDATION


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a configuration: exit 0 with a summary, or list every error and exit 4 (3
    when it cannot be read at all). Warnings are shown too, and count as errors with
    ``--strict``. ``--format github`` prints workflow annotations.

    The checks that import Tool and Extension modules run in a child process with a deadline
    (:mod:`orchestrator.validation`), so no module can end or wedge this command.
    """
    from orchestrator.cli.validate_extras import apply_fixes, list_files
    from orchestrator.validation import validate_in_child

    path = _bundle_path(args)
    if args.verdict_from_child:
        return _validate_here(path, check_handlers=not args.no_handlers)
    form = "json" if args.json else args.format
    added = apply_fixes(path, form) if args.fix else {}
    added.update(list_files(path, form, verbose=args.verbose > 0))
    verdict = {**validate_in_child(path, check_handlers=not args.no_handlers), **added}
    errors = list(verdict.get("errors") or [])
    warnings = list(verdict.get("warnings") or [])
    if args.strict:
        errors, warnings = errors + warnings, []
    code = int(ExitCode.OK) if not errors else _config_exit(errors)
    if form == "json":
        print(
            json.dumps(
                {
                    **verdict,
                    "valid": not errors,
                    "errors": errors,
                    "warnings": warnings,
                    "exitCode": code,
                },
                indent=2,
            )
        )
        return code
    if form == "github":
        for level, issues in (("error", errors), ("warning", warnings)):
            for issue in issues:
                print(_github_annotation(level, issue))
        return code
    for issue in warnings:
        print("warning: " + _issue(issue).format(), file=sys.stderr)
    if not errors:
        print(f"{path}: valid ({verdict.get('summary')})")
        return code
    for issue in errors:
        print(_issue(issue).format(), file=sys.stderr)
    print(f"{len(errors)} error{'s' if len(errors) != 1 else ''} in {path}", file=sys.stderr)
    return code


def _issue(data: dict[str, Any]) -> Any:
    from bundle import ConfigIssue

    return ConfigIssue(
        code=str(data.get("code")),
        message=str(data.get("message")),
        file=Path(data["file"]) if data.get("file") else None,
        line=data.get("line"),
        column=data.get("column"),
        resource=data.get("resource"),
        field=data.get("field"),
        suggestion=data.get("suggestion"),
    )


def _github_annotation(level: str, issue: dict[str, Any]) -> str:
    """``::error file=F,line=N,title=CODE::message`` (a GitHub Actions workflow command)."""

    def escape(text: str, in_property: bool = False) -> str:
        text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        return text.replace(":", "%3A").replace(",", "%2C") if in_property else text

    properties = []
    if issue.get("file"):
        try:
            shown = str(Path(issue["file"]).resolve().relative_to(Path.cwd()))
        except ValueError:
            shown = str(issue["file"])
        properties.append(f"file={escape(shown, True)}")
    if issue.get("line"):
        properties.append(f"line={issue['line']}")
    properties.append(f"title={escape(str(issue.get('code')), True)}")
    where = " ".join(str(issue[k]) for k in ("resource", "field") if issue.get(k))
    message = f"{where}: {issue.get('message')}" if where else str(issue.get("message"))
    if issue.get("suggestion"):
        message += f" (hint: {issue['suggestion']})"
    return f"::{level} {','.join(properties)}::{escape(message)}"


def _validate_here(path: Path, *, check_handlers: bool) -> int:
    """The child's side of ``validate``: load, check, print the verdict as JSON (alone on
    stdout: what a module prints while it is imported goes to stderr)."""
    from orchestrator.validation import verdict_of

    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        verdict = verdict_of(path, check_handlers=check_handlers)
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    print(json.dumps(verdict))
    return 0 if verdict["valid"] else 1


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of goondan.yaml documents."""
    from bundle import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run the swarm: one request with ``--input``, else a daemon until SIGINT/SIGTERM."""
    if args.input_file is not None:
        try:
            text = sys.stdin.read() if args.input_file == "-" else Path(args.input_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            return _fail(args, ExitCode.USAGE, f"--input-file {args.input_file}: {exc}")
        args.input = text
    if args.stream and args.input is None:
        return _fail(args, ExitCode.USAGE, "--stream prints the answer of --input: give one")
    from orchestrator.cli.terminal import TerminalRequired, check_interactive

    try:
        check_interactive(args.interactive, one_shot=args.input is not None, detach=args.detach)
    except TerminalRequired as exc:
        return _fail(args, ExitCode.USAGE, str(exc))
    detached = _detached_run(args)
    if detached is not None:
        return detached
    one_shot = args.input is not None
    return _serve(args, "orchestrator", _run, one_shot=one_shot)


def _detached_run(args: argparse.Namespace) -> int | None:
    """``run --detach``, or ``run --input`` while a detached daemon runs: the exit status;
    ``None`` when this process is to run the swarm itself."""
    if not args.detach and args.input is None:
        return None
    from orchestrator.cli.detach import Detach, detach, run_subparser
    from orchestrator.state_dir import default_state_dir

    try:
        return detach(
            Detach(
                args,
                _bundle_path(args),
                _state_dir(args),
                default_state=_state_dir(args) == default_state_dir(_bundle_path(args)),
                run_parser=lambda: run_subparser(build_parser("run")),
            )
        )
    except OSError as exc:  # the state directory cannot be written
        return _fail(args, ExitCode.INTERNAL, str(exc))


def _serve(
    args: argparse.Namespace,
    process: str,
    main: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
    *,
    one_shot: bool = False,
) -> int:
    """Run ``main(args)`` as a process of the swarm: the ``.env`` files, its logging, a
    private umask, uvloop."""
    from goondan.proctitle import prepare as prepare_process_name

    # Before .env files change the environment, beside which the command line is found.
    prepare_process_name()
    from ipc.logs import configure_logging
    from orchestrator.cli.envfiles import EnvFileMissing, load_env_files
    from orchestrator.cli.terminal import ignore_terminal_stops

    ignore_terminal_stops()  # before any child starts: they inherit it
    path = _bundle_path(args)
    env_file = getattr(args, "env_file", None)
    try:
        loaded = load_env_files(path, Path(env_file) if env_file else None)
    except EnvFileMissing as exc:
        return _fail(args, ExitCode.USAGE, str(exc))
    level = _log_level(args, one_shot)
    if level:
        os.environ["GOONDAN_LOG_LEVEL"] = level  # agent processes inherit it
    configure_logging(level, process=process)
    if loaded.files:
        import structlog

        structlog.get_logger("goondan.cli").info(
            "environment files loaded",
            files=[str(f) for f in loaded.files],
            variables=sorted(loaded.names),  # names only: values never reach a log
        )
    # A daemon's files are its user's alone; agent processes inherit this (and set it again).
    os.umask(0o077)
    from goondan.http_admission import raise_open_file_limit

    raise_open_file_limit()  # each connection costs a descriptor: serve as many as allowed
    try:
        import uvloop

        return uvloop.run(main(args))
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        import asyncio

        return asyncio.run(main(args))


class _MissingCredential(LookupError):
    """A credential the command line points at is not there (exit 6)."""


def _api_token(variable: str | None) -> ApiToken | None:
    """The bearer token from the environment variable ``variable`` (never from the command line,
    where other users could read it), named after the variable."""
    from orchestrator.callers import ApiToken

    if variable is None:
        return None
    token = os.environ.get(variable, "")
    if not token:
        raise _MissingCredential(f"--api-token-env {variable}: the variable is not set or empty")
    return ApiToken(variable, token)


def _missing_keys(bundle: Any, swarm: str | None) -> list[str]:
    """One line per API key the swarm's Models, or secret its Connections, read from an
    environment without it."""
    from bundle.connection_needs import missing_settings
    from bundle.keys import key_needs

    return [
        f"Model/{need.model} ({need.provider}, used by {', '.join(need.agents)}) needs "
        f"{need.variable}, which is not set"
        for need in key_needs(bundle, swarm)
        if not need.present(os.environ)
    ] + [need.problem() for need in missing_settings(bundle, swarm, os.environ)]


async def _run(args: argparse.Namespace) -> int:
    from bundle import BundleError
    from bundle.secrets import SecretUnavailable
    from goondan.errors import DeliveryError
    from ipc import IpcError
    from orchestrator.cli.terminal import offers_prompt, prompt_loop
    from orchestrator.daemon import Orchestrator
    from orchestrator.http.app import ApiRefused, DaemonAlreadyRunning
    from orchestrator.preflight import check_soon, refusal
    from orchestrator.telemetry import TelemetryUnavailable, otlp_settings

    path = _bundle_path(args)
    # Checked while the Orchestrator loads: the check starts the fork server the agents
    # start from, and is forked from it.
    checking = check_soon(path)
    try:
        try:
            orchestrator = Orchestrator(
                path,
                state_dir=_state_dir(args),
                swarm=args.swarm,
                api_listen=args.listen,
                api_token=_api_token(args.api_token_env),
                cluster=_cluster_settings(args),
                otlp=otlp_settings(args.otlp_endpoint, os.environ),
            )
        except Exception:
            invalid = await refusal(path, checking, as_json=args.json)
            if invalid is not None:  # the configuration's errors come first
                return invalid
            raise
    except (_MissingCredential, SecretUnavailable) as exc:  # a token variable unset
        return _fail(args, ExitCode.AUTH, str(exc))
    except TelemetryUnavailable as exc:  # --otlp-endpoint without the extra
        return _fail(args, ExitCode.CONFIG, str(exc))
    except ValueError as exc:  # a --listen not HOST:PORT, a bad cluster option
        return _fail(args, ExitCode.USAGE, str(exc))
    except BundleError as exc:
        for issue in exc.errors:
            print(issue.format(), file=sys.stderr)
        return _config_exit(exc.errors)
    invalid = await refusal(path, checking, as_json=args.json)
    if invalid is not None:
        return invalid
    if args.interactive and orchestrator.connections.read_stdin:
        return _fail(args, ExitCode.USAGE, "--interactive: a `cli` Connection reads stdin")
    from goondan.proctitle import name_process

    name_process("daemon", orchestrator.swarm.name)
    missing = _missing_keys(orchestrator.bundle, args.swarm)
    if missing:
        for line in missing[1:]:
            print(f"error: {line}", file=sys.stderr)
        return _fail(
            args,
            ExitCode.AUTH,
            missing[0],
            "put it in .env beside goondan.yaml (see .env.example), or export it; "
            "`doctor` checks every key",
        )
    refused = await _sandbox_refusal(orchestrator.bundle, args.swarm)
    if refused is not None:
        return _fail(args, ExitCode.INTERNAL, *refused)
    orchestrator.install_signal_handlers()
    try:
        try:
            await orchestrator.start()
        except DeliveryError as exc:  # the cluster (NATS) cannot be used
            return _fail(args, _cluster_exit(exc), str(exc))
        except (DaemonAlreadyRunning, ApiRefused, OSError) as exc:
            return _fail(args, ExitCode.INTERNAL, str(exc))
        except (IpcError, TimeoutError) as exc:
            return _fail(args, ExitCode.INTERNAL, f"the entry agent could not start: {exc}")
        if args.input is not None:
            return await _one_request(orchestrator, args)
        if args.watch:
            from orchestrator.watch import Watcher

            orchestrator.start_soon(Watcher(orchestrator).run(), "watch")
        if offers_prompt(args.interactive) and not orchestrator.connections.read_stdin:
            await prompt_loop(orchestrator, args.agent or orchestrator.entry_agent, args.instance)
        else:
            await orchestrator.wait_stopped()
        return 0
    finally:
        await orchestrator.shutdown()


async def _sandbox_refusal(bundle: Any, swarm: str | None) -> tuple[str, str] | None:
    """Why the swarm's tool programs cannot run here (no sandbox, not turned off) and the fix,
    or ``None``."""
    import asyncio

    from orchestrator.cli import sandbox_check

    finding = await asyncio.to_thread(sandbox_check.examine, bundle, swarm)
    return (finding.refusal(), finding.fix) if finding.refused else None


def _cluster_exit(exc: Exception) -> int:
    """AUTH for refused credentials, INTERNAL for a cluster held by another process,
    NETWORK for anything else the cluster cannot do."""
    from orchestrator.cluster.settings import ClusterAuthRefused, ClusterTaken

    if isinstance(exc, ClusterAuthRefused):
        return ExitCode.AUTH
    return ExitCode.INTERNAL if isinstance(exc, ClusterTaken) else ExitCode.NETWORK


def _cluster_settings(args: argparse.Namespace) -> Any:
    """The ``ClusterSettings`` of ``--cluster`` and its options; ``None`` without it."""
    if not getattr(args, "cluster", None):
        return None
    try:
        from orchestrator.cluster.settings import ClusterSettings
    except ImportError:  # pragma: no cover - the extra is missing
        raise ValueError(
            "--cluster needs the `cluster` extra: pip install 'goondan-py[cluster]'"
        ) from None
    if args.heartbeat_seconds <= 0:
        raise ValueError("--heartbeat-seconds must be positive")

    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    return ClusterSettings(
        url=args.cluster,
        name=args.cluster_name or "",
        creds_file=path(args.cluster_creds),
        nkey_seed_file=path(args.cluster_nkey),
        tls_ca_file=path(args.cluster_tls_ca),
        tls_cert_file=path(args.cluster_tls_cert),
        tls_key_file=path(args.cluster_tls_key),
        heartbeat_seconds=args.heartbeat_seconds,
    )


def cmd_node(args: argparse.Namespace) -> int:
    """Run this host's share of a clustered swarm until SIGINT/SIGTERM."""
    return _serve(args, "node", _node)


async def _node(args: argparse.Namespace) -> int:
    from bundle import BundleError
    from goondan.errors import DeliveryError
    from orchestrator.preflight import check_soon, refusal

    path = _bundle_path(args)
    invalid = await refusal(path, check_soon(path), as_json=args.json)
    if invalid is not None:
        return invalid
    try:
        from orchestrator.cluster.node import Node

        node = Node(
            path,
            _cluster_settings(args),
            args.name,
            state_dir=_state_dir(args),
            swarm=args.swarm,
            labels=args.label,
        )
    except ValueError as exc:
        return _fail(args, ExitCode.USAGE, str(exc))
    except BundleError as exc:
        for issue in exc.errors:
            print(issue.format(), file=sys.stderr)
        return _config_exit(exc.errors)
    from goondan.proctitle import name_process

    name_process("node", args.name)
    node.install_signal_handlers()
    try:
        try:
            await node.start()
        except DeliveryError as exc:
            return _fail(args, _cluster_exit(exc), str(exc))
        await node.wait_stopped()
        return 0
    finally:
        await node.shutdown()


ANSWER_EXITS = {
    "E_MODEL_AUTH": ExitCode.AUTH,
    "E_MODEL_CONNECTION": ExitCode.NETWORK,
    "E_MODEL_PROVIDER_UNAVAILABLE": ExitCode.CONFIG,
}
"""A failed answer's exit status, by its error code (1 otherwise)."""


async def _one_request(orchestrator: Any, args: argparse.Namespace) -> int:
    agent = args.agent or orchestrator.entry_agent
    if getattr(args, "stream", False):
        from orchestrator.cli.answer_stream import AnswerPrinter, stream_answer

        printer = AnswerPrinter(args, stream=True)
        answer: DelegateAnswer = await stream_answer(
            orchestrator, args.input, agent, args.instance, printer
        )
        printer.finish(agent, answer.output if answer.ok else None)
    else:
        answer = await orchestrator.request(args.input, agent=agent, instance_key=args.instance)
    error = answer.error
    code = int(ExitCode.OK)
    if not answer.ok:
        code = int(ANSWER_EXITS.get(error.code if error else "", ExitCode.INTERNAL))
    if args.json:
        out: dict[str, Any] = {
            "output": answer.output,
            "status": answer.status,
            "traceId": (answer.turn or {}).get("traceId"),
            "agent": agent,
            "instanceKey": args.instance,
            "exitCode": code,
        }
        if error is not None:
            out["error"] = error.to_dict()
        print(json.dumps(out, ensure_ascii=False))
    elif answer.ok:
        if not getattr(args, "stream", False):  # else printed already
            print(answer.output if answer.output is not None else "")
    elif error is not None:
        print(f"error: {error.message} ({error.code})", file=sys.stderr)
    else:
        print("error: the request failed (ERROR)", file=sys.stderr)
    return code


def _state_dir(args: argparse.Namespace) -> Path:
    """``--state-dir``, else the bundle's directory under ``--state-root`` or
    ``$GOONDAN_STATE_ROOT``, else ``.goondan/`` beside the configuration."""
    from orchestrator.state_dir import resolve_state_dir

    return resolve_state_dir(
        _bundle_path(args), state_dir=args.state_dir, state_root=getattr(args, "state_root", None)
    )


class _DaemonFailed(Exception):
    """The daemon could not be asked or did not answer; carries the exit code."""

    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


def _ask_daemon(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    wait_seconds: float | None = None,
) -> tuple[int, Any]:
    """The daemon's ``(status, body)`` (on api.sock, or at ``--api-url``); exit 5 (network)
    when none runs, or when it takes the request and never answers; 6 when it wants a token."""
    from orchestrator.cli.api_target import TargetError, ask

    try:
        return ask(args, lambda: _state_dir(args), method, path, body, wait_seconds)
    except TargetError as exc:
        raise _DaemonFailed(_fail(args, exc.exit_code, str(exc))) from exc


def _refused(status: int, body: Any) -> bool:
    """Print the API's error and say so, when ``status`` is one."""
    from orchestrator.http.client import error_text

    if status < 400:
        return False
    print(f"error: {error_text(body)}", file=sys.stderr)
    return True


def _accepted(args: argparse.Namespace, method: str, path: str) -> Any | None:
    """The daemon's answer when it took the request; ``None`` (error printed) otherwise."""
    asked = _ask_daemon(args, method, path)
    if _refused(*asked):
        return None
    return asked[1]


def cmd_status(args: argparse.Namespace) -> int:
    """One row per agent of the running daemon; exit 1 when none runs."""
    answer = _accepted(args, "GET", "/v1/agents")
    if answer is None:
        return 1
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    print(f"swarm {answer.get('swarm')} (orchestrator pid {answer.get('pid')})")
    cluster = answer.get("cluster")
    if cluster:
        _print_cluster(cluster)
    from orchestrator.cli.usage import print_pools
    from orchestrator.tables import Column, Table

    node_column = (Column("NODE", 14),) if cluster else ()
    agents = Table(
        (
            *node_column,
            Column("AGENT", 20),
            Column("PID", 7, ">"),
            Column("STATUS", 17),
            Column("INST", 4, ">"),
            Column("RESTARTS", 8, ">"),
            Column("CRASHES", 7, ">"),
            Column("UPTIME", 9, ">"),
            Column("PENDING", 7, ">"),
            Column("WAIT", 4, ">"),
            Column("TOKENS", 9, ">"),
            Column("LAST EXIT", gap="  "),
        )
    )
    for row in answer.get("agents", []):
        uptime = f"{row['uptimeSeconds']:.0f}s" if row.get("uptimeSeconds") is not None else "-"
        node = (row.get("node") or "(leader)",) if cluster else ()
        agents.add_row(
            *node,
            row["agent"],
            row.get("pid") or "-",
            row["status"],
            len(row.get("instances", [])),
            row["restarts"],
            row["crashes"],
            uptime,
            row.get("pendingDelegates", 0),
            row.get("permitsWaiting", 0),
            (row.get("usage") or {}).get("totalTokens", 0),
            (row.get("lastExit") or {}).get("reason") or "-",
        )
    agents.print()
    print_pools(answer.get("pools") or [])
    connections = answer.get("connections") or []
    if connections:
        print()
        table = Table(
            (
                Column("CONNECTION", 20),
                Column("PID", 7, ">"),
                Column("STATUS", 17),
                Column("CONNECTOR", 14),
                Column("RESTARTS", 8, ">"),
                Column("FAILS", 5, ">"),
                Column("LAST EVENT", 10, ">"),
                Column("WHY", gap="  "),
            )
        )
        from orchestrator.connection_health import last_event_cell, why_cell

        for row in connections:
            table.add_row(
                row["connection"],
                row.get("pid") or "-",
                row["status"],
                row["connector"],
                row["restarts"],
                (row.get("health") or {}).get("consecutiveFailures", 0),
                last_event_cell(row),
                why_cell(row),
            )
        table.print()
    return 0


def cmd_usage(args: argparse.Namespace) -> int:
    """Tokens and cost per agent, instance and trace, what budgets have left, and the pools
    (from the state directory when no daemon runs)."""
    from orchestrator.cli.usage import run_usage

    return run_usage(
        args,
        lambda: _state_dir(args),
        lambda: _bundle_path(args),
        lambda code, message: _fail(args, code, message),
    )


def _print_cluster(cluster: dict[str, Any]) -> None:
    print(f"cluster {cluster.get('cluster')} at {cluster.get('server')}")
    from orchestrator.tables import Column, Table

    table = Table(
        (
            Column("NODE", 14),
            Column("UP", 4),
            Column("BUNDLE", 9),
            Column("HOST", 20),
            Column("PID", 7, ">"),
            Column("AGENTS", gap="  "),
        )
    )
    for node in cluster.get("nodes", []):
        same = node.get("sameBundle")
        table.add_row(
            node["node"],
            "yes" if node.get("up") else "NO",
            "-" if same is None else ("same" if same else "DIFFERS"),
            node.get("host") or "-",
            node.get("pid") or "-",
            ", ".join(node.get("agents", [])) or "-",
        )
    table.print()
    print()


def cmd_send(args: argparse.Namespace) -> int:
    """Deliver text to an agent of the running daemon and print its answer (``--no-wait``:
    return once it is accepted)."""
    from orchestrator.cli.answer_stream import send_and_wait
    from orchestrator.http.client import path_segment

    if not args.no_wait or args.stream:
        return send_and_wait(args, lambda: _state_dir(args))
    body: dict[str, Any] = {"input": args.text, "instanceKey": args.instance}
    status, answer = _ask_daemon(args, "POST", f"/v1/agents/{path_segment(args.agent)}/sends", body)
    if args.json:
        print(json.dumps(answer))
    elif _refused(status, answer):
        return 1
    return 0 if status < 400 else 1


def cmd_restart(args: argparse.Namespace) -> int:
    """Gracefully restart one agent (or --all); conversations survive, unless ``--fresh``."""
    from orchestrator.http.client import path_segment

    if not args.all and not args.agent:
        print("error: name an agent, or pass --all", file=sys.stderr)
        return 2
    names = [args.agent]
    if args.all:
        answer = _accepted(args, "GET", "/v1/agents")
        if answer is None:
            return 1
        names = [row["agent"] for row in answer.get("agents", [])]
    restarted = []
    query = "?fresh=1" if args.fresh else ""
    for name in names:
        answer = _accepted(args, "POST", f"/v1/agents/{path_segment(name)}/restart{query}")
        if answer is None:
            return 1
        restarted.append(answer)
        if not args.json:
            fresh = ""
            if args.fresh:
                count = len(answer.get("deletedInstances", []))
                fresh = f", {count} conversation{'s' if count != 1 else ''} deleted"
            print(f"{answer['agent']}: restarted (pid {answer['pid']}{fresh})")
    if args.json:
        print(json.dumps({"restarted": restarted}))
    return 0


def cmd_requests(args: argparse.Namespace) -> int:
    """The requests of the running daemon waiting for an answer (ids for ``cancel``)."""
    answer = _accepted(args, "GET", "/v1/requests")
    if answer is None:
        return 1
    rows = answer.get("requests", [])
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from orchestrator.tables import Column, Table

    table = Table(
        (
            Column("REQUEST", 30, cut=False),
            Column("TRACE", 32, cut=False),
            Column("CALLER", 14),
            Column("AGENT", 14),
            Column("INSTANCE", 14),
            Column("STARTED"),
        )
    )
    for row in rows:
        table.add_row(
            row["requestId"],
            row["traceId"],
            row["caller"],
            row["agent"],
            row["instanceKey"],
            row["startedAt"],
        )
    table.print()
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a running request by request id or trace id; its caller is answered CANCELLED."""
    from orchestrator.http.client import path_segment

    asked = _ask_daemon(
        args, "POST", f"/v1/requests/{path_segment(args.id)}/cancel", {"reason": args.reason}
    )
    status, answer = asked
    if args.json:
        print(json.dumps(answer))
    elif not _refused(status, answer):
        for trace_id in answer.get("cancelled", []):
            print(f"cancelled trace {trace_id}")
    return 0 if status < 400 else 1


def cmd_instances(args: argparse.Namespace) -> int:
    """``instances [AGENT]`` lists conversation instances; ``instances delete AGENT KEY`` removes one."""
    from orchestrator.cli.api_target import TargetError, ask, remote_rows, remote_url
    from orchestrator.http.client import error_text, path_segment
    from orchestrator.state_dir import delete_instance_dir, list_instances

    words = list(args.words)
    if not words and getattr(args, "command", None) == "instance":  # bare: the terminal view
        from orchestrator.cli.instance import view

        shown = view(args, lambda: _state_dir(args))
        if shown is not None:
            return shown
    if words and words[0] == "restart":
        from orchestrator.cli.instance_restart import restart_instances

        return restart_instances(args, words[1:], lambda: _state_dir(args))
    if words and words[0] == "delete":
        if len(words) != 3:
            print("usage: instances delete AGENT KEY", file=sys.stderr)
            return 2
        _, agent, key = words
        try:  # through the daemon, so a running agent forgets the instance too
            status, answer = ask(
                args,
                lambda: _state_dir(args),
                "DELETE",
                f"/v1/agents/{path_segment(agent)}/instances/{path_segment(key)}",
            )
        except TargetError as exc:
            if exc.failure != "no-daemon" or remote_url(args) is not None:
                return _fail(args, exc.exit_code, str(exc))
            state_dir = _state_dir(args)
            status, answer = (
                200,
                {"ok": True, "deleted": delete_instance_dir(state_dir, agent, key)},
            )
        if args.json:
            print(json.dumps(answer))
        elif status >= 400:
            print(f"error: {error_text(answer)}", file=sys.stderr)
        else:
            print("deleted" if answer.get("deleted") else "not found")
        return 0 if status < 400 else 1
    if len(words) > 1:
        print("usage: instances [AGENT] | instances delete AGENT KEY", file=sys.stderr)
        return 2
    # Read from disk: the listing needs no daemon (a daemon at --api-url is asked).
    agent = words[0] if words else None
    try:
        if remote_url(args) is not None:
            rows = remote_rows(args, "/v1/instances", "instances", agent=agent)
        else:
            rows = list_instances(_state_dir(args), agent)
    except TargetError as exc:
        return _fail(args, exc.exit_code, str(exc))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from orchestrator.tables import Column, Table

    table = Table(
        (
            Column("AGENT", 20),
            Column("INSTANCE", 24),
            Column("STATUS", 11),
            Column("TOKENS", 9, ">"),
            Column("UPDATED", gap="  "),
        )
    )
    for row in rows:
        table.add_row(
            row.get("agentName", "?"),
            row.get("instanceKey", "?"),
            row.get("status", "?"),
            (row.get("usage") or {}).get("totalTokens", 0),
            row.get("updatedAt", ""),
        )
    table.print()
    return 0


def cmd_approvals(args: argparse.Namespace) -> int:
    """Tool calls waiting for an operator's approval (read from the state directory, so no
    daemon is needed; a daemon at ``--api-url`` is asked); ``--all`` shows decided ones too."""
    from orchestrator.approvals import list_approvals, print_approvals
    from orchestrator.cli.api_target import TargetError, remote_rows, remote_url

    try:
        if remote_url(args) is not None:
            decided = "1" if args.all else None
            rows = remote_rows(args, "/v1/approvals", "approvals", agent=args.agent, all=decided)
        else:
            rows = list_approvals(_state_dir(args), agent=args.agent, include_decided=args.all)
    except TargetError as exc:
        return _fail(args, exc.exit_code, str(exc))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no approvals" if args.all else "nothing waits for approval")
    print_approvals(rows)
    return 0


def _decide(args: argparse.Namespace, decision: str, body: dict[str, Any]) -> int:
    """``approve``/``reject``: the decision through the daemon; exit 1 when refused."""
    from orchestrator.http.client import path_segment

    query = "?wait=1" if args.wait else ""
    path = f"/v1/approvals/{path_segment(args.id)}/{decision}{query}"
    status, answer = _ask_daemon(args, "POST", path, body)
    if args.json:
        print(json.dumps(answer))
        return 0 if status < 400 else 1
    if _refused(status, answer):
        return 1
    approval = answer.get("approval") or {}
    print(f"{approval.get('status')} {approval.get('approvalId')} ({approval.get('toolName')})")
    if not args.wait:
        return 0
    turn = answer.get("turn")
    if turn is None:
        print("error: the Turn did not answer within the request timeout", file=sys.stderr)
        return 1
    if turn.get("status") == "ok":
        print(turn.get("output") or "")
        return 0
    error = turn.get("error") or {}
    print(f"error: {error.get('message')} ({error.get('code')})", file=sys.stderr)
    return 1


def cmd_approve(args: argparse.Namespace) -> int:
    """Approve a parked tool call: it runs (with ``--args`` in place of the model's)."""
    body: dict[str, Any] = {}
    if args.args is not None:
        try:
            arguments = json.loads(args.args)
        except ValueError as exc:
            print(f"error: --args is not JSON: {exc}", file=sys.stderr)
            return 2
        if not isinstance(arguments, dict):
            print("error: --args must be a JSON object", file=sys.stderr)
            return 2
        body["arguments"] = arguments
    return _decide(args, "approve", body)


def cmd_reject(args: argparse.Namespace) -> int:
    """Reject a parked tool call: the model gets ``E_TOOL_REJECTED`` with the reason."""
    return _decide(args, "reject", {"reason": args.reason})


def cmd_logs(args: argparse.Namespace) -> int:
    """Print the runtime event log, filtered; ``--follow`` keeps printing new events."""
    if args.process is not None:  # one process's output files instead of the event log
        from orchestrator.cli.logs import show

        if getattr(args, "api_url", None):
            raise _UsageError(
                "logs --process reads the state directory's files: not with --api-url"
            )
        return show(args, _state_dir(args))
    from orchestrator.cli.api_target import TargetError, remote_url
    from orchestrator.eventlog import (
        FILE_NAME,
        EventLogTooNew,
        parse_since,
    )

    try:
        since = parse_since(args.since) if args.since else None
    except ValueError:
        print(
            f"error: --since {args.since!r}: use 30s, 10m, 2h, 1d or an ISO timestamp",
            file=sys.stderr,
        )
        return 2
    try:
        if remote_url(args) is not None:
            return _follow_remote(args, since)
    except TargetError as exc:
        return _fail(args, exc.exit_code, str(exc))
    state_dir = _state_dir(args)
    path = state_dir / FILE_NAME
    if not path.exists() and not args.follow:
        print(f"no runtime events yet at {path}", file=sys.stderr)
        return 1
    try:
        return _print_logs(args, state_dir, path, since)
    except EventLogTooNew as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _follow_remote(args: argparse.Namespace, since: Any) -> int:
    """``logs -f`` of the daemon at ``--api-url``: its live events (its log file is its own)."""
    from orchestrator.cli.api_target import TargetError, daemon_api, open_events
    from orchestrator.eventlog import format_event, matches

    if not args.follow:
        raise _UsageError(
            "logs reads the event log in the state directory; with --api-url only -f "
            "(the daemon's live events)"
        )
    api = daemon_api(args, _state_dir_unused)
    stream = open_events(args, api)
    # It has no past to print first: say the stream is open, so a silence means no events.
    print(f"following the events of the daemon at {api.where}", file=sys.stderr, flush=True)
    try:
        for event in stream:
            if event.get("type") != "text.delta" and matches(
                event, agent=args.agent, trace=args.trace, since=since
            ):
                line = json.dumps(event, ensure_ascii=False) if args.json else format_event(event)
                print(line, flush=True)
    except KeyboardInterrupt:
        return 0
    raise TargetError("no-answer", f"the daemon at {api.where} closed its event stream")


def _state_dir_unused() -> Path:
    raise AssertionError("no state directory with --api-url")


def _print_logs(args: argparse.Namespace, state_dir: Path, path: Path, since: Any) -> int:
    from collections import deque

    from orchestrator.cli.logs import ALL_LINES, FOLLOW_LINES
    from orchestrator.eventlog import format_event, log_files, matches, read_events
    from orchestrator.http.client import DaemonApi

    # The past is held back to its last --lines events (-f: the last few, as `tail -f`).
    lines = args.lines if args.lines is not None else (FOLLOW_LINES if args.follow else ALL_LINES)
    past: deque[str] | None = deque(maxlen=lines) if lines != ALL_LINES else None

    def show(event: dict[str, Any]) -> None:
        if event.get("type") == "text.delta":
            return  # streamed text is not kept in the log: -f shows what plain logs shows
        if matches(event, agent=args.agent, trace=args.trace, since=since):
            line = json.dumps(event, ensure_ascii=False) if args.json else format_event(event)
            if past is not None:
                past.append(line)
            else:
                print(line, flush=True)

    stream = DaemonApi(state_dir).events() if args.follow else None
    for rotated in [f for f in log_files(state_dir) if f != path]:
        for _, event in read_events(rotated):
            show(event)
    offset = 0
    recent: list[str] = []
    while True:
        if path.exists() and path.stat().st_size < offset:
            offset = 0  # it rotated: the new file starts from the top
        for end, event in read_events(path, offset):
            offset = end
            show(event)
            recent = [*recent[-999:], json.dumps(event, sort_keys=True, default=str)]
        if past is not None:  # the past is read: its last lines, then whatever comes
            for line in past:
                print(line)
            sys.stdout.flush()
            past = None
        if not args.follow:
            return 0
        if stream is not None:  # the daemon pushes what comes next
            try:
                for event in stream:
                    if json.dumps(event, sort_keys=True, default=str) not in recent:
                        show(event)
            except KeyboardInterrupt:
                return 0
            # The daemon stopped: tail the file from here, for whatever runs next.
            stream = None
            offset = path.stat().st_size if path.exists() else 0
        try:
            time.sleep(0.25)  # no daemon API to push events: tail the file
        except KeyboardInterrupt:
            return 0


TEMPLATE_NAMES = ("offline", "openai", "anthropic", "multi-agent")
"""``init`` templates (orchestrator/templates; kept here so parsing imports nothing)."""


def cmd_init(args: argparse.Namespace) -> int:
    """Write a runnable swarm from a template; refuses to overwrite without ``--force``."""
    from orchestrator.cli.scaffold import ScaffoldRefused, scaffold

    target = Path(args.path)
    try:
        done = scaffold(target, args.template, name=args.name, force=args.force)
    except ScaffoldRefused as exc:
        return _fail(args, ExitCode.USAGE, str(exc))
    except OSError as exc:
        return _fail(args, ExitCode.CONFIG, f"cannot write {target}: {exc}")
    files = [str(f.relative_to(target)) for f in done.files]
    if args.json:
        print(json.dumps({"directory": str(target), "template": done.template, "files": files}))
        return 0
    print(f"wrote a {done.template} swarm ({done.name}) in {target}:")
    for name in files:
        print(f"  {name}")
    where = "" if target.resolve() == Path.cwd() else f"cd {args.path} && "
    needs_key = done.template in ("openai", "anthropic")
    print()
    if needs_key:
        print("next: cp .env.example .env, put your key in it, then")
    print(f'  {where}python -m orchestrator run --input "I am Ada"')
    print("  python -m orchestrator doctor           # is everything in place?")
    print("  python -m pytest tools                   # the tool's own tests")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check this machine and configuration; exit 0 when all is well, else the status of
    the first problem (each printed with its fix)."""
    from orchestrator.cli.doctor import examine
    from orchestrator.cli.envfiles import EnvFileMissing, load_env_files

    path = _bundle_path(args)
    environ = dict(os.environ)
    try:
        loaded = load_env_files(path, Path(args.env_file) if args.env_file else None, environ)
    except EnvFileMissing as exc:
        return _fail(args, ExitCode.USAGE, str(exc))
    state_dir = _state_dir(args)
    report = examine(path, state_dir, environ)
    if args.json:
        print(json.dumps({**report.to_json(), "envFiles": [str(f) for f in loaded.files]}))
        return report.exit_code
    marks = {"ok": "ok  ", "info": "    ", "warn": "warn", "fail": "FAIL"}
    if loaded.files:
        print(f"      env files: {', '.join(str(f) for f in loaded.files)}")
    for check in report.checks:
        print(f"{marks[check.level]}  {check.name}: {check.detail}")
        if check.fix and check.level in ("fail", "warn"):
            print(f"      fix: {check.fix}")
    problems = len(report.problems)
    print("all is well" if not problems else f"{problems} problem{'s' if problems > 1 else ''}")
    return report.exit_code


def cmd_package(args: argparse.Namespace) -> int:
    """``package add|install|update|publish`` (orchestrator/cli/packages.py)."""
    from orchestrator.cli.packages import cmd_package as run

    return run(args)


def cmd_tool(args: argparse.Namespace) -> int:
    """``tool schema`` (orchestrator/cli/tool.py)."""
    from orchestrator.cli.tool import cmd_tool as run

    return run(args)


def cmd_completion(args: argparse.Namespace) -> int:
    """Print what to source in ``args.shell`` to complete ``goondan`` and
    ``python -m orchestrator`` (orchestrator/cli/completion.py)."""
    from orchestrator.cli.completion import script

    print(script(args.shell))
    return 0


def version_text() -> str:
    """``goondan-py X.Y.Z``."""
    import importlib.metadata

    try:
        return importlib.metadata.version("goondan-py")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def cmd_studio(args: argparse.Namespace) -> int:
    """Serve the studio (a local web app) over the running daemon or a state directory."""
    from orchestrator.studio import is_loopback

    state_dir = _state_dir(args)
    if not state_dir.is_dir():
        print(
            f"error: no state directory at {state_dir} (run the swarm first, or pass --state-dir)",
            file=sys.stderr,
        )
        return 1
    if not 0 <= args.port < 65536:
        print(f"error: --port {args.port}: not a port", file=sys.stderr)
        return 2
    if not is_loopback(args.host):
        print(
            f"warning: serving the studio on {args.host}: it has no login, and shows every "
            "conversation and tool call to whoever reaches that address",
            file=sys.stderr,
        )
    if args.open is None:
        args.open = sys.stdout.isatty()
    return _serve(args, "studio", _studio)


async def _studio(args: argparse.Namespace) -> int:
    from orchestrator.studio.server import serve_studio

    def announce(url: str) -> None:
        print(f"studio: {url}", flush=True)

    try:
        return await serve_studio(
            _state_dir(args),
            host=args.host,
            port=args.port,
            open_browser=args.open,
            announce=announce,
        )
    except OSError as exc:  # the port is taken, the address is not this machine's
        print(
            f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1


def _stream_help() -> str:
    from orchestrator.cli.answer_stream import STREAM_HELP

    return STREAM_HELP


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand; with ``only``, the arguments of that
    command alone (the others are listed, but parse nothing)."""
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator",
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
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("output")
    group.add_argument(
        "-v", "--verbose", action="count", default=0, help="more log lines (-vv: debug)"
    )
    group.add_argument("-q", "--quiet", action="store_true", help="errors only in the log")
    group.add_argument("--no-color", action="store_true", help="no colours on a terminal")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help: str, run: Command) -> argparse.ArgumentParser | None:
        """Add command ``name``; its parser when its arguments are wanted, else ``None``."""
        sub = commands.add_parser(name, help=help, parents=[common])
        sub.set_defaults(run=run)
        return sub if only in (None, name) else None

    def config_option(sub: argparse.ArgumentParser, what: str = "the configuration") -> None:
        sub.add_argument(
            "file",
            nargs="?",
            metavar="FILE",
            help=f"{what}: goondan.yaml or a bundle directory (default: goondan.yaml here)",
        )
        sub.add_argument("-c", "--config", metavar="FILE", help="the same, as an option")

    def state_options(sub: argparse.ArgumentParser) -> None:
        from orchestrator.state_dir import add_state_options

        add_state_options(sub)

    def env_file_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--env-file",
            metavar="PATH",
            help="variables to load after .env and .env.local beside the configuration (they "
            "win over the environment; a missing file is an error)",
        )

    validate = command("validate", "check a configuration and report every error", cmd_validate)
    if validate is not None:
        config_option(validate)
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

    run = command("run", "run a swarm (one --input, or as a daemon)", cmd_run)
    if run is not None:
        config_option(run)
        env_file_option(run)
        given = run.add_mutually_exclusive_group()
        given.add_argument(
            "--input", help="send this text to the entry agent, print the answer, exit"
        )
        given.add_argument(
            "--input-file", metavar="PATH", help="the same with a file's text (- for stdin)"
        )
        run.add_argument("--agent", help="send --input to this agent instead of the entry agent")
        run.add_argument(
            "--instance", default=DEFAULT_INSTANCE_KEY, help="instance key (default: default)"
        )
        state_options(run)
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
        run.add_argument("--stream", action="store_true", help=f"with --input: {_stream_help()}")
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

    def cluster_options(sub: argparse.ArgumentParser, required: bool) -> None:
        group = sub.add_argument_group(
            "cluster",
            "several hosts over NATS (extra `cluster`); a password or token comes from "
            "GOONDAN_NATS_PASSWORD (with GOONDAN_NATS_USER) or GOONDAN_NATS_TOKEN",
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
            "--heartbeat-seconds",
            type=float,
            default=1.0,
            help="membership heartbeat; a member silent for 3 of them is lost (default: 1; "
            "the leader's value applies to every node)",
        )

    if run is not None:
        cluster_options(run, required=False)

    node = command("node", "run agents of a clustered swarm on this host", cmd_node)
    if node is not None:
        config_option(node, "the same configuration as the leader's")
        env_file_option(node)
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
        state_options(node)
        node.add_argument("--swarm", help="which Swarm (default: `default`, or the only one)")
        node.add_argument("--log-level", help="debug, info, warning, error (default: info)")
        cluster_options(node, required=True)

    def daemon_options(sub: argparse.ArgumentParser) -> None:
        from orchestrator.cli.api_target import add_options

        sub.add_argument(
            "-c", "--config", metavar="FILE", help="goondan.yaml (locates the state; default here)"
        )
        state_options(sub)
        sub.add_argument("--json", action="store_true", help="print JSON")
        add_options(sub)

    status = command("status", "show every agent of the running daemon", cmd_status)
    if status is not None:
        daemon_options(status)

    usage = command(
        "usage", "tokens, cost and budgets left per agent, instance and trace", cmd_usage
    )
    if usage is not None:
        usage.add_argument("--trace", metavar="TRACE_ID", help="one trace (see `logs`)")
        usage.add_argument(
            "--traces", type=int, default=20, metavar="N", help="latest traces shown (default: 20)"
        )
        daemon_options(usage)

    send = command("send", "deliver text to an agent of the running daemon", cmd_send)
    if send is not None:
        send.add_argument("agent", help="target agent")
        send.add_argument("text", help="the input")
        send.add_argument(
            "--instance", default=DEFAULT_INSTANCE_KEY, help="instance key (default: default)"
        )
        send.add_argument("--no-wait", action="store_true", help="return once accepted")
        send.add_argument("--stream", action="store_true", help=_stream_help())
        send.add_argument(
            "--timeout",
            type=float,
            metavar="SECONDS",
            help="how long the request may take (default: the swarm's requestTimeoutSeconds)",
        )
        daemon_options(send)

    restart = command("restart", "gracefully restart an agent (or --all)", cmd_restart)
    if restart is not None:
        restart.add_argument("agent", nargs="?", help="agent to restart")
        restart.add_argument("--all", action="store_true", help="restart every agent")
        restart.add_argument(
            "--fresh",
            action="store_true",
            help="delete the agent's conversations (every instance) before it starts again",
        )
        daemon_options(restart)

    requests = command(
        "requests", "the requests waiting for an answer (their ids, for cancel)", cmd_requests
    )
    if requests is not None:
        daemon_options(requests)

    cancel = command("cancel", "cancel a running request (by request id or trace id)", cmd_cancel)
    if cancel is not None:
        cancel.add_argument("id", metavar="TRACE_OR_REQUEST_ID", help="see `requests` or `logs`")
        cancel.add_argument(
            "--reason", default="cancelled by an operator", help="told to the caller"
        )
        daemon_options(cancel)

    for name in ("instances", "instance"):  # `instance`: the original runtime's name
        instances = command(
            name,
            "list conversation instances; `instances delete AGENT KEY`, "
            "`instances restart [AGENT] KEY`",
            cmd_instances,
        )
        if instances is not None:
            instances.add_argument(
                "words",
                nargs="*",
                metavar="[AGENT] | delete AGENT KEY | restart [AGENT] KEY",
            )
            daemon_options(instances)

    approvals = command(
        "approvals", "list tool calls waiting for an operator's approval", cmd_approvals
    )
    if approvals is not None:
        approvals.add_argument("--agent", help="only this agent's")
        approvals.add_argument("--all", action="store_true", help="decided ones too")
        daemon_options(approvals)

    approve = command("approve", "approve a parked tool call: it runs", cmd_approve)
    if approve is not None:
        approve.add_argument("id", help="the approval id (apr_...)")
        approve.add_argument("--args", help="JSON object of arguments to run it with instead")
        approve.add_argument("--wait", action="store_true", help="print the Turn's answer too")
        daemon_options(approve)

    reject = command("reject", "reject a parked tool call: the model is told why", cmd_reject)
    if reject is not None:
        reject.add_argument("id", help="the approval id (apr_...)")
        reject.add_argument("--reason", required=True, help="why (the model reads it)")
        reject.add_argument("--wait", action="store_true", help="print the Turn's answer too")
        daemon_options(reject)

    logs = command("logs", "show the runtime event log (Turns, Steps, tools, processes)", cmd_logs)
    if logs is not None:
        config_option(logs, "locates the state")
        state_options(logs)
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
        from orchestrator.cli.api_target import add_options

        add_options(logs)

    studio = command("studio", "a local web app: agents, traces, conversations, logs", cmd_studio)
    if studio is not None:
        from orchestrator.studio import DEFAULT_PORT

        studio.add_argument(
            "-c", "--config", metavar="FILE", help="goondan.yaml (locates the state; default here)"
        )
        state_options(studio)
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

    command("schema", "print the JSON Schema of goondan.yaml resources", cmd_schema)

    init = command("init", "start a swarm of your own from a template", cmd_init)
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

    doctor = command("doctor", "check this machine is ready to run the swarm", cmd_doctor)
    if doctor is not None:
        config_option(doctor)
        env_file_option(doctor)
        state_options(doctor)
        doctor.add_argument("--json", action="store_true", help="print the checks as JSON")

    package = command("package", "add, install, update or publish Goondan packages", cmd_package)
    if package is not None:
        from orchestrator.cli.packages import add_arguments

        add_arguments(package, common)

    tool = command("tool", "derive a Tool's exports entry from a typed handler", cmd_tool)
    if tool is not None:
        from orchestrator.cli.tool import add_arguments as tool_arguments

        tool_arguments(tool, common)

    completion = command(
        "completion", "print a shell completion script (bash, zsh, fish)", cmd_completion
    )
    if completion is not None:
        completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    return parser


def _command_in(words: Sequence[str]) -> str | None:
    """The command ``words`` name (the first word that is not ``--debug``), if it is one."""
    for word in words:
        if word != "--debug":
            return word if word in COMMANDS else None
    return None


COMMANDS = frozenset(
    {
        "validate",
        "run",
        "node",
        "status",
        "usage",
        "send",
        "restart",
        "requests",
        "cancel",
        "instances",
        "instance",
        "approvals",
        "approve",
        "reject",
        "logs",
        "studio",
        "schema",
        "init",
        "doctor",
        "package",
        "tool",
        "completion",
    }
)
"""Every command name (a test checks it against the parser's)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    if "_ARGCOMPLETE" in os.environ:  # the shell completes a word: answer and exit
        from orchestrator.cli.completion import complete

        complete(build_parser(), _state_dir)
    # Building every command's arguments is a good part of a short command's time: build
    # those of the command given (all of them for help, or anything unexpected).
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_in(words))
    args = parser.parse_args(words)
    if args.version:
        version = version_text()
        print(json.dumps({"version": version}) if args.json else f"goondan-py {version}")
        return 0
    if args.command is None:
        parser.print_usage(sys.stderr)
        print("error: name a command (see --help)", file=sys.stderr)
        return int(ExitCode.USAGE)
    if getattr(args, "no_color", False):
        os.environ["NO_COLOR"] = "1"  # the convention; agent processes inherit it
    if getattr(args, "allow_outside_bundle", False):
        from bundle.loader import ALLOW_OUTSIDE_BUNDLE_ENV

        # Through the environment, so the validators `run --watch` starts agree.
        os.environ[ALLOW_OUTSIDE_BUNDLE_ENV] = "1"
    command: Command = args.run
    try:
        code = command(args)
        sys.stdout.flush()  # a reader that left shows here, not at the interpreter's exit
        return code
    except BrokenPipeError as exc:
        if not _stdout_gone():
            return _internal_error(args, exc)
        return _reader_gone()
    except _DaemonFailed as failed:
        return failed.exit_code
    except _UsageError as exc:
        return _fail(args, ExitCode.USAGE, str(exc))
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:
        return _internal_error(args, exc)


def _internal_error(args: argparse.Namespace, exc: Exception) -> int:
    """A bug of ours: one line, the traceback only when asked."""
    if args.debug:
        import traceback

        traceback.print_exception(exc)
    print(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
    return 1


def _stdout_gone() -> bool:
    """Whether standard output is a pipe its reader closed (``logs | head`` once head has its
    lines), rather than a socket to the daemon breaking."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(flags & select.POLLERR for _, flags in poller.poll(0))
    except (OSError, ValueError):  # no descriptor: a stand-in stream
        return False


def _reader_gone() -> int:
    """Stop quietly, as ``git log | head`` does: no message, exit 141 (128 + SIGPIPE)."""
    import signal

    # The interpreter flushes stdout once more as it exits; what is left goes nowhere.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + int(signal.SIGPIPE)
