"""``reference/metrics.md``: every Prometheus metric ``/metrics`` serves, read from where each
is declared (:mod:`orchestrator.http.metrics`): its name, type, labels and help text."""

from __future__ import annotations

import ast
import inspect

from orchestrator.http import metrics
from orchestrator.reference.markdown import table

KINDS = {
    "counter": "counter",
    "histogram": "histogram",
    "GaugeMetricFamily": "gauge",
    "CounterMetricFamily": "counter",
}
"""How each declaring call or class is named in the exposition's ``TYPE``."""


def metrics_page() -> str:
    """The page: one table of every metric."""
    rows = [
        (f"`{name}`", kind, ", ".join(f"`{label}`" for label in labels), text)
        for name, kind, labels, text in declared_metrics()
    ]
    return (
        "# Metrics\n\n"
        "What `GET /metrics` serves (the Prometheus text format), read from where each metric "
        "is declared. No label takes a value a client or a model chooses: routes are "
        "templates, methods outside HTTP's are `other`, tools an agent cannot call are "
        "`other`.\n\n" + table(("metric", "type", "labels", "what it counts"), rows)
    )


def declared_metrics() -> list[tuple[str, str, tuple[str, ...], str]]:
    """``(name, type, labels, help)`` of each metric, in the order they are declared."""
    found: list[tuple[str, str, tuple[str, ...], str]] = []
    for node in ast.walk(ast.parse(inspect.getsource(metrics))):
        parts: list[ast.expr] = []
        kind = ""
        if isinstance(node, ast.Call):
            parts = [*node.args, *(k.value for k in node.keywords if k.arg == "labels")]
            callee = node.func
            kind = callee.id if isinstance(callee, ast.Name) else ""
        elif isinstance(node, ast.Tuple) and len(node.elts) >= 3:
            parts = list(node.elts)
            third = node.elts[2]
            kind = third.id if isinstance(third, ast.Name) else ""
        strings = [p.value for p in parts[:2] if isinstance(p, ast.Constant)]
        if len(strings) < 2 or not str(strings[0]).startswith("goondan_") or kind not in KINDS:
            continue
        # The per-pool table's families get their one label where the collector makes them.
        labels: tuple[str, ...] = ("pool",) if isinstance(node, ast.Tuple) else ()
        for part in parts[2:]:
            if isinstance(part, ast.Tuple | ast.List):
                labels = tuple(str(e.value) for e in part.elts if isinstance(e, ast.Constant))
        found.append((str(strings[0]), KINDS[kind], labels, " ".join(str(strings[1]).split())))
    return sorted(found, key=lambda row: row[0])
