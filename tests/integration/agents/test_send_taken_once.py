"""A send delivered again to an agent whose conversation already holds its message is not
taken twice: the Orchestrator redelivers a send to a restarted agent when it never heard that
the send's Turn started, and that report can die with the process that wrote it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_process.conversation import ConversationStore
from ipc import IpcError
from ipc.delegation import Handoff
from ipc.protocol import CONNECTION_SENDER_PREFIX, new_trace_id
from orchestrator.daemon import Orchestrator
from tests.support.concurrency_swarm import write_concurrency_swarm

pytestmark = pytest.mark.timeout(120)

SENDER = CONNECTION_SENDER_PREFIX + "redelivery"


async def deliver(
    orchestrator: Orchestrator, handoff: Handoff
) -> tuple[IpcError | None, str | None, str | None]:
    """Send ``handoff`` as a connection does; what it settled with, its answer, its error."""
    loop = asyncio.get_running_loop()
    settled: asyncio.Future[IpcError | None] = loop.create_future()
    answered: list[tuple[str | None, str | None]] = []
    orchestrator.router.send(
        SENDER,
        handoff,
        on_settled=settled.set_result,
        on_answer=lambda answer, failure: answered.append((answer, failure)),
    )
    async with asyncio.timeout(30):
        error = await settled
    answer, failure = answered[0] if answered else (None, None)
    return error, answer, failure


async def test_a_send_delivered_again_is_answered_from_its_first_turn(tmp_path: Path) -> None:
    orchestrator = Orchestrator.from_bundle(
        write_concurrency_swarm(tmp_path), state_dir=tmp_path / "state"
    )
    async with asyncio.timeout(30):
        await orchestrator.start()
    try:
        handoff = Handoff(
            target="queuer",
            input="once only",
            instance_key="k",
            trace_id=new_trace_id(),
            event_id="agent_event_0123456789abcdef",
        )
        assert await deliver(orchestrator, handoff) == (None, "got: once only", None)
        # The same event again, as a redelivery after a restart would bring it.
        assert await deliver(orchestrator, handoff) == (None, "got: once only", None)
        fresh = Handoff(target="queuer", input="once only", instance_key="k")
        assert await deliver(orchestrator, fresh) == (None, "got: once only", None)
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()
    directory = tmp_path / "state" / "agents" / "queuer" / "instances" / "k" / "conversation"
    users = [m for m in ConversationStore(directory).load() if m.role == "user"]
    # Twice: the redelivery was not taken again; another send with the same text was.
    assert [m.content for m in users] == ["once only", "once only"]
    assert users[0].metadata["__goondanSendId"] == handoff.event_id
