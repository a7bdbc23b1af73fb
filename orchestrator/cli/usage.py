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

from msgspec import UnsetType

from orchestrator.operations.answers import Ceilings, PoolRow, TraceUsage, UsageReport
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
        return 0
    import msgspec

    from orchestrator.operations.encoding import convert

    try:
        if args.trace:
            print_trace_usage(convert(answer, TraceUsage))
        else:
            print_usage(convert(answer, UsageReport), offline=offline)
    except msgspec.ValidationError as exc:
        return fail(1, f"the daemon's answer is not understood: {exc}")
    return 0


def _from_disk(args: argparse.Namespace, state_dir: Path, bundle_path: Path) -> tuple[int, Any]:
    """``(status, body)`` as the daemon would answer, from the state directory."""
    from orchestrator.cli.usage_offline import offline_usage

    report = offline_usage(state_dir, bundle_path, traces=args.traces, trace=args.trace)
    if report is None:
        from goondan.errors import HttpCode  # here: `status` prints the pools with this module

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


def left(remaining: Ceilings | UnsetType) -> str:
    """``totalTokens 120, cost 0.0100`` of what a budget has left (``-`` without one)."""
    if isinstance(remaining, UnsetType) or not remaining:
        return "-"
    return ", ".join(
        f"{name} {money(value) if name == 'cost' else value}" for name, value in remaining.items()
    )


def print_trace_usage(answer: TraceUsage) -> None:
    """``usage --trace ID``."""
    used = answer.usage
    print(f"trace {answer.trace_id} (entered at {answer.root})")
    print(f"  agents: {', '.join(answer.agents)}")
    print(
        f"  calls {used.calls}, tokens {used.input_tokens} in / "
        f"{used.output_tokens} out, cost {money(used.cost)}"
    )
    print(f"  budget left: {left(answer.remaining)}")
    if not isinstance(answer.exceeded, UnsetType) and answer.exceeded:
        print(f"  exceeded: {answer.exceeded}")


def print_usage(answer: UsageReport, *, offline: bool = False) -> None:
    """``usage``: the totals, then a table per agent, instance and trace, and the pools."""
    total = answer.total
    # The daemon counts since it started; the event log holds every run it kept.
    since = "in the event log (no daemon running)" if offline else "since start"
    print(
        f"{since}: {total.calls} model calls, {total.input_tokens} tokens "
        f"in, {total.output_tokens} out, cost {money(total.cost)}"
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
    for agent in answer.agents:
        used = agent.usage
        budgets = "; ".join(
            f"{scope}: {left(ceilings)}" for scope, ceilings in agent.budgets.items()
        )
        agents.add_row(
            agent.agent,
            used.calls,
            used.input_tokens,
            used.output_tokens,
            money(used.cost),
            budgets or "-",
        )
    agents.print()
    instances = [row for row in answer.instances if row.usage.calls]
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
            table.add_row(
                row.agent,
                row.instance_key,
                row.usage.total_tokens,
                money(row.usage.cost),
                left(row.remaining),
            )
        table.print()
    if answer.traces:
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
        for trace in answer.traces:
            exceeded = trace.exceeded if not isinstance(trace.exceeded, UnsetType) else None
            budget = "EXCEEDED " + exceeded if exceeded else left(trace.remaining)
            table.add_row(
                trace.trace_id,
                trace.root,
                trace.usage.total_tokens,
                money(trace.usage.cost),
                budget,
            )
        table.print()
    print_pools(answer.pools)


def print_pools(pools: list[PoolRow]) -> None:
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
        limit = pool.max_concurrent
        requests, tokens = pool.requests_available, pool.tokens_available
        paused = pool.paused_for_seconds
        table.add_row(
            pool.pool,
            f"{pool.in_use}/{limit if limit is not None else '-'}",
            pool.waiting,
            "-" if isinstance(requests, UnsetType) else f"{requests:.0f}",
            "-" if isinstance(tokens, UnsetType) else tokens,
            f"{paused:.1f}s" if paused else "-",
            pool.waited,
            pool.timed_out,
        )
    table.print()
