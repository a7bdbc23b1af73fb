"""The commands that operate the running daemon: ``status``, ``usage``, ``restart``,
``requests``, ``cancel`` and ``instances`` (``send``: :mod:`.send`)."""

from __future__ import annotations

import argparse
import json
import sys

from msgspec import UnsetType

from orchestrator.cli.common import (
    accepted_as,
    ask_daemon,
    bundle_path,
    fail,
    read_as,
    refused,
    state_dir_of,
)
from orchestrator.operations.answers import (
    Cancelled,
    Cluster,
    InstanceDeleted,
    InstanceRow,
    Requests,
    Restarted,
    SwarmStatus,
)


def cmd_status(args: argparse.Namespace) -> int:
    """One row per agent of the running daemon; exit 1 when none runs."""
    found = accepted_as(args, "GET", "/v1/agents", SwarmStatus)
    if found is None:
        return 1
    answer, status = found
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    print(f"swarm {status.swarm} (orchestrator pid {_given(status.pid)})")
    cluster = status.cluster if not isinstance(status.cluster, UnsetType) else None
    if cluster is not None:
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
    for row in status.agents:
        uptime = f"{row.uptime_seconds:.0f}s" if row.uptime_seconds is not None else "-"
        node = (row.node or "(leader)",) if cluster else ()
        agents.add_row(
            *node,
            row.agent,
            row.pid or "-",
            row.status,
            len(row.instances),
            row.restarts,
            row.crashes,
            uptime,
            row.pending_delegates,
            row.permits_waiting,
            row.usage.total_tokens if row.usage is not None else 0,
            (row.last_exit.reason if row.last_exit is not None else None) or "-",
        )
    agents.print()
    print_pools(status.pools if not isinstance(status.pools, UnsetType) else [])
    if status.connections:
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

        for connection in status.connections:
            table.add_row(
                connection.connection,
                connection.pid or "-",
                connection.status,
                connection.connector,
                connection.restarts,
                connection.health.consecutive_failures,
                last_event_cell(connection),
                why_cell(connection),
            )
        table.print()
    return 0


def _shown(value: object, missing: str) -> object:
    """``value`` of a row read from disk, or ``missing`` for a field its record lacks."""
    return missing if isinstance(value, UnsetType) else value


def _given(value: object) -> object:
    """``value``, or ``None`` for a field the daemon left out."""
    return None if isinstance(value, UnsetType) else value


def cmd_usage(args: argparse.Namespace) -> int:
    """Tokens and cost per agent, instance and trace, what budgets have left, and the pools
    (from the state directory when no daemon runs)."""
    from orchestrator.cli.usage import run_usage

    return run_usage(
        args,
        lambda: state_dir_of(args),
        lambda: bundle_path(args),
        lambda code, message: fail(args, code, message),
    )


def _print_cluster(cluster: Cluster) -> None:
    print(f"cluster {cluster.cluster} at {cluster.server}")
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
    for node in cluster.nodes:
        same = node.same_bundle
        table.add_row(
            node.node,
            "yes" if node.up else "NO",
            "-" if same is None else ("same" if same else "DIFFERS"),
            node.host or "-",
            node.pid or "-",
            ", ".join(node.agents) or "-",
        )
    table.print()
    print()


def cmd_restart(args: argparse.Namespace) -> int:
    """Gracefully restart one agent (or --all); conversations survive, unless ``--fresh``."""
    from orchestrator.http.client import path_segment

    if not args.all and not args.agent:
        print("error: name an agent, or pass --all", file=sys.stderr)
        return 2
    names = [args.agent]
    if args.all:
        swarm = accepted_as(args, "GET", "/v1/agents", SwarmStatus)
        if swarm is None:
            return 1
        names = [row.agent for row in swarm[1].agents]
    restarted = []
    query = "?fresh=1" if args.fresh else ""
    for name in names:
        path = f"/v1/agents/{path_segment(name)}/restart{query}"
        found = accepted_as(args, "POST", path, Restarted)
        if found is None:
            return 1
        answer, done = found
        restarted.append(answer)
        if not args.json:
            fresh = ""
            if args.fresh:
                deleted = done.deleted_instances
                count = 0 if isinstance(deleted, UnsetType) else len(deleted)
                fresh = f", {count} conversation{'s' if count != 1 else ''} deleted"
            print(f"{done.agent}: restarted (pid {done.pid}{fresh})")
    if args.json:
        print(json.dumps({"restarted": restarted}))
    return 0


