"""What a send's first delivery left in the conversation, found by its event id."""

from __future__ import annotations

from agent_process.redelivery import SCAN_LIMIT, earlier_delivery, send_metadata
from tools_base import Message, ToolCall


def user(text: str, event_id: str | None = None) -> Message:
    metadata = send_metadata(event_id) if event_id else {}
    return Message(id=f"u-{text}", role="user", content=text, metadata=metadata)


def answer(text: str) -> Message:
    return Message(id=f"a-{text}", role="assistant", content=text)


def calling() -> Message:
    call = ToolCall(id="call-1", name="t__x", args={})
    return Message(id="c", role="assistant", content="thinking", tool_calls=(call,))


def test_a_send_never_taken_is_not_found() -> None:
    assert earlier_delivery([user("hi", "e1"), answer("yo")], "e2") is None


def test_the_answer_of_its_turn_is_found() -> None:
    found = earlier_delivery([user("hi", "e1"), calling(), answer("done"), user("x")], "e1")
    assert found is not None
    assert found.answer == "done"


def test_a_turn_cut_short_has_no_answer() -> None:
    found = earlier_delivery([user("hi", "e1"), calling(), user("next"), answer("n")], "e1")
    assert found is not None
    assert found.answer is None


def test_only_the_newest_messages_are_looked_through() -> None:
    messages = [user("old", "e1"), *(answer(str(n)) for n in range(SCAN_LIMIT))]
    assert earlier_delivery(messages, "e1") is None
    assert earlier_delivery([*messages[1:], user("new", "e1")], "e1") is not None
