"""What the CLI shows while a request runs: the text as it is produced (``--stream``), and on
stderr the tool calls the request waits on for an operator's approval, with the commands that
decide them.

``send`` asks the daemon for its answer as server-sent events (``"approvals": true``, and with
``--stream`` also ``"stream"`` and ``"relay"``); ``run --input --stream`` takes the same from the
swarm it runs itself. Standard output holds only the answer's text (or, with ``--json``, one
JSON object per line), so scripts can keep reading it.

Streamed text is printed one Step after another, each starting on a line of its own, and
flushed piece by piece. When what streamed last is not the answer (the model did not stream,
or a slow reader lost pieces), the answer follows on its own line: the last line(s) of the
output are always the answer.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from goondan.errors import ExitCode

if TYPE_CHECKING:
    from ipc.delegation import DelegateAnswer
    from ipc.events import TextDelta
    from ipc.runtime_events import AnyEvent

EventSink = Callable[[str, dict[str, Any]], None]
"""Takes ``(kind, data)``: ``delta`` (a piece of text) or ``approval`` (a runtime event)."""
ARGUMENTS_SHOWN = 200
"""Characters of a parked call's arguments shown before they are cut (``approvals`` too)."""


def invoked_as() -> str:
    """The command as the user spelled it, for the commands hints suggest: ``goondan`` (the
    console script) or ``python -m orchestrator``."""
    return "goondan" if Path(sys.argv[0]).name == "goondan" else "python -m orchestrator"


def _locating(args: argparse.Namespace) -> str:
    """The options of ``args`` that say which daemon it asked, for a command to ask it too."""
    words: list[str] = []
    for option, name in (
        ("-c", "config"),
        ("--state-dir", "state_dir"),
        ("--state-root", "state_root"),
        ("--api-url", "api_url"),
        ("--api-token-env", "api_token_env"),
    ):
        value = getattr(args, name, None)
        if value:
            words += [option, shlex.quote(str(value))]
    return "".join(f" {word}" for word in words)