def cmd_requests(args: argparse.Namespace) -> int:
    """The requests of the running daemon waiting for an answer (ids for ``cancel``)."""
    found = accepted_as(args, "GET", "/v1/requests", Requests)
    if found is None:
        return 1
    answer, pending = found
    if args.json:
        print(json.dumps(answer["requests"] if isinstance(answer, dict) else [], indent=2))
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
    for row in pending.requests:
        table.add_row(
            row.request_id, row.trace_id, row.caller, row.agent, row.instance_key, row.started_at
        )
    table.print()
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a running request by request id or trace id; its caller is answered CANCELLED."""
    from orchestrator.http.client import path_segment

    asked = ask_daemon(
        args, "POST", f"/v1/requests/{path_segment(args.id)}/cancel", {"reason": args.reason}
    )
    status, answer = asked
    if args.json:
        print(json.dumps(answer))
    elif not refused(status, answer):
        cancelled = read_as(args, answer, Cancelled)
        if cancelled is None:
            return 1
        for trace_id in cancelled.cancelled:
            print(f"cancelled trace {trace_id}")
    return 0 if status < 400 else 1


def cmd_instances(args: argparse.Namespace) -> int:
    """``instances [AGENT]`` lists conversation instances; ``instances delete AGENT KEY`` removes one."""
    words = list(args.words)
    if not words and getattr(args, "command", None) == "instance":  # bare: the terminal view
        from orchestrator.cli.instance import view

        shown = view(args, lambda: state_dir_of(args))
        if shown is not None:
            return shown
    if words and words[0] == "restart":
        from orchestrator.cli.instance_restart import restart_instances

        return restart_instances(args, words[1:], lambda: state_dir_of(args))
    if words and words[0] == "delete":
        return _delete_instance(args, words)
    if len(words) > 1:
        print("usage: instances [AGENT] | instances delete AGENT KEY", file=sys.stderr)
        return 2
    return _list_instances(args, words[0] if words else None)


def _delete_instance(args: argparse.Namespace, words: list[str]) -> int:
    """``instances delete AGENT KEY``: through the daemon, else (none running) on disk."""
    from orchestrator.cli.api_target import TargetError, ask, remote_url
    from orchestrator.http.client import error_text, path_segment
    from orchestrator.state_dir import delete_instance_dir

    if len(words) != 3:
        print("usage: instances delete AGENT KEY", file=sys.stderr)
        return 2
    _, agent, key = words
    try:  # through the daemon, so a running agent forgets the instance too
        status, answer = ask(
            args,
            lambda: state_dir_of(args),
            "DELETE",
            f"/v1/agents/{path_segment(agent)}/instances/{path_segment(key)}",
        )
    except TargetError as exc:
        if exc.failure != "no-daemon" or remote_url(args) is not None:
            return fail(args, exc.exit_code, str(exc))
        state_dir = state_dir_of(args)
        status, answer = (
            200,
            {"ok": True, "deleted": delete_instance_dir(state_dir, agent, key)},
        )
    if args.json:
        print(json.dumps(answer))
    elif status >= 400:
        print(f"error: {error_text(answer)}", file=sys.stderr)
    else:
        deleted = read_as(args, answer, InstanceDeleted)
        if deleted is None:
            return 1
        print("deleted" if deleted.deleted else "not found")
    return 0 if status < 400 else 1


def _list_instances(args: argparse.Namespace, agent: str | None) -> int:
    """``instances [AGENT]``: read from disk, as the listing needs no daemon (a daemon at
    ``--api-url`` is asked)."""
    from orchestrator.cli.api_target import TargetError, remote_rows, remote_url
    from orchestrator.state_dir import list_instances

    try:
        if remote_url(args) is not None:
            rows = remote_rows(args, "/v1/instances", "instances", agent=agent)
        else:
            rows = list_instances(state_dir_of(args), agent)
    except TargetError as exc:
        return fail(args, exc.exit_code, str(exc))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    instances = read_as(args, rows, list[InstanceRow])
    if instances is None:
        return 1
    _print_instances(instances)
    return 0


def _print_instances(instances: list[InstanceRow]) -> None:
    """The table of ``instances``."""
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
    for row in instances:
        table.add_row(
            _shown(row.agent_name, "?"),
            _shown(row.instance_key, "?"),
            _shown(row.status, "?"),
            row.usage.total_tokens if not isinstance(row.usage, UnsetType) else 0,
            _shown(row.updated_at, ""),
        )
    table.print()
