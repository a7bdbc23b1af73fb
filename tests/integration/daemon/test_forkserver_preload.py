"""What the agents' fork server prepares once, every child it forks finds already done."""

from __future__ import annotations

from pathlib import Path

from tests.support.fork_server import fork_one_child

RULES_PROBE = """
from ipc import payload


def report(conn):
    found = sorted(cls.__qualname__ for cls in payload._RULES)
    classes, every = [payload.Payload], []
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        every.append(cls.__qualname__)
    conn.send((found, sorted(every)))
"""


def test_a_child_finds_every_payload_rule_already_found(tmp_path: Path) -> None:
    found, every = fork_one_child(tmp_path, RULES_PROBE)
    assert len(every) > 30
    assert found == every
