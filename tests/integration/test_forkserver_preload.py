"""What the agents' fork server prepares once, every child it forks finds already done."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection

from orchestrator.transport import PRELOAD


def _report_rules(conn: Connection) -> None:
    from ipc import payload

    found = dict(payload._RULES)
    classes: list[type[payload.Payload]] = [payload.Payload]
    every = []
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        every.append(cls.__qualname__)
    conn.send((sorted(c.__qualname__ for c in found), sorted(every)))
    conn.close()


def test_a_child_finds_every_payload_rule_already_found() -> None:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    ours, theirs = context.Pipe()
    child = context.Process(target=_report_rules, args=(theirs,), daemon=True)
    child.start()
    try:
        assert ours.poll(60), "the child did not report"
        found, every = ours.recv()
    finally:
        child.join(10)
    assert len(every) > 30
    assert found == every
