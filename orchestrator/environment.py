"""What the processes the daemon starts get of its environment: their own variables, no more.

The daemon's environment holds every secret of the swarm and its own API token. Its agents and
connectors are forked from the ``multiprocessing`` fork server, and ``/proc/<pid>/environ``
shows, for a process's whole life, the environment it was *exec'd* with: the fork server's,
for every process forked from it, whatever it later does to ``os.environ``. So:

- the fork server (and the resource tracker ``multiprocessing`` starts beside it) is exec'd with
  :func:`launch_environment`: ``BASE_ENVIRONMENT`` only, never a secret
  (:func:`use_clean_launches`);
- each child sets its ``os.environ`` first thing to :func:`child_environment` of its plan:
  ``BASE_ENVIRONMENT`` and the names its plan lists (``bundle.environment``), with the values
  the daemon holds when it starts the process;
- a variable holding a value :func:`withhold` was given (the API token) is left out of both,
  whatever names it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from multiprocessing import util
from typing import Any

import structlog

from bundle.environment import BASE_ENVIRONMENT, select
from bundle.plan import AgentPlan, Plan

_withheld: set[str] = set()
_log = structlog.get_logger("goondan.orchestrator")


def withhold(value: str | None) -> None:
    """Never hand a variable whose value is ``value`` to a process this daemon starts: the
    daemon's own credentials (its API token), which no plan may name, even by a ``PREFIX*``
    pattern or under another name."""
    if value:
        _withheld.add(value)


def _kept(environment: dict[str, str], process: str) -> dict[str, str]:
    for name in [n for n, v in environment.items() if v in _withheld]:
        _log.warning(
            "environment variable withheld: it holds a daemon credential",
            variable=name,
            process=process,
        )
        del environment[name]
    return environment


def launch_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the fork server is exec'd with: ``BASE_ENVIRONMENT`` of ``environ``
    (default the daemon's)."""
    return _kept(select(os.environ if environ is None else environ, BASE_ENVIRONMENT), "launch")


def child_environment(plan: Plan, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of the process ``plan`` runs: ``BASE_ENVIRONMENT`` and
    ``plan.environment`` of ``environ`` (default the daemon's)."""
    name = plan.agent_name if isinstance(plan, AgentPlan) else plan.connection_name
    source = os.environ if environ is None else environ
    return _kept(select(source, (*BASE_ENVIRONMENT, *plan.environment)), name)


class _ReapedByMultiprocessing(subprocess.Popen[bytes]):
    """A process whose exit ``multiprocessing`` waits for itself, by pid.

    A ``Popen`` dropped while its process runs would be polled (and reaped) by the next
    ``Popen``'s clean-up; ``multiprocessing``'s own ``waitpid`` of the fork server would then
    fail, and no agent could start again after the fork server died.
    """

    def __del__(self) -> None:
        pass


def _spawnv_passfds(path: str | bytes, args: Sequence[Any], passfds: Sequence[int]) -> int:
    """``multiprocessing.util.spawnv_passfds`` with :func:`launch_environment` as the new
    program's environment, where it gives the daemon's whole one."""
    process = _ReapedByMultiprocessing(
        list(args),
        executable=path,
        pass_fds=tuple(passfds),
        env=launch_environment(),
        close_fds=True,
        restore_signals=False,  # as multiprocessing's: the program gets the signals as they are
    )
    return process.pid


def use_clean_launches() -> None:
    """Exec every program ``multiprocessing`` starts in this process (the fork server, the
    resource tracker, ``spawn`` children) with :func:`launch_environment`.

    ``multiprocessing`` execs them through ``util.spawnv_passfds``, which hands over the
    caller's environment, so this replaces that one function. Setting ``os.environ`` around a
    start instead would race every other thread of the daemon reading or starting programs
    meanwhile; this changes nothing any other code sees. Call it before the first start: a
    fork server already running keeps the environment it had.
    """
    util.spawnv_passfds = _spawnv_passfds
