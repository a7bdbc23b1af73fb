"""A cluster node learns an agent's process scope from the ``ready`` frame the agent sends up
its pipe, read as the protocol's typed ``Ready`` body."""

from __future__ import annotations

from ipc import ORCHESTRATOR, EventMessage, build
from ipc.codec import FrameDecoder, encode
from ipc.events import Ready
from orchestrator.cluster.node import ready_scope


def through_the_pipe(message: EventMessage) -> EventMessage:
    [item] = FrameDecoder().feed(encode(message))
    assert isinstance(item, EventMessage)
    return item


def test_the_scope_of_a_ready_frame_is_read_typed() -> None:
    ready = build.event("worker", ORCHESTRATOR, Ready(pid=41, scope="scope-1"))
    assert ready_scope(through_the_pipe(ready)) == "scope-1"
    bare = build.event("worker", ORCHESTRATOR, Ready(pid=41))
    assert ready_scope(through_the_pipe(bare)) is None


def test_a_ready_frame_of_the_wrong_shape_names_no_scope() -> None:
    empty = EventMessage(sender="w", to=ORCHESTRATOR, payload={"kind": "ready", "scope": ""})
    assert ready_scope(through_the_pipe(empty)) is None
    wrong = EventMessage(sender="w", to=ORCHESTRATOR, payload={"kind": "ready", "scope": 7})
    assert ready_scope(through_the_pipe(wrong)) is None
