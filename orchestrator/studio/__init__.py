"""The studio: a local web app over a swarm, live or after the fact.

This module is light (the CLI reads its defaults); the server is :mod:`orchestrator.studio.server`.

``python -m orchestrator studio`` serves a single-page app (``static/``: plain ES modules, no
build step) and a small JSON API for it. The API has the same shape in both modes:

- **live**, while a daemon serves the state directory: agents' status rows come from the
  daemon (``GET /v1/agents`` on ``<state>/api.sock``, always authoritative), events are pushed
  from its event stream (``GET /v1/events``);
- **after the fact**, when none does: agents' last recorded state, and the swarm's name, are
  read from the runtime event log (:mod:`orchestrator.studio.agents`), and nothing is pushed.

Traces, logs and conversations are read from the state directory's files in both modes (the
daemon writes each event line as it happens, and its API does not serve past events or
conversations).

Routes (JSON unless said otherwise):

``GET /``                                      the app (``/static/*``: its files)
``GET /?key=KEY``                              the app opened from the link the studio printed:
                                               a session cookie for this browser and its token
                                               in the page (403 for another key; see
                                               :mod:`orchestrator.studio.session`)
``GET /api/agents``                            ``{mode, swarm, pid, agents, edges, connections,
                                               pools, pendingApprovals}``: each agent's row
                                               with its ``pendingApprovals`` (its tool calls
                                               parked for an operator: then its status is
                                               ``awaitingApproval``, not ``processing``), its
                                               ``usage``
                                               (``{inputTokens, outputTokens, totalTokens, cost,
                                               calls}``: the daemon's since it started; after
                                               the fact, summed from the Steps in the log) and
                                               ``permitsWaiting``; ``pools`` the rate-limit
                                               pools (live only: ``null`` after the fact)
``GET /api/traces?agent=&limit=``              the newest traces (each with the ``usage`` of its
                                               Steps, the budgets it ``exceeded`` and its
                                               ``permitWaitMs``)
``GET /api/traces/{traceId}``                  ``{trace, spans, marks}``: one trace, spans in
                                               order, and its budget and permit events as
                                               marks, each on the span it happened in
``GET /api/usage?trace=`` / ``?traces=N``      the daemon's ``/v1/usage`` (budgets left):
                                               ``{mode, trace}`` / ``{mode, usage}``, ``null``
                                               after the fact or when it has none
``GET /api/instances?agent=``                  conversation instances on disk (with ``usage``)
``GET /api/conversations/{agent}/{key}``       ``{agent, instanceKey, status, usage, messages}``
``GET /api/events?agent=&trace=&type=&level=&since=&limit=``
                                               runtime events ``{key, level, event}``, oldest
                                               first (``type`` a prefix, repeatable; ``level``
                                               the least severe level shown)
``GET /api/stream``                            server-sent events: ``event: mode`` (``{live}``),
                                               then each runtime event as it happens (live)
``GET /api/approvals``                         ``{approvals}``: every tool call parked for an
                                               operator, pending or decided (from the files)
``GET /api/session``                           ``{canDecide, why}``: whether this browser's
                                               session may decide (never a token)
``POST /api/approvals/{id}/approve``           ``{arguments?}`` / ``{reason}``: the decision,
``POST /api/approvals/{id}/reject``            through the daemon (its answer and status:
                                               ``{approval, turn}``); only from the studio's own
                                               page with its session (see
                                               :mod:`orchestrator.studio.decisions`)
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEFAULT_PORT", "STATIC_DIR"]

DEFAULT_PORT = 7711
"""The studio's port when none is given: clear of the daemon's usual 8080 and of OTLP's
4317/4318."""
STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The app's files; nothing outside this directory is ever served."""
