"""A streamed Turn passes its stream on to the agents it asks only when its caller asked for
the relay, and never on a fire-and-forget send."""

from __future__ import annotations

import pytest

from agent_process.link import Correlations, OrchestratorLink
from agent_process.runtime import IpcAgentRuntime
from agent_process.turn import TurnInput
from ipc import DelegateMessage, EventMessage, IpcMessage
from ipc.delegation import Handoff


def runtime(turn_input: TurnInput) -> tuple[IpcAgentRuntime, list[IpcMessage]]:
    sent: list[IpcMessage] = []
    link = OrchestratorLink(
        agent_name="alpha",
        swarm_name="swarm",
        entry_agent="alpha",
        agents=["alpha", "beta"],
        default_timeout_ms=1000,
        send=sent.append,
        correlations=Correlations(),
    )
    return IpcAgentRuntime(link, "default", turn_input), sent


@pytest.mark.parametrize(
    ("stream_id", "relay", "passed_on"),
    [("corr_1", True, "corr_1"), ("corr_1", False, ""), ("", False, "")],
)
async def test_a_request_carries_the_stream_only_when_relayed(
    stream_id: str, relay: bool, passed_on: str
) -> None:
    turn = TurnInput(text="hi", stream_id=stream_id, relay=relay)
    agents, sent = runtime(turn)
    await agents.request("beta", {"input": "hello"}, async_=True)
    [message] = sent
    assert isinstance(message, DelegateMessage)
    handoff = Handoff.from_wire(message.payload)
    assert (handoff.stream_id, handoff.relay) == (passed_on, bool(passed_on))


async def test_a_send_never_streams() -> None:
    agents, sent = runtime(TurnInput(text="hi", stream_id="corr_1", relay=True))
    await agents.send("beta", {"input": "fyi"})
    [message] = sent
    assert isinstance(message, EventMessage)
    assert "streamId" not in message.payload
