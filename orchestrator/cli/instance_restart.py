"""``instances restart [AGENT] KEY`` (also ``instance restart``, the original runtime's name):
one conversation reloaded from disk by the agent that serves it, through the daemon's
``POST /v1/agents/{agent}/instances/{key}/restart``.

The agent keeps running and serving its other instances; a Turn of the instance that runs is
answered ``CANCELLED`` at once, and its queued Turns run on the conversation as stored. Without
AGENT, every running agent restarts its instance KEY (the original runtime's instance key names
the whole swarm's instance); an agent that holds nothing of KEY has nothing to restart.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from orchestrator.cli.api_target import TargetError, ask
from orchestrator.cli.common import fail
from orchestrator.http.client import error_text, path_segment
from orchestrator.operations.answers import InstanceRestarted, SwarmStatus
from orchestrator.operations.encoding import convert

USAGE = "usage: instances restart [AGENT] KEY"


def restart_instances(
    args: argparse.Namespace, words: list[str], state_dir: Callable[[], Path]
) -> int:
    """Run ``instances restart`` with ``words`` (what follows ``restart``); the exit status."""
    if len(words) not in (1, 2):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if len(words) == 2:
            agents = [words[0]]
        else:
            status, body = ask(args, state_dir, "GET", "/v1/agents")
            if status >= 400:
                print(f"error: {error_text(body)}", file=sys.stderr)
                return 1
            swarm = convert(body, SwarmStatus)
            agents = [row.agent for row in swarm.agents if row.pid]
        key = words[-1]
        done: list[dict[str, Any]] = []
        for agent in agents:
            path = f"/v1/agents/{path_segment(agent)}/instances/{path_segment(key)}/restart"
            status, body = ask(args, state_dir, "POST", path, {})
            if status >= 400:
                if args.json:
                    print(json.dumps({"restarted": done, "error": body}))
                else:
                    print(f"error: {agent}: {error_text(body)}", file=sys.stderr)
                return 1
            done.append(body)
        restarted = convert(done, list[InstanceRestarted])
    except msgspec.ValidationError as exc:
        print(f"error: the daemon's answer is not understood: {exc}", file=sys.stderr)
        return 1
    except TargetError as exc:
        return fail(args, exc.exit_code, str(exc))
    if args.json:
        print(json.dumps({"restarted": done}))
        return 0
    loaded = [row for row in restarted if row.loaded]
    for row in loaded:
        count = row.stopped_turns
        stopped = f"; {count} running Turn stopped" if count else ""
        print(f"{row.agent}@{row.instance_key}: restarted{stopped}")
    if not loaded:
        print(f"{key}: no running agent holds it (nothing to restart)")
    return 0
