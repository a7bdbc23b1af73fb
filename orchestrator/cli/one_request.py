"""``run --input``'s answer: one request sent to a swarm, its answer printed, its exit status.

Shared by ``run`` (its own swarm) and ``run --detach``'s client (the live daemon), apart from
both so that neither imports the other.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import msgspec

from goondan.errors import DeliveryCode, ExitCode

if TYPE_CHECKING:
    from ipc.delegation import DelegateAnswer


ANSWER_EXITS: dict[str, ExitCode] = {
    DeliveryCode.E_MODEL_AUTH: ExitCode.AUTH,
    DeliveryCode.E_MODEL_CONNECTION: ExitCode.NETWORK,
    DeliveryCode.E_MODEL_PROVIDER_UNAVAILABLE: ExitCode.CONFIG,
}
"""A failed answer's exit status, by its error code (1 otherwise)."""


class _TurnIds(msgspec.Struct, rename="camel"):
    """The ids of the Turn summary an answer carries (``TurnResult.to_json``), as read here."""

    trace_id: object = None
    """The trace the Turn ran in."""


async def answer_one_request(orchestrator: Any, args: argparse.Namespace) -> int:
    """Send ``args.input`` to ``args.agent`` (else the entry agent) of ``orchestrator``, print
    the answer (streamed with ``--stream``, as JSON with ``--json``) and return the exit
    status: 0, or the failed answer's from :data:`ANSWER_EXITS`."""
    agent = args.agent or orchestrator.entry_agent
    if getattr(args, "stream", False):
        from orchestrator.cli.answer_stream import AnswerPrinter, stream_answer

        printer = AnswerPrinter(args, stream=True)
        answer: DelegateAnswer = await stream_answer(
            orchestrator, args.input, agent, args.instance, printer
        )
        printer.finish(agent, answer.output if answer.ok else None)
    else:
        answer = await orchestrator.request(args.input, agent=agent, instance_key=args.instance)
    error = answer.error
    code = int(ExitCode.OK)
    if not answer.ok:
        code = int(ANSWER_EXITS.get(error.code if error else "", ExitCode.INTERNAL))
    if args.json:
        out: dict[str, Any] = {
            "output": answer.output,
            "status": answer.status,
            "traceId": msgspec.convert(answer.turn or {}, _TurnIds).trace_id,
            "agent": agent,
            "instanceKey": args.instance,
            "exitCode": code,
        }
        if error is not None:
            out["error"] = error.to_dict()
        print(json.dumps(out, ensure_ascii=False))
    elif answer.ok:
        if not getattr(args, "stream", False):  # else printed already
            print(answer.output if answer.output is not None else "")
    elif error is not None:
        print(f"error: {error.message} ({error.code})", file=sys.stderr)
    else:
        print("error: the request failed (ERROR)", file=sys.stderr)
    return code
