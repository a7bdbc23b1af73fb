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


TAGS_PROBE = """
import gc

VALID_VERSION_TAG = 1 << 19  # Py_TPFLAGS_VALID_VERSION_TAG


def report(conn):
    made_here = {id(obj) for obj in gc.get_objects()}  # the frozen preload is not listed
    gc.unfreeze()
    classes = [
        obj
        for obj in gc.get_objects()
        if id(obj) not in made_here and issubclass(type(obj), type)
    ]
    untagged = [cls.__qualname__ for cls in classes if not cls.__flags__ & VALID_VERSION_TAG]
    conn.send((len(classes), untagged))
"""


def test_a_child_finds_every_preloaded_class_tagged_for_the_method_cache(
    tmp_path: Path,
) -> None:
    # A class's first attribute lookup writes its tag into it: done in a child, that write
    # copies the class's page into the child.
    classes, untagged = fork_one_child(tmp_path, TAGS_PROBE)
    assert classes > 1000
    assert untagged == []
