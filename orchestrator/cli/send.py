"""``send``: deliver text to an agent of the running daemon, and print its answer.

A module of its own, as ``send`` is the command scripts run most: it reads the answer
without the typed answers (and msgspec) the other commands of :mod:`.operate` import.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from orchestrator.cli.common import ask_daemon, refused, state_dir_of

SEND_RETRIES = 3
"""Times ``send --no-wait`` sends its request again when the daemon took it but its answer was
lost (the idempotency key makes that safe)."""


def cmd_send(args: argparse.Namespace) -> int:
    """Deliver text to an agent of the running daemon and print its answer (``--no-wait``:
    return once it is accepted)."""
    from orchestrator.cli.answer_stream import send_and_wait
    from orchestrator.http.client import path_segment
    from orchestrator.http.retry import new_key

    if args.idempotency_key is None:  # one per invocation: its own retries reuse it
        args.idempotency_key = new_key()
    if not args.no_wait or args.stream:
        return send_and_wait(args, lambda: state_dir_of(args))
    body: dict[str, Any] = {"input": args.text, "instanceKey": args.instance}
    path = f"/v1/agents/{path_segment(args.agent)}/sends"
    status, answer = ask_daemon(args, "POST", path, body, retries=SEND_RETRIES)
    if args.json:
        print(json.dumps(answer))
    elif refused(status, answer):
        return 1
    return 0 if status < 400 else 1
