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

if TYPE_CHECKING:
    from ipc.protocol import DelegateAnswer

Command = Callable[[argparse.Namespace], int]


def cmd_validate(args: argparse.Namespace) -> int:
    """Validate a goondan.yaml: exit 0 with a summary, or list every error and exit 1.

    The checks that import Tool and Extension modules run in a child process with a deadline
    (:mod:`orchestrator.validation`), so no module can end or wedge this command.
    """
    from bundle import ConfigIssue
    from orchestrator.validation import validate_in_child

    path = Path(args.file)
    if args.verdict_from_child:
        return _validate_here(path, check_handlers=not args.no_handlers)
    verdict = validate_in_child(path, check_handlers=not args.no_handlers)
    if args.json:
        print(json.dumps(verdict, indent=2))
        return 0 if verdict.get("valid") else 1
    if verdict.get("valid"):
        print(f"{path}: valid ({verdict.get('summary')})")
        return 0
    errors = verdict.get("errors") or []
    for error in errors:
        issue = ConfigIssue(
            code=str(error.get("code")),
            message=str(error.get("message")),
            file=Path(error["file"]) if error.get("file") else None,
            line=error.get("line"),
            column=error.get("column"),
            resource=error.get("resource"),
            field=error.get("field"),
            suggestion=error.get("suggestion"),
        )
        print(issue.format(), file=sys.stderr)
    print(f"{len(errors)} error{'s' if len(errors) != 1 else ''} in {path}", file=sys.stderr)
    return 1


def _validate_here(path: Path, *, check_handlers: bool) -> int:
    """The child's side of ``validate``: load, check, print the verdict as JSON."""
    from bundle import BundleError, load_bundle

    try:
        bundle = load_bundle(path, check_handlers=check_handlers)
    except BundleError as exc:
        print(json.dumps({"valid": False, "errors": [e.to_json() for e in exc.errors]}))
        return 1
    print(json.dumps({"valid": True, "errors": [], "summary": bundle.summary()}))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of goondan.yaml documents."""
    from bundle import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run the swarm: one request with ``--input``, else a daemon until SIGINT/SIGTERM."""
    return _serve(args, "orchestrator", _run)


def _serve(
    args: argparse.Namespace,
    process: str,
    main: Callable[[argparse.Namespace], Coroutine[Any, Any, int]],
) -> int:
    """Run ``main(args)`` as a long-lived process of the swarm: its logging, a private
    umask, uvloop."""
    from ipc.logs import configure_logging

    if args.log_level:
        os.environ["GOONDAN_LOG_LEVEL"] = args.log_level  # agent processes inherit it
    configure_logging(args.log_level, process=process)
    # A daemon's files are its user's alone; agent processes inherit this (and set it again).
    os.umask(0o077)
    try:
        import uvloop

        return uvloop.run(main(args))
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        import asyncio

        return asyncio.run(main(args))


def _api_token(variable: str | None) -> str | None:
    """The bearer token from the environment variable ``variable`` (never from the command line,
    where other users could read it)."""
    if variable is None:
        return None
    token = os.environ.get(variable, "")
    if not token:
        raise ValueError(f"--api-token-env {variable}: the variable is not set or empty")
    return token


