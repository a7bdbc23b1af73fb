"""A Turn whose agent died under it, as a collector sees it: each attempt is its own Turn span,
and the resumed attempt's span links to the interrupted one.

The daemon runs the ledger swarm (``tests/support/ledger.py``): ``append KEY`` calls a
non-idempotent tool that SIGKILLs its agent right after its effect, the first time for a key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, run_cli
from tests.support.ledger import effects, write_ledger_swarm
from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver

pytestmark = pytest.mark.timeout(120)

ERROR = 2
FAST = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
"""Batches leave within 50 ms instead of the SDK's 5 s."""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as server:
        yield server


def turn_spans(trace: str) -> Callable[[list[ReceivedSpan]], bool]:
    """Both attempts' Turn spans of ``trace`` have arrived."""
    return lambda spans: sum(1 for s in spans if s.trace_id == trace and is_turn(s)) >= 2


def is_turn(span: ReceivedSpan) -> bool:
    return span.attributes.get("gen_ai.operation.name") == "invoke_agent"


def test_a_resumed_attempt_links_to_the_attempt_its_agent_died_under(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    write_ledger_swarm(tmp_path, attempts=2)
    args = ["--otlp-endpoint", receiver.url]
    daemon = Daemon(tmp_path, bundle="goondan.yaml", args=args, env=FAST)
    try:
        daemon.wait_for("orchestrator started")
        sent = run_cli("send", "front", "append k1", "--json", cwd=tmp_path)
        assert sent.returncode == 0, sent.stderr
        answer = json.loads(sent.stdout)
        trace = answer["turn"]["traceId"]
        received = receiver.wait_for(turn_spans(trace))
    finally:
        daemon.stop()
    assert answer["output"] == "unsure E_TOOL_INTERRUPTED"  # it may or may not have run
    assert effects(tmp_path) == ["append_die k1"]  # and it ran once
    log = (tmp_path / ".goondan" / "runtime-events.jsonl").read_text().splitlines()
    resumed = [e for e in map(json.loads, log) if e.get("type") == "turn.resumed"]
    assert len(resumed) == 1
    event = resumed[0]
    turns = {s.span_id: s for s in received if s.trace_id == trace and is_turn(s)}
    assert set(turns) == {event["spanId"], event["resumedSpanId"]}

    interrupted, second = turns[event["resumedSpanId"]], turns[event["spanId"]]
    assert interrupted.links == ()
    assert interrupted.status_code == ERROR  # ended for it when its agent exited
    assert "exited" in interrupted.attributes["goondan.span.incomplete"]
    (link,) = second.links
    assert (link.trace_id, link.span_id) == (trace, interrupted.span_id)
    assert link.attributes == {
        "goondan.link.type": "resumes",
        "goondan.turn.attempt": 2,
        "goondan.turn_id": event["resumedTurnId"],
        "goondan.turn.replayed": False,
    }
    assert second.attributes["goondan.turn.attempt"] == 2
    assert second.attributes["goondan.request_id"] == event["requestId"]
    assert second.attributes["goondan.turn_id"] == event["turnId"]
    assert second.status_code != ERROR
