"""``usage`` with no daemon to ask: the same report, read back from the state directory.

The daemon adds up each model call as it is reported; every such call is also in the runtime
event log (its ``step.completed`` carries the Step's ``tokenUsage``), and each Turn's start
says which agent began its trace. Replaying the log through a :class:`~orchestrator.limits.usage.UsageBook`
gives the figures the daemon gave, over the whole log kept on disk rather than since one
daemon's start; the instances' lasting totals come from their ``metadata.json`` as the daemon
reads them, and the budgets from the configuration when it loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog

from orchestrator.eventlog import log_files, read_typed
from orchestrator.limits.usage import TRACES_KEPT, UsageBook, usage_report
from orchestrator.metadata_rows import metadata_row
from orchestrator.state_dir import list_instances

log = structlog.get_logger("goondan.usage")


Budgets = dict[str, dict[str, dict[str, float]]]
"""``agent → scope → ceilings``."""


def planned(bundle_path: Path, state_dir: Path) -> tuple[Budgets, dict[str, str | None]]:
    """The budgets (``agent → scope → ceilings``) and price sources (``agent → "model" |
    "genai-prices" | None``) of every agent of the configuration's Swarm, as the daemon plans
    them; both empty when the configuration does not load (the usage is still shown)."""
    from bundle import BundleError, load_bundle
    from bundle.prices import model_price

    try:
        bundle = load_bundle(bundle_path, check_handlers=False)
        swarm = bundle.swarm(None)
        names = sorted(agent.name for agent in bundle.swarm_agents(swarm))
        plans = [bundle.agent_plan(name, state_dir) for name in names]
    except (BundleError, OSError, LookupError, ValueError) as exc:
        log.info("budgets not shown: the configuration does not load", reason=str(exc))
        return {}, {}
    budgets = {
        plan.agent_name: {scope: c.limits() for scope, c in plan.budgets.scopes().items()}
        for plan in plans
    }
    prices = {plan.agent_name: model_price(plan.model, plan.model.base_url) for plan in plans}
    return budgets, {name: p.source if p is not None else None for name, p in prices.items()}


def replay(state_dir: Path, budgets: Mapping[str, Mapping[str, Mapping[str, float]]]) -> UsageBook:
    """A usage book filled from the event log's files, oldest first."""

    def trace_budget(agent: str) -> Mapping[str, float]:
        return budgets.get(agent, {}).get("trace", {})  # the plans' mapping, not JSON

    book = UsageBook(trace_budget)
    for path in log_files(state_dir):
        for _, event in read_typed(path):
            book.observe(event, count=lambda agent: True)
    return book


def offline_usage(
    state_dir: Path, bundle_path: Path, *, traces: int = 50, trace: str | None = None
) -> dict[str, Any] | None:
    """What ``/v1/usage`` would answer, from the state directory: the report (``traces``
    latest), or the row of ``trace`` alone (``None`` when the log has no usage of it)."""
    budgets, price_sources = planned(bundle_path, state_dir)
    book = replay(state_dir, budgets)
    if trace is not None:
        entry = book.traces.get(trace)
        return entry.to_json() if entry is not None else None
    if not budgets:  # no configuration: the agents the log and the instances name
        rows = [metadata_row(row) for row in list_instances(state_dir)]
        named = set(book.agents) | {str(row.agent_name) for row in rows}
        budgets = {name: {} for name in sorted(named)}
    report = usage_report(
        book,
        budgets,
        list_instances(state_dir),
        traces=min(traces, TRACES_KEPT),
        price_sources=price_sources or None,
    )
    report["source"] = "eventLog"
    return report