async def _run(args: argparse.Namespace) -> int:
    from bundle import BundleError
    from bundle.secrets import SecretUnavailable
    from goondan.errors import DeliveryError
    from ipc import IpcError
    from orchestrator.daemon import Orchestrator
    from orchestrator.http_api import ApiRefused, DaemonAlreadyRunning
    from orchestrator.telemetry import otlp_settings

    try:
        orchestrator = Orchestrator(
            Path(args.file),
            state_dir=Path(args.state_dir) if args.state_dir else None,
            swarm=args.swarm,
            api_listen=args.listen,
            api_token=_api_token(args.api_token_env),
            cluster=_cluster_settings(args, Path(args.file)),
            otlp=otlp_settings(args.otlp_endpoint, os.environ),
        )
    except (ValueError, SecretUnavailable) as exc:  # a --listen not HOST:PORT, a token unset
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BundleError as exc:
        for issue in exc.errors:
            print(issue.format(), file=sys.stderr)
        return 1
    orchestrator.install_signal_handlers()
    try:
        try:
            await orchestrator.start()
        except (DaemonAlreadyRunning, ApiRefused, OSError, DeliveryError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except (IpcError, TimeoutError) as exc:
            print(f"error: the entry agent could not start: {exc}", file=sys.stderr)
            return 1
        if args.input is not None:
            return await _one_request(orchestrator, args)
        if args.watch:
            from orchestrator.watch import Watcher

            orchestrator.start_soon(Watcher(orchestrator).run(), "watch")
        if sys.stdin is not None and sys.stdin.isatty() and not orchestrator.connections.read_stdin:
            await _interactive(orchestrator, args)
        else:
            await orchestrator.wait_stopped()
        return 0
    finally:
        await orchestrator.shutdown()


def _cluster_settings(args: argparse.Namespace, bundle: Path) -> Any:
    """The ``ClusterSettings`` of ``--cluster`` and its options; ``None`` without it."""
    if not getattr(args, "cluster", None):
        return None
    try:
        from orchestrator.cluster.settings import ClusterSettings
    except ImportError:  # pragma: no cover - the extra is missing
        raise ValueError(
            "--cluster needs the `cluster` extra: pip install 'goondan[cluster]'"
        ) from None
    if args.heartbeat_seconds <= 0:
        raise ValueError("--heartbeat-seconds must be positive")
    name = args.cluster_name
    if name is None:
        from bundle import load_bundle

        name = load_bundle(bundle, check_handlers=False).swarm(args.swarm).name

    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    return ClusterSettings(
        url=args.cluster,
        name=name,
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

    try:
        from orchestrator.cluster.node import Node

        node = Node(
            Path(args.file),
            _cluster_settings(args, Path(args.file)),
            args.name,
            state_dir=Path(args.state_dir) if args.state_dir else None,
            swarm=args.swarm,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BundleError as exc:
        for issue in exc.errors:
            print(issue.format(), file=sys.stderr)
        return 1
    node.install_signal_handlers()
    try:
        try:
            await node.start()
        except DeliveryError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        await node.wait_stopped()
        return 0
    finally:
        await node.shutdown()


async def _one_request(orchestrator: Any, args: argparse.Namespace) -> int:
    agent = args.agent or orchestrator.entry_agent
    answer: DelegateAnswer = await orchestrator.request(
        args.input, agent=agent, instance_key=args.instance
    )
    error = answer.error
    if args.json:
        out = {
            "output": answer.output,
            "status": answer.status,
            "traceId": (answer.turn or {}).get("traceId"),
            "agent": agent,
            "instanceKey": args.instance,
        }
        if error is not None:
            out["error"] = error.to_dict()
        print(json.dumps(out, ensure_ascii=False))
    elif answer.ok:
        print(answer.output if answer.output is not None else "")
    elif error is not None:
        print(f"error: {error.message} ({error.code})", file=sys.stderr)
    else:
        print("error: the request failed (ERROR)", file=sys.stderr)
    return 0 if answer.ok else 1


async def _interactive(orchestrator: Any, args: argparse.Namespace) -> None:
    """A prompt to the entry agent; EOF (Ctrl-D) stops the daemon gracefully."""
    import asyncio
    import threading

    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:  # a daemon thread: a blocked readline must not hold up exit
        while True:
            line = sys.stdin.readline()
            loop.call_soon_threadsafe(lines.put_nowait, line if line else None)
            if not line:
                return

    threading.Thread(target=read, name="stdin", daemon=True).start()
    agent = args.agent or orchestrator.entry_agent
    stopped = asyncio.ensure_future(orchestrator.wait_stopped())
    try:
        while True:
            print(f"{agent}> ", end="", flush=True)
            next_line = asyncio.ensure_future(lines.get())
            await asyncio.wait({next_line, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if stopped.done() or next_line.result() is None:
                next_line.cancel()
                print()
                return
            text = (next_line.result() or "").strip()
            if text:
                await _prompt_answer(orchestrator, text, agent, args.instance)
    finally:
        stopped.cancel()


async def _prompt_answer(orchestrator: Any, text: str, agent: str, instance: str) -> None:
    from ipc import IpcError

    answer: DelegateAnswer = await orchestrator.request(text, agent=agent, instance_key=instance)
    if answer.ok:
        print(answer.output if answer.output is not None else "")
    else:
        error = answer.error or IpcError("the request failed", code="ERROR")
        print(f"error: {error.message} ({error.code})")


def _state_dir(args: argparse.Namespace) -> Path:
    from orchestrator.state_dir import default_state_dir

    return Path(args.state_dir) if args.state_dir else default_state_dir(Path(args.config))


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
) -> tuple[int, Any] | None:
    """The daemon's ``(status, body)``; ``None`` (exit 1) when none runs; exit 3 when it
    takes the request and never answers."""
    from orchestrator.api_client import EXIT_NO_ANSWER, DaemonApi, NoAnswer, NoDaemon

    try:
        api = DaemonApi(_state_dir(args))
        if wait_seconds is not None:
            api.timeout = max(api.timeout, wait_seconds)
        return api.call(method, path, body)
    except NoDaemon as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    except NoAnswer as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise _DaemonFailed(EXIT_NO_ANSWER) from exc


def _refused(status: int, body: Any) -> bool:
    """Print the API's error and say so, when ``status`` is one."""
    from orchestrator.api_client import error_text

    if status < 400:
        return False
    print(f"error: {error_text(body)}", file=sys.stderr)
    return True


def _accepted(args: argparse.Namespace, method: str, path: str) -> Any | None:
    """The daemon's answer when it took the request; ``None`` (error printed) otherwise."""
    asked = _ask_daemon(args, method, path)
    if asked is None or _refused(*asked):
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
    header = f"{'AGENT':<20} {'PID':>7} {'STATUS':<17} {'INST':>4} {'RESTARTS':>8} {'CRASHES':>7} {'UPTIME':>9} {'PENDING':>7}  LAST EXIT"
    if cluster:
        header = f"{'NODE':<14} " + header
    print(header)
    for row in answer.get("agents", []):
        uptime = f"{row['uptimeSeconds']:.0f}s" if row.get("uptimeSeconds") is not None else "-"
        last = (row.get("lastExit") or {}).get("reason") or "-"
        node = f"{row.get('node') or '(leader)':<14} " if cluster else ""
        print(
            f"{node}{row['agent']:<20} {row.get('pid') or '-':>7} {row['status']:<17} {len(row.get('instances', [])):>4} "
            f"{row['restarts']:>8} {row['crashes']:>7} {uptime:>9} {row.get('pendingDelegates', 0):>7}  {last}"
        )
    connections = answer.get("connections") or []
    if connections:
        print()
        print(
            f"{'CONNECTION':<20} {'PID':>7} {'STATUS':<17} {'CONNECTOR':<14} {'RESTARTS':>8}  WHY"
        )
        for row in connections:
            why = row.get("bootError") or ((row.get("lastExit") or {}).get("reason")) or "-"
            print(
                f"{row['connection']:<20} {row.get('pid') or '-':>7} {row['status']:<17} "
                f"{row['connector']:<14} {row['restarts']:>8}  {why}"
            )
    return 0


def _print_cluster(cluster: dict[str, Any]) -> None:
    print(f"cluster {cluster.get('cluster')} at {cluster.get('server')}")
    print(f"{'NODE':<14} {'UP':<4} {'BUNDLE':<9} {'HOST':<20} {'PID':>7}  AGENTS")
    for node in cluster.get("nodes", []):
        same = node.get("sameBundle")
        bundle = "-" if same is None else ("same" if same else "DIFFERS")
        print(
            f"{node['node']:<14} {'yes' if node.get('up') else 'NO':<4} {bundle:<9} "
            f"{node.get('host') or '-':<20} {node.get('pid') or '-':>7}  "
            f"{', '.join(node.get('agents', [])) or '-'}"
        )
    print()


def cmd_send(args: argparse.Namespace) -> int:
    """Deliver text to an agent of the running daemon and print its answer."""
    from orchestrator.api_client import path_segment

    route = "sends" if args.no_wait else "requests"
    body: dict[str, Any] = {"input": args.text, "instanceKey": args.instance}
    if args.timeout is not None and not args.no_wait:
        body["timeoutMs"] = int(args.timeout * 1000)
    asked = _ask_daemon(
        args,
        "POST",
        f"/v1/agents/{path_segment(args.agent)}/{route}",
        body,
        # The daemon answers by the request's timeout; past it (and a margin), it is gone.
        wait_seconds=None if args.timeout is None else args.timeout + 30,
    )
    if asked is None:
        return 1
    status, answer = asked
    if args.json:
        print(json.dumps(answer))
    elif status == 502:  # the request ran and failed: the answer says why
        error = answer.get("error") or {}
        print(f"error: {error.get('message')} ({error.get('code')})", file=sys.stderr)
    elif _refused(status, answer):
        return 1
    elif not args.no_wait:
        print(answer.get("output", ""))
    return 0 if status < 400 else 1


def cmd_restart(args: argparse.Namespace) -> int:
    """Gracefully restart one agent (or --all); conversations survive."""
    from orchestrator.api_client import path_segment

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
    for name in names:
        answer = _accepted(args, "POST", f"/v1/agents/{path_segment(name)}/restart")
        if answer is None:
            return 1
        restarted.append(answer)
        if not args.json:
            print(f"{answer['agent']}: restarted (pid {answer['pid']})")
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
    print(f"{'REQUEST':<30} {'TRACE':<32} {'CALLER':<14} {'AGENT':<14} {'INSTANCE':<14} STARTED")
    for row in rows:
        print(
            f"{row['requestId']:<30} {row['traceId']:<32} {row['caller']:<14} "
            f"{row['agent']:<14} {row['instanceKey']:<14} {row['startedAt']}"
        )
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a running request by request id or trace id; its caller is answered CANCELLED."""
    from orchestrator.api_client import path_segment

    asked = _ask_daemon(
        args, "POST", f"/v1/requests/{path_segment(args.id)}/cancel", {"reason": args.reason}
    )
    if asked is None:
        return 1
    status, answer = asked
    if args.json:
        print(json.dumps(answer))
    elif not _refused(status, answer):
        for trace_id in answer.get("cancelled", []):
            print(f"cancelled trace {trace_id}")
    return 0 if status < 400 else 1


def cmd_instances(args: argparse.Namespace) -> int:
    """``instances [AGENT]`` lists conversation instances; ``instances delete AGENT KEY`` removes one."""
    from orchestrator.api_client import (
        EXIT_NO_ANSWER,
        DaemonApi,
        NoAnswer,
        NoDaemon,
        error_text,
        path_segment,
    )
    from orchestrator.state_dir import delete_instance_dir, list_instances

    words = list(args.words)
    state_dir = _state_dir(args)
    if words and words[0] == "delete":
        if len(words) != 3:
            print("usage: instances delete AGENT KEY", file=sys.stderr)
            return 2
        _, agent, key = words
        try:  # through the daemon, so a running agent forgets the instance too
            status, answer = DaemonApi(state_dir).call(
                "DELETE", f"/v1/agents/{path_segment(agent)}/instances/{path_segment(key)}"
            )
        except NoDaemon:
            status, answer = (
                200,
                {"ok": True, "deleted": delete_instance_dir(state_dir, agent, key)},
            )
        except NoAnswer as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_NO_ANSWER
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
    # Read from disk: the listing needs no daemon.
    rows = list_instances(state_dir, words[0] if words else None)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'AGENT':<20} {'INSTANCE':<24} {'STATUS':<11} UPDATED")
    for row in rows:
        print(
            f"{row.get('agentName', '?'):<20} {row.get('instanceKey', '?'):<24} {row.get('status', '?'):<11} {row.get('updatedAt', '')}"
        )
    return 0


def cmd_approvals(args: argparse.Namespace) -> int:
    """Tool calls waiting for an operator's approval (read from the state directory, so no
    daemon is needed); ``--all`` shows decided ones too."""
    from orchestrator.approvals import list_approvals

    rows = list_approvals(_state_dir(args), agent=args.agent, include_decided=args.all)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no approvals" if args.all else "nothing waits for approval")
    for row in rows:
        where = f"{row.get('agentName')}@{row.get('instanceKey')}"
        arguments = json.dumps(row.get("arguments"), ensure_ascii=False)
        if len(arguments) > 200:
            arguments = arguments[:200] + "…"
        line = f"{row.get('approvalId')}  {where}  {row.get('toolName')}  {arguments}"
        if row.get("status") == "pending":
            line += f"  expires {row.get('expiresAt')}"
        else:
            line += f"  {row.get('status')}"
        print(line)
    return 0


def _decide(args: argparse.Namespace, decision: str, body: dict[str, Any]) -> int:
    """``approve``/``reject``: the decision through the daemon; exit 1 when refused."""
    from orchestrator.api_client import path_segment

    query = "?wait=1" if args.wait else ""
    path = f"/v1/approvals/{path_segment(args.id)}/{decision}{query}"
    asked = _ask_daemon(args, "POST", path, body)
    if asked is None:
        return 1
    status, answer = asked
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
    from orchestrator.api_client import DaemonApi
    from orchestrator.eventlog import FILE_NAME, format_event, matches, parse_since, read_events
    from orchestrator.state_dir import default_state_dir

    state_dir = Path(args.state_dir) if args.state_dir else default_state_dir(Path(args.file))
    path = state_dir / FILE_NAME
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError:
        print(
            f"error: --since {args.since!r}: use 30s, 10m, 2h, 1d or an ISO timestamp",
            file=sys.stderr,
        )
        return 2
    if not path.exists() and not args.follow:
        print(f"no runtime events yet at {path}", file=sys.stderr)
        return 1

    def show(event: dict[str, Any]) -> None:
        if event.get("type") == "text.delta":
            return  # streamed text is not kept in the log: -f shows what plain logs shows
        if matches(event, agent=args.agent, trace=args.trace, since=since):
            print(
                json.dumps(event, ensure_ascii=False) if args.json else format_event(event),
                flush=True,
            )

    stream = DaemonApi(state_dir).events() if args.follow else None
    offset = 0
    recent: list[str] = []
    while True:
        for end, event in read_events(path, offset):
            offset = end
            show(event)
            recent = [*recent[-999:], json.dumps(event, sort_keys=True, default=str)]
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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand; with ``only``, the arguments of that
    command alone (the others are listed, but parse nothing)."""
    parser = argparse.ArgumentParser(
        prog="python -m orchestrator", description="Run and manage Goondan agent swarms."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, run: Command) -> argparse.ArgumentParser | None:
        """Add command ``name``; its parser when its arguments are wanted, else ``None``."""
        sub = commands.add_parser(name, help=help)
        sub.set_defaults(run=run)
        return sub if only in (None, name) else None

    validate = command("validate", "check a goondan.yaml and report every error", cmd_validate)
    if validate is not None:
        validate.add_argument("file", help="path of goondan.yaml")
        validate.add_argument("--json", action="store_true", help="print the result as JSON")
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
        run.add_argument("file", help="path of goondan.yaml")
        run.add_argument(
            "--input", help="send this text to the entry agent, print the answer, exit"
        )
        run.add_argument("--agent", help="send --input to this agent instead of the entry agent")
        run.add_argument(
            "--instance", default=DEFAULT_INSTANCE_KEY, help="instance key (default: default)"
        )
        run.add_argument("--state-dir", help="state directory (default: .goondan/ beside the file)")
        run.add_argument("--swarm", help="which Swarm to run (default: `default`, or the only one)")
        run.add_argument("--json", action="store_true", help="print the answer as JSON")
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
        node.add_argument("file", help="path of goondan.yaml (the same bundle as the leader's)")
        node.add_argument(
            "--name", required=True, help="this node's name, as Swarm.spec.placement uses it"
        )
        node.add_argument(
            "--state-dir", help="state directory (default: .goondan/ beside the file)"
        )
        node.add_argument("--swarm", help="which Swarm (default: `default`, or the only one)")
        node.add_argument("--log-level", help="debug, info, warning, error (default: info)")
        cluster_options(node, required=True)

    def daemon_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "-c", "--config", default="goondan.yaml", help="goondan.yaml (locates the state)"
        )
        sub.add_argument("--state-dir", help="state directory (default: .goondan/ beside the file)")
        sub.add_argument("--json", action="store_true", help="print JSON")

    status = command("status", "show every agent of the running daemon", cmd_status)
    if status is not None:
        daemon_options(status)

    send = command("send", "deliver text to an agent of the running daemon", cmd_send)
    if send is not None:
        send.add_argument("agent", help="target agent")
        send.add_argument("text", help="the input")
        send.add_argument(
            "--instance", default=DEFAULT_INSTANCE_KEY, help="instance key (default: default)"
        )
        send.add_argument("--no-wait", action="store_true", help="return once accepted")
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

    instances = command(
        "instances", "list conversation instances, or `instances delete AGENT KEY`", cmd_instances
    )
    if instances is not None:
        instances.add_argument("words", nargs="*", metavar="[AGENT] | delete AGENT KEY")
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
        logs.add_argument(
            "file", nargs="?", default="goondan.yaml", help="goondan.yaml (locates the state)"
        )
        logs.add_argument(
            "--state-dir", help="state directory (default: .goondan/ beside the file)"
        )
        logs.add_argument("--agent", help="only this agent's events")
        logs.add_argument("--trace", help="only this trace id: one request across every agent")
        logs.add_argument("--since", help="only newer events: 30s, 10m, 2h, 1d or an ISO timestamp")
        logs.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
        logs.add_argument("--json", action="store_true", help="one JSON event per line")

    command("schema", "print the JSON Schema of goondan.yaml resources", cmd_schema)
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
        "send",
        "restart",
        "requests",
        "cancel",
        "instances",
        "approvals",
        "approve",
        "reject",
        "logs",
        "schema",
    }
)
"""Every command name (a test checks it against the parser's)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    # Building every command's arguments is a good part of a short command's time: build
    # those of the command given (all of them for help, or anything unexpected).
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_in(words))
    args = parser.parse_args(words)
    if getattr(args, "allow_outside_bundle", False):
        from bundle.loader import ALLOW_OUTSIDE_BUNDLE_ENV

        # Through the environment, so the validators `run --watch` starts agree.
        os.environ[ALLOW_OUTSIDE_BUNDLE_ENV] = "1"
    command: Command = args.run
    try:
        return command(args)
    except _DaemonFailed as failed:
        return failed.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug of ours: one line, the traceback only when asked
        if args.debug:
            import traceback

            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
        return 1
