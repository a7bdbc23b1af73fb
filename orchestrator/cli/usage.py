"""``usage``: tokens, cost and budgets left per agent, instance and trace.

The running daemon is asked (``/v1/usage``); with none running, the same report is read back
from the state directory (:mod:`orchestrator.cli.usage_offline`), as ``approvals``, ``logs`` and the
studio read it. A daemon at ``--api-url`` is always asked: its state is not here.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from goondan.errors import HttpCode
from orchestrator.tables import Column, Table


def run_usage(
    args: argparse.Namespace,
    state_dir: Callable[[], Path],
    bundle_path: Callable[[], Path],
    fail: Callable[[int, str], int],
) -> int:
    """The ``usage`` command; ``fail(exit code, message)`` reports a failure."""
    from orchestrator.cli.api_target import TargetError, ask, remote_url
    from orchestrator.http.client import error_text, path_segment

    query = f"trace={path_segment(args.trace)}" if args.trace else f"traces={args.traces}"
    offline = False
    try:
        status, answer = ask(args, state_dir, "GET", f"/v1/usage?{query}")
    except TargetError as exc:
        if exc.failure != "no-daemon" or remote_url(args) is not None:
            return fail(exc.exit_code, str(exc))
        status, answer = _from_disk(args, state_dir(), bundle_path())
        offline = True
    if status >= 400:
        if args.json:
            print(json.dumps(answer))
        else:
            print(f"error: {error_text(answer)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(answer, indent=2))
    elif args.trace:
        print_trace_usage(answer)
    else:
        print_usage(answer, offline=offline)
    return 0


def _from_disk(args: argparse.Namespace, state_dir: Path, bundle_path: Path) -> tuple[int, Any]:
    """``(status, body)`` as the daemon would answer, from the state directory."""
    from orchestrator.cli.usage_offline import offline_usage

    report = offline_usage(state_dir, bundle_path, traces=args.traces, trace=args.trace)
    if report is None:
        return 404, {
            "error": {
                "code": HttpCode.NOT_FOUND,
                "message": f"no usage recorded for trace {args.trace!r}",
            }
        }
    return 200, report


def money(value: float) -> str:
    """A cost as ``usage`` shows it (``-`` for none)."""
    return f"{value:.4f}" if value else "-"


def left(remaining: dict[str, Any] | None) -> str:
    """``totalTokens 120, cost 0.0100`` of what a budget has left (``-`` without one)."""
    if not remaining:
        return "-"
    return ", ".join(
        f"{name} {money(value) if name == 'cost' else value}" for name, value in remaining.items()
    )


def print_trace_usage(answer: dict[str, Any]) -> None:
    """``usage --trace ID``."""
    used = answer.get("usage", {})
    print(f"trace {answer.get('traceId')} (entered at {answer.get('root')})")
    print(f"  agents: {', '.join(answer.get('agents', []))}")
    print(
        f"  calls {used.get('calls', 0)}, tokens {used.get('inputTokens', 0)} in / "
        f"{used.get('outputTokens', 0)} out, cost {money(used.get('cost', 0))}"
    )
    print(f"  budget left: {left(answer.get('remaining'))}")
    if answer.get("exceeded"):
        print(f"  exceeded: {answer['exceeded']}")


def print_usage(answer: dict[str, Any], *, offline: bool = False) -> None:
    """``usage``: the totals, then a table per agent, instance and trace, and the pools."""
    total = answer.get("total", {})
    # The daemon counts since it started; the event log holds every run it kept.
    since = "in the event log (no daemon running)" if offline else "since start"
    print(
        f"{since}: {total.get('calls', 0)} model calls, {total.get('inputTokens', 0)} tokens "
        f"in, {total.get('outputTokens', 0)} out, cost {money(total.get('cost', 0))}"
    )
    print()
    agents = Table(
        (
            Column("AGENT", 20),
            Column("CALLS", 6, ">"),
            Column("INPUT", 9, ">"),
            Column("OUTPUT", 9, ">"),
            Column("COST", 10, ">"),
            Column("BUDGETS", gap="  "),
        )
    )
    for row in answer.get("agents", []):
        used = row.get("usage", {})
        budgets = "; ".join(
            f"{scope}: {left(ceilings)}" for scope, ceilings in (row.get("budgets") or {}).items()
        )
        agents.add_row(
            row["agent"],
            used.get("calls", 0),
            used.get("inputTokens", 0),
            used.get("outputTokens", 0),
            money(used.get("cost", 0)),
            budgets or "-",
        )
    agents.print()
    instances = [row for row in answer.get("instances", []) if row.get("usage", {}).get("calls")]
    if instances:
        print()
        table = Table(
            (
                Column("AGENT", 20),
                Column("INSTANCE", 24),
                Column("TOKENS", 9, ">"),
                Column("COST", 10, ">"),
                Column("LEFT", gap="  "),
            )
        )
        for row in instances:
            used = row["usage"]
            table.add_row(
                row["agent"],
                row.get("instanceKey"),
                used.get("totalTokens", 0),
                money(used.get("cost", 0)),
                left(row.get("remaining")),
            )
        table.print()
    traces = answer.get("traces", [])
    if traces:
        print()
        table = Table(
            (
                Column("TRACE", 34, cut=False),
                Column("ROOT", 16),
                Column("TOKENS", 9, ">"),
                Column("COST", 10, ">"),
                Column("LEFT", gap="  "),
            )
        )
        for row in traces:
            used = row.get("usage", {})
            budget = (
                "EXCEEDED " + row["exceeded"] if row.get("exceeded") else left(row.get("remaining"))
            )
            table.add_row(
                row["traceId"],
                row.get("root", ""),
                used.get("totalTokens", 0),
                money(used.get("cost", 0)),
                budget,
            )
        table.print()
    print_pools(answer.get("pools") or [])


def print_pools(pools: list[dict[str, Any]]) -> None:
    """The rate-limit pools (nothing without any): permits in use and waiting, what the buckets
    hold, pauses."""
    if not pools:
        return
    print()
    table = Table(
        (
            Column("POOL", 20),
            Column("IN USE", 9, ">"),
            Column("WAITING", 7, ">"),
            Column("REQ LEFT", 9, ">"),
            Column("TOK LEFT", 9, ">"),
            Column("PAUSED", 7, ">"),
            Column("WAITED", 7, ">"),
            Column("TIMEOUTS", 8, ">"),
        )
    )
    for pool in pools:
        limit = pool.get("maxConcurrent")
        requests = pool.get("requestsAvailable")
        tokens = pool.get("tokensAvailable")
        paused = pool.get("pausedForSeconds") or 0
        table.add_row(
            pool["pool"],
            f"{pool.get('inUse', 0)}/{limit if limit is not None else '-'}",
            pool.get("waiting", 0),
            "-" if requests is None else f"{requests:.0f}",
            "-" if tokens is None else tokens,
            f"{paused:.1f}s" if paused else "-",
            pool.get("waited", 0),
            pool.get("timedOut", 0),
        )
    table.print()
