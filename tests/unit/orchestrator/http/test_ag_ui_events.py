"""The AG-UI door writes each event as the package's encoder does, byte for byte, whether it
writes the event itself (text, whole numbers, no value) or hands it to the package; and the
events ready at once go out together, as one chunk of the response."""

from __future__ import annotations

import asyncio

import pytest
from ag_ui.core import (
    BaseEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from orchestrator.http.ag_ui import read_input
from orchestrator.http.ag_ui_events import RunEvents, event_bytes
from orchestrator.http.streams import TurnStream
from orchestrator.requests import Intake, RequestDesk, RequestStore
from tests.support.held_turn import HeldDaemon, HeldRouter

EVERY_ESCAPE = "".join(map(chr, range(0x80))) + "é中😀\u2028\u2029\ufeff</script>"
"""Every ASCII character (the control characters each escaped its own way), and beyond."""

EVENTS: list[BaseEvent] = [
    RunStartedEvent(thread_id="t", run_id="r", protocol_version="1.0"),
    StepStartedEvent(step_name="step-1"),
    StepFinishedEvent(step_name="step-1", timestamp=1700000000000),
    TextMessageStartEvent(message_id="msg_1", role="assistant"),
    TextMessageContentEvent(message_id="msg_1", delta=EVERY_ESCAPE),
    TextMessageEndEvent(message_id="msg_1"),
    ToolCallStartEvent(tool_call_id="c1", tool_call_name="write", parent_message_id="msg_1"),
    ToolCallArgsEvent(tool_call_id="c1", delta='{"path": "notes.txt"}'),
    ToolCallEndEvent(tool_call_id="c1"),
    ToolCallResultEvent(message_id="m2", tool_call_id="c1", content="ok", role="tool"),
    RunFinishedEvent(thread_id="t", run_id="r", result={"output": "Done.", "n": 1.5}),
    RunFinishedEvent(thread_id="t", run_id="r", result="Done."),
    RunErrorEvent(message="the Turn failed", code="AGENT_TURN_FAILED"),
    TextMessageEndEvent(message_id="msg_1", metadata={"why": None}),
    TextMessageEndEvent.model_validate({"messageId": "msg_1", "extraKey": [1, True]}),
    StepStartedEvent(step_name="flag", raw_event=True),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda event: type(event).__name__)
def test_an_event_is_written_as_the_package_writes_it(event: BaseEvent) -> None:
    assert event_bytes(event, EventEncoder()) == EventEncoder().encode(event).encode()


def test_text_the_package_cannot_write_is_refused_as_the_package_refuses_it() -> None:
    lone = TextMessageContentEvent(message_id="m", delta="\ud800")
    with pytest.raises(ValueError, match="surrogates not allowed") as ours:
        event_bytes(lone, EventEncoder())
    with pytest.raises(ValueError, match="surrogates not allowed") as theirs:
        EventEncoder().encode(lone)
    assert type(ours.value) is type(theirs.value)


async def test_the_events_ready_at_once_are_one_chunk() -> None:
    router = HeldRouter()
    desk = RequestDesk(HeldDaemon(router), RequestStore(None))  # type: ignore[arg-type]
    intake = Intake(kind="agui", agent="alpha", text="hi", instance_key="t", deltas=True)
    admission = await desk.admit(intake)
    turn = TurnStream(desk, admission.request_id)
    body = {"threadId": "t", "runId": "r", "messages": [], "tools": [], "context": []}
    run_input = read_input(RunAgentInput, {**body, "state": {}, "forwardedProps": {}})
    batches = RunEvents(turn, run_input, lambda approval, paused: None).events()
    async with asyncio.timeout(5):
        await router.asked.wait()
        assert router.sink is not None
        for text in ("one ", "two ", "three"):  # three pieces before the run is read
            router.sink("alpha", TextDelta("c", text, "tr", "t", "turn-1", "s0"))
        first = await anext(batches)
        router.answer.set_result(DelegateAnswer("ok", "one two three"))
        last = await anext(batches)
        with pytest.raises(StopAsyncIteration):
            await anext(batches)
    kinds = [event.type.value for event in first if event is not None]
    assert kinds[0] == "RUN_STARTED"
    assert kinds.count("TEXT_MESSAGE_CONTENT") == 3  # all three, with the run's start
    ending = [event.type.value for event in last if event is not None]
    assert ending[0] == "TEXT_MESSAGE_END"
    assert ending[-1] == "RUN_FINISHED"