def _shown(text: str) -> str:
    """``text`` safe for a terminal: control characters as escapes."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


class ApprovalNotices:
    """Tells stderr of each approval a request waits on and how it was decided."""

    def __init__(self, args: argparse.Namespace, out: TextIO | None = None) -> None:
        self.command = invoked_as()
        self.where = _locating(args)
        self.out = out

    def __call__(self, event: AnyEvent) -> None:
        # Here, not at the top: a request that meets no approval never imports the events.
        from ipc.runtime_events import ApprovalEvent, EventType, given

        out = self.out or sys.stderr
        if not isinstance(event, ApprovalEvent):
            return
        kind = event.type
        approval = _shown(str(given(event.approval_id)))
        tool = _shown(str(given(event.tool_name)))
        if kind in (EventType.APPROVAL_REQUESTED, EventType.APPROVAL_RESUMED):
            where = _shown(f"{event.agent_name or None}@{given(event.instance_key)}")
            arguments = given(event.args)
            shown = (
                arguments
                if isinstance(arguments, str)
                else json.dumps(arguments, ensure_ascii=False)
            )
            whole = isinstance(arguments, dict) and len(shown) <= ARGUMENTS_SHOWN
            if len(shown) > ARGUMENTS_SHOWN:
                shown = shown[:ARGUMENTS_SHOWN] + "…"
            edit = f"--args {shlex.quote(shown)}" if whole else "--args JSON"
            lines = (
                f"waiting for approval {approval}: {where}  {tool}  {_shown(shown)}",
                f"  approve: {self.command} approve {approval}{self.where} [{edit}]",
                f"  reject:  {self.command} reject {approval}{self.where} --reason TEXT",
            )
            out.write("".join(f"{line}\n" for line in lines))  # one write: no log line between
        elif kind == EventType.APPROVAL_DECIDED:
            status = _shown(str(given(event.status)))
            decider = given(event.decided_by)
            line = f"{approval} ({tool}) {status}"
            if isinstance(decider, dict):
                from orchestrator.approvals import describe_decider

                line += f" by {_shown(describe_decider(decider))}"
            reason, edited = given(event.reason), given(event.edited_args)
            if reason:
                line += f": {_shown(str(reason))}"
            elif edited is not None:
                line += f" with arguments {_shown(json.dumps(edited))}"
            print(line, file=out)
        elif kind == EventType.APPROVAL_EXPIRED:
            print(f"{approval} ({tool}) expired: nobody decided in time", file=out)
        elif kind == EventType.APPROVAL_CANCELLED:
            print(f"{approval} ({tool}) cancelled with the request", file=out)
        out.flush()


class AnswerPrinter:
    """Prints a request's events as they arrive: approval notices on stderr, and with
    ``stream`` the text (or with ``json``, one object per line) on stdout, flushed each time."""

    def __init__(self, args: argparse.Namespace, *, stream: bool, out: TextIO | None = None):
        self.stream = stream
        self.json = bool(getattr(args, "json", False))
        self.notices = ApprovalNotices(args)
        self.out = out
        self.step: tuple[Any, Any] | None = None
        """``(agent, stepId)`` of the text printed last."""
        self.step_text = ""

    def _write(self, text: str) -> None:
        out = self.out or sys.stdout
        out.write(text)
        out.flush()

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "approval":
            from ipc.runtime_events import read_event

            self.notices(read_event(data))
        if not self.stream or kind not in ("delta", "approval"):
            return
        if self.json:
            self._write(json.dumps({"event": kind, **data}, ensure_ascii=False) + "\n")
            return
        if kind != "delta":
            return
        # The data of an `event: delta` (orchestrator.http.streams.delta_json): any value
        # goes, a piece without text is passed over.
        text = data.get("text")
        if not isinstance(text, str):
            return
        step = (data.get("agent"), data.get("stepId"))
        if self.step is not None and step != self.step:
            self._write("\n")
            self.step_text = ""
        self.step = step
        self.step_text += text
        self._write(text)

    def finish(self, agent: str, output: Any | None) -> None:
        """End the streamed text: ``output`` (the answer of ``agent``, ``None`` when it failed)
        follows unless it is what streamed last; then a newline. Nothing without text."""
        if not self.stream or self.json:
            return
        if output is not None:
            text = output if isinstance(output, str) else json.dumps(output)
            if self.step is None or self.step[0] != agent or self.step_text != text:
                self._write(("\n" if self.step is not None else "") + text)
                self.step = (agent, None)
        if self.step is not None:
            self._write("\n")


def send_and_wait(args: argparse.Namespace, state_dir: Callable[[], Path]) -> int:
    """``send`` that waits for the answer: approvals it meets are told on stderr as they
    come, and with ``--stream`` the text is printed as it is produced."""
    from orchestrator.cli.api_target import TargetError, ask_with_events
    from orchestrator.cli.common import fail
    from orchestrator.http.client import error_text, path_segment

    stream = bool(getattr(args, "stream", False))
    if args.no_wait:
        return fail(args, ExitCode.USAGE, "--stream waits for the answer: not with --no-wait")
    body: dict[str, Any] = {"input": args.text, "instanceKey": args.instance, "approvals": True}
    if stream:
        body.update(stream=True, relay=True)
    if args.timeout is not None:
        body["timeoutMs"] = int(args.timeout * 1000)
    printer = AnswerPrinter(args, stream=stream)
    try:
        status, answer = ask_with_events(
            args,
            state_dir,
            f"/v1/agents/{path_segment(args.agent)}/requests",
            body,
            printer,
            # The daemon answers by the request's timeout; past it (and a margin), it is gone.
            wait_seconds=None if args.timeout is None else args.timeout + 30,
        )
    except TargetError as exc:
        printer.finish(args.agent, None)
        return fail(args, exc.exit_code, str(exc))
    read = read_answer(answer)
    output = "" if read is None or read.output is None else read.output
    printer.finish(args.agent, output if status < 400 and isinstance(answer, dict) else None)
    if args.json:
        print(json.dumps(answer))
    elif status == 502:  # the request ran and failed: the answer says why
        message, code = (read.error_message, read.error_code) if read else (None, None)
        print(f"error: {message} ({code})", file=sys.stderr)
    elif status >= 400:
        print(f"error: {error_text(answer)}", file=sys.stderr)
        return 1
    elif not stream:
        print(output)
    return 0 if status < 400 else 1


class RequestAnswer:
    """A request's answer as ``send`` reads it: the wire form of
    :class:`ipc.delegation.DelegateAnswer`, read as that reads it (:func:`read_answer`), without
    importing the IPC stack it belongs to (a good part of ``send``'s start)."""

    __slots__ = ("error_code", "error_message", "output", "status")

    def __init__(
        self, status: str, output: object, error_code: str | None, error_message: str | None
    ) -> None:
        self.status = status
        """``ok`` or ``error``."""
        self.output = output
        """The answer text (for a failed Turn, the last text it produced, if any)."""
        self.error_code = error_code
        """Why there is no answer (``None`` with one)."""
        self.error_message = error_message
        """The same, in words."""


def read_answer(body: object) -> RequestAnswer | None:
    """The Turn's answer in a request's body (its wire form); ``None`` when it is not one. As
    ``DelegateAnswer.from_wire`` reads it: ``status`` ``ok`` or ``error``, ``turn`` an object
    or null, ``error`` null or ``{code, message}`` (a code missing is ``IPC_ERROR``, a message
    missing the code, anything else a malformed error); other fields passed over."""
    if not isinstance(body, dict):
        return None
    status, turn = body.get("status"), body.get("turn")
    if status not in ("ok", "error") or not (turn is None or isinstance(turn, dict)):
        return None
    error = body.get("error")
    if error is None:
        return RequestAnswer(status, body.get("output"), None, None)
    from goondan.errors import DeliveryCode

    if not isinstance(error, dict):
        code, message = str(DeliveryCode.IPC_ERROR), f"malformed error: {error!r}"
    else:
        code = str(error.get("code") or DeliveryCode.IPC_ERROR)
        message = str(error.get("message") or code)
    return RequestAnswer(status, body.get("output"), code, message)


async def stream_answer(
    swarm: Any, text: str, agent: str, instance_key: str, sink: EventSink
) -> DelegateAnswer:
    """The answer ``run --input --stream`` prints: from the swarm this process runs, or from
    the detached daemon ``run --input`` hands the request to (its ``stream`` method)."""
    elsewhere = getattr(swarm, "stream", None)
    if elsewhere is not None:
        answer: DelegateAnswer = await elsewhere(text, agent, instance_key, sink)
        return answer
    return await stream_in_process(swarm, text, agent, instance_key, sink)


async def stream_in_process(
    orchestrator: Any, text: str, agent: str, instance_key: str, sink: EventSink
) -> DelegateAnswer:
    """The answer of the swarm this process runs, its events going to ``sink`` as they happen:
    the text of every agent the request reaches, and the approvals it waits on."""
    from ipc.protocol import new_trace_id
    from orchestrator.approvals import APPROVAL_EVENTS

    trace_id = new_trace_id()

    def delta(sender: str, piece: TextDelta) -> None:
        sink(
            "delta",
            {
                "agent": sender,
                "instanceKey": piece.instance_key,
                "traceId": piece.trace_id,
                "turnId": piece.turn_id,
                "stepId": piece.step_id,
                "text": piece.text,
            },
        )

    def approval(event: AnyEvent) -> None:
        if event.trace == trace_id and event.type in APPROVAL_EVENTS:
            sink("approval", event.to_builtins())

    with orchestrator.live.watching(approval):
        answer: DelegateAnswer = await orchestrator.router.request(
            agent, text, instance_key=instance_key, trace_id=trace_id, on_delta=delta, relay=True
        )
    return answer
