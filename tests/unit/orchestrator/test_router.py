"""Every guarantee of the router's docstring, against fake workers and a fake clock.

Every ``delegate`` gets exactly one ``delegate_result``: the target's, or a structured error
when the target is unknown, would close a cycle, cannot start, died under the Turn too often,
takes longer than the timeout, or the swarm shuts down; a late answer is dropped. A target
that dies is waited for and the request delivered again. Sends are tracked until done,
redelivered once if their target died before starting them, carried like requests if it died
mid-Turn, else reported.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from goondan.defaults import (
    AGENT_QUESTION_TIMEOUT_SECONDS,
    MAX_PENDING_PER_CALLER,
    MAX_REQUEST_TIMEOUT_MS,
    MAX_TURN_ATTEMPTS,
)
from ipc import DelegateMessage, DelegateResultMessage, EventMessage, IpcError, build
from ipc.codec import FrameDecoder, encode
from ipc.delegation import DelegateAnswer, Handoff
from ipc.events import Send, SendDone, SendFailed, SendRefused, SendStarted, TextDelta
from ipc.questions import (
    DeleteInstance,
    DeleteInstanceResult,
    ListRequest,
    ListResult,
    PrepareInstance,
    PrepareInstanceResult,
    SpawnRequest,
    SpawnResult,
)
from orchestrator.dispatch import Dispatcher
from orchestrator.router import InFlightSend, Router
from orchestrator.router_carry import EXTRA_DELIVERIES, NODE_ABSENT_WAIT_SECONDS
from orchestrator.status import ProcessStatus
from orchestrator.supervisor import Supervisor
from orchestrator.testing import FakeClock, FakeTransport, FakeWorker, fake_plans


@dataclass
class Swarm:
    clock: FakeClock
    transport: FakeTransport
    supervisor: Supervisor
    router: Router
    lost: list[tuple[InFlightSend, IpcError]]

    async def worker(self, name: str) -> FakeWorker:
        """``name`` running and ready."""
        handle = await self.supervisor.ensure_running(name)
        assert handle.worker is not None
        return self.transport.current(name)

    def delegate(
        self,
        caller: str,
        target: str,
        text: str = "hi",
        correlation_id: str = "c1",
        **fields: object,
    ) -> DelegateMessage:
        """A delegate as agent ``caller`` writes it."""
        handoff = Handoff(target=target, input=text, **fields)  # type: ignore[arg-type]
        return build.delegate(caller, target, correlation_id, handoff)

    def results_to(self, worker: FakeWorker) -> list[DelegateAnswer]:
        return [
            DelegateAnswer.from_wire(m.payload)
            for m in worker.sent
            if isinstance(m, DelegateResultMessage)
        ]


@pytest.fixture
async def swarm() -> AsyncIterator[Swarm]:
    clock = FakeClock()
    transport = FakeTransport()
    supervisor = Supervisor(
        fake_plans("alpha", "beta", "gamma"),
        transport,
        clock=clock,
        on_exit=lambda name, info: router.on_agent_exit(name),
    )
    lost: list[tuple[InFlightSend, IpcError]] = []
    router = Router(
        supervisor,
        clock=clock,
        default_timeout_ms=60_000,
        on_delivery_lost=lambda send, error: lost.append((send, error)),
    )
    supervisor.on_message = Dispatcher(router, supervisor.event_handlers)
    yield Swarm(clock, transport, supervisor, router, lost)
    supervisor.stop_restarting()
    await router.close()
    await supervisor.shutdown(0)


def code_of(answer: DelegateAnswer) -> str | None:
    return answer.error.code if answer.error is not None else None


async def answer_of(future: asyncio.Future[DelegateAnswer]) -> DelegateAnswer:
    async with asyncio.timeout(2):
        return await future


# -- one answer per request -------------------------------------------------------------------------


async def test_the_targets_answer_reaches_the_external_caller(swarm: Swarm) -> None:
    request = asyncio.ensure_future(swarm.router.request("beta", "hello"))
    beta = await swarm.transport.started("beta")
    [delegate] = (await beta.received(1)) and beta.delegates()
    payload = Handoff.from_wire(delegate.payload)
    assert (payload.input, payload.event_type, payload.call_chain) == ("hello", "user.input", ())
    assert len(payload.trace_id) == 32
    beta.answer(delegate, "hi back")
    answer = await answer_of(request)
    assert (answer.status, answer.output) == ("ok", "hi back")
    assert not swarm.router.pending


async def test_an_agents_request_is_forwarded_and_answered_to_it(swarm: Swarm) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta", call_chain=("alpha@default",)))
    [delegate] = beta.delegates()  # forwarded on the spot: the target was ready
    beta.answer(delegate, "done")
    [answer] = swarm.results_to(alpha)
    assert (answer.status, answer.output) == ("ok", "done")


@pytest.mark.parametrize(
    ("target", "text", "chain", "code"),
    [
        ("nobody", "hi", (), "AGENT_NOT_FOUND"),
        ("beta", "   ", (), "EMPTY_INPUT"),
        ("beta", "hi", ("beta@default", "alpha@default"), "CIRCULAR_CALL_DETECTED"),
    ],
)
async def test_requests_that_cannot_be_served_are_refused_at_once(
    swarm: Swarm, target: str, text: str, chain: tuple[str, ...], code: str
) -> None:
    alpha = await swarm.worker("alpha")
    alpha.deliver(swarm.delegate("alpha", target, text, call_chain=chain))
    async with asyncio.timeout(2):
        while not swarm.results_to(alpha):
            await alpha.received(len(alpha.sent) + 1)
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == code
    assert not swarm.router.pending


async def test_a_payload_that_is_not_an_object_is_refused(swarm: Swarm) -> None:
    alpha = await swarm.worker("alpha")
    alpha.deliver(DelegateMessage(sender="alpha", to="beta", correlation_id="c1", payload=[1]))
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == "IPC_MALFORMED_PAYLOAD"


async def test_a_payload_field_of_the_wrong_type_is_answered_by_its_correlation_id(
    swarm: Swarm,
) -> None:
    alpha = await swarm.worker("alpha")
    payload = {"target": "beta", "input": 3}
    frame = encode(DelegateMessage(sender="alpha", to="beta", correlation_id="c7", payload=payload))
    [message] = FrameDecoder().feed(frame)  # the envelope decodes though its payload does not
    assert isinstance(message, DelegateMessage)
    alpha.deliver(message)
    [result] = [m for m in alpha.sent if isinstance(m, DelegateResultMessage)]
    assert result.correlation_id == "c7"
    error = DelegateAnswer.from_wire(result.payload).error
    assert error is not None
    assert (error.code, error.details) == ("IPC_MALFORMED_PAYLOAD", {"field": "input"})
    assert "Expected `str`, got `int` - at `$.input`" in error.message


async def test_a_request_closing_a_cycle_across_requests_is_refused(swarm: Swarm) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    # beta@default waits for alpha@default ...
    beta.deliver(swarm.delegate("beta", "alpha", call_chain=("beta@default",), correlation_id="b1"))
    # ... so alpha@default asking beta@default would deadlock both serial queues
    alpha.deliver(
        swarm.delegate("alpha", "beta", call_chain=("alpha@default",), correlation_id="a1")
    )
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == "CIRCULAR_CALL_DETECTED"
    assert answer.error.details["chain"] == ["alpha@default", "beta@default", "alpha@default"]
    # a background request never blocks its caller: no cycle
    alpha.deliver(
        swarm.delegate(
            "alpha", "beta", call_chain=("alpha@default",), correlation_id="a2", background=True
        )
    )
    assert len(swarm.results_to(alpha)) == 1


async def test_a_request_whose_target_dies_is_delivered_again_once_it_is_back(
    swarm: Swarm,
) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta"))
    await beta.received(1)
    beta.crash()
    again = await swarm.transport.started("beta", count=2)
    [delegate] = (await again.received(1)) and again.delegates()
    handoff = Handoff.from_wire(delegate.payload)
    # The same request, named by its correlation id, as the next attempt at its Turn.
    assert (delegate.correlation_id, handoff.request_id, handoff.attempt) == ("c1", "c1", 2)
    assert swarm.results_to(alpha) == []  # the caller keeps waiting: no AGENT_CRASHED
    again.answer(delegate, "resumed")
    await alpha.received(1)
    [answer] = swarm.results_to(alpha)
    assert (answer.status, answer.output) == ("ok", "resumed")
    assert not swarm.router.pending


async def test_a_request_keeps_the_request_id_its_caller_gave(swarm: Swarm) -> None:
    beta = await swarm.worker("beta")
    request = asyncio.ensure_future(swarm.router.request("beta", "hi", request_id="req-7"))
    [first] = (await beta.received(1)) and beta.delegates()
    assert Handoff.from_wire(first.payload).request_id == "req-7"
    beta.crash()
    again = await swarm.transport.started("beta", count=2)
    [delegate] = (await again.received(1)) and again.delegates()
    handoff = Handoff.from_wire(delegate.payload)
    assert (handoff.request_id, handoff.attempt) == ("req-7", 2)
    again.answer(delegate, "done")
    assert (await answer_of(request)).output == "done"


async def test_a_turn_that_kills_its_agent_too_often_is_answered_agent_crashed(
    swarm: Swarm,
) -> None:
    alpha = await swarm.worker("alpha")
    await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta"))
    # The agent answers AGENT_CRASHED itself after maxTurnAttempts (3) runs of the Turn;
    # the router gives up after two deliveries more, whatever killed the agent.
    for attempt in (1, 2, 3, 4, 5):
        worker = await swarm.transport.started("beta", count=attempt)
        [delegate] = (await worker.received(1)) and worker.delegates()
        assert Handoff.from_wire(delegate.payload).attempt == attempt
        worker.crash()
    await alpha.received(1)
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == "AGENT_CRASHED"
    assert answer.error is not None
    assert "5 times" in answer.error.message
    assert answer.error.details["attempts"] == 5
    assert not swarm.router.pending


async def test_a_carried_request_still_times_out(swarm: Swarm) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta", timeout_ms=5_000))
    await beta.received(1)
    swarm.transport.gate = asyncio.Event()  # the restart takes its time
    beta.crash()
    await asyncio.sleep(0)
    swarm.clock.advance(5)
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == "AGENT_REQUEST_TIMEOUT"
    assert not swarm.router.pending
    swarm.transport.gate.set()


async def test_no_request_waits_longer_than_a_week(swarm: Swarm) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta", timeout_ms=10**18))
    swarm.clock.advance(MAX_REQUEST_TIMEOUT_MS / 1000 - 1)
    assert swarm.results_to(alpha) == []
    swarm.clock.advance(1)
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == "AGENT_REQUEST_TIMEOUT"
    assert beta.delegates()


async def test_a_request_the_wire_cannot_carry_is_refused_and_its_target_lives_on(
    swarm: Swarm,
) -> None:
    beta = await swarm.worker("beta")
    answer = await answer_of(asyncio.ensure_future(swarm.router.request("beta", "\ud800x")))
    assert code_of(answer) == "IPC_MALFORMED_PAYLOAD"  # not AGENT_CRASHED: nothing died
    assert not swarm.router.pending
    assert not beta.exited.done()
    assert swarm.supervisor.handle("beta").worker is beta
    fine = asyncio.ensure_future(swarm.router.request("beta", "hello"))
    [delegate] = (await beta.received(1)) and beta.delegates()
    beta.answer(delegate, "still here")
    assert (await answer_of(fine)).output == "still here"


async def test_a_send_the_wire_cannot_carry_is_reported_as_such(swarm: Swarm) -> None:
    beta = await swarm.worker("beta")
    settled: asyncio.Future[IpcError | None] = asyncio.get_running_loop().create_future()
    swarm.router.send("alpha", Handoff(target="beta", input="\udfff"), settled.set_result)
    async with asyncio.timeout(2):
        error = await settled
    assert error is not None
    assert error.code == "IPC_MALFORMED_PAYLOAD"
    assert not beta.exited.done()
    assert not swarm.router.sends


async def test_a_timeout_answers_once_and_the_late_answer_is_dropped(swarm: Swarm) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta", timeout_ms=1500))
    swarm.clock.advance(1.4)
    assert swarm.results_to(alpha) == []
    swarm.clock.advance(0.2)
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == "AGENT_REQUEST_TIMEOUT"
    [delegate] = beta.delegates()
    beta.answer(delegate, "too late")
    assert len(swarm.results_to(alpha)) == 1  # still one answer


async def test_a_request_without_timeout_gets_the_swarms_default(swarm: Swarm) -> None:
    alpha, _ = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta"))
    swarm.clock.advance(59.9)
    assert swarm.results_to(alpha) == []
    swarm.clock.advance(0.2)
    assert [a.error.code for a in swarm.results_to(alpha) if a.error] == ["AGENT_REQUEST_TIMEOUT"]


async def test_a_target_backing_off_is_unavailable(swarm: Swarm) -> None:
    alpha = await swarm.worker("alpha")
    handle = swarm.supervisor.handle("beta")
    handle.wanted, handle.status = True, ProcessStatus.CRASH_LOOP_BACK_OFF
    handle.consecutive_crashes, handle.next_start_at = 6, swarm.clock.now() + 10
    alpha.deliver(swarm.delegate("alpha", "beta"))
    await alpha.received(1)
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == "AGENT_UNAVAILABLE"
    assert answer.error.details["retryInSeconds"] == 10


async def test_a_target_that_cannot_start_is_unavailable(swarm: Swarm) -> None:
    swarm.transport.refuse.add("beta")
    answer = await answer_of(asyncio.ensure_future(swarm.router.request("beta", "hi")))
    assert code_of(answer) == "AGENT_UNAVAILABLE"


async def test_shutdown_answers_everything_pending_and_refuses_new_requests(swarm: Swarm) -> None:
    alpha, _ = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta"))
    await swarm.router.close()
    alpha.deliver(swarm.delegate("alpha", "beta", correlation_id="c2"))
    codes = [a.error.code for a in swarm.results_to(alpha) if a.error]
    assert codes == ["SHUTTING_DOWN", "SHUTTING_DOWN"]


async def test_a_caller_may_wait_on_a_bounded_number_of_requests(swarm: Swarm) -> None:
    alpha, _ = await swarm.worker("alpha"), await swarm.worker("beta")
    for n in range(MAX_PENDING_PER_CALLER + 1):
        alpha.deliver(swarm.delegate("alpha", "beta", correlation_id=f"c{n}"))
    [answer] = swarm.results_to(alpha)
    assert code_of(answer) == "TOO_MANY_PENDING_REQUESTS"
    assert len(swarm.router.pending) == MAX_PENDING_PER_CALLER


async def test_a_duplicate_correlation_id_is_dropped(swarm: Swarm) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta"))
    alpha.deliver(swarm.delegate("alpha", "beta"))
    assert len(beta.delegates()) == 1
    assert swarm.results_to(alpha) == []


async def test_a_dead_callers_requests_are_forgotten(swarm: Swarm) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.deliver(swarm.delegate("alpha", "beta"))
    alpha.crash()
    await asyncio.wait_for(asyncio.shield(alpha.exited), 2)
    await swarm.supervisor.wait_until(lambda: swarm.supervisor.handle("alpha").worker is None)
    assert not swarm.router.pending
    [delegate] = beta.delegates()
    beta.answer(delegate, "nobody listens")  # dropped without error


# -- sends -------------------------------------------------------------------------------------------


def send(target: str, text: str = "note", event_id: str = "e1") -> Send:
    return Send(Handoff(target=target, input=text, event_id=event_id, caller_instance_key="k"))


async def test_a_send_is_delivered_with_its_source_and_tracked_until_done(swarm: Swarm) -> None:
    alpha = await swarm.worker("alpha")
    alpha.report(send("beta"))
    beta = await swarm.transport.started("beta")
    await beta.received(1)
    [(_, delivered)] = beta.events(Send)
    assert (delivered.handoff.source, delivered.handoff.input) == ("alpha", "note")
    assert "e1" in swarm.router.sends
    beta.report(SendStarted("e1"))
    beta.report(SendDone("e1"))
    assert not swarm.router.sends


async def test_a_send_lost_before_its_turn_started_is_delivered_once_more(swarm: Swarm) -> None:
    alpha = await swarm.worker("alpha")
    alpha.report(send("beta"))
    first = await swarm.transport.started("beta")
    await first.received(1)
    first.crash()
    second = await swarm.transport.started("beta", count=2)
    await second.received(1)
    assert len(second.events(Send)) == 1
    assert swarm.lost == []
    second.crash()  # twice before starting: reported
    await alpha.received(1)
    [(_, failed)] = alpha.events(SendFailed)
    assert (failed.event_id, failed.instance_key, failed.error.code) == ("e1", "k", "AGENT_CRASHED")
    assert [error.code for _, error in swarm.lost] == ["AGENT_CRASHED"]


async def test_a_send_to_a_target_that_just_died_waits_for_its_exit_and_is_delivered(
    swarm: Swarm,
) -> None:
    alpha, first = await swarm.worker("alpha"), await swarm.worker("beta")
    alpha.report(send("beta"))
    first.crash()  # dead before the delivery, its exit not seen yet: the pipe refuses it
    second = await swarm.transport.started("beta", count=2)
    await second.received(1)
    assert len(second.events(Send)) == 1
    assert first.events(Send) == []
    assert swarm.lost == []
    second.crash()  # its only delivery died unstarted: one more
    third = await swarm.transport.started("beta", count=3)
    await third.received(1)
    assert len(third.events(Send)) == 1
    assert swarm.lost == []


async def test_a_delivery_waiting_for_a_start_that_died_gives_way_to_the_next(
    swarm: Swarm,
) -> None:
    alpha = await swarm.worker("alpha")
    swarm.transport.ready_on_start = False
    alpha.report(send("beta"))
    first = await swarm.transport.started("beta")
    first.crash()  # dies while starting, with the delivery waiting for it to be ready
    second = await swarm.transport.started("beta", count=2)
    second.ready()
    await second.received(1)
    assert len(second.events(Send)) == 1
    assert swarm.lost == []
    assert "e1" in swarm.router.sends


async def test_a_send_whose_turn_started_is_carried_over_its_targets_restart(
    swarm: Swarm,
) -> None:
    alpha = await swarm.worker("alpha")
    alpha.report(send("beta"))
    for attempt in (1, 2, 3, 4, 5):
        beta = await swarm.transport.started("beta", count=attempt)
        await beta.received(1)
        [(_, delivered)] = beta.events(Send)
        assert (delivered.handoff.attempt, delivered.handoff.request_id) == (
            attempt,
            "" if attempt == 1 else "e1",
        )
        beta.report(SendStarted("e1"))
        beta.crash()
    # Five deaths with it (maxTurnAttempts and two more): reported, naming them.
    await alpha.received(1)
    [(_, failed)] = alpha.events(SendFailed)
    assert failed.error.code == "AGENT_CRASHED"
    assert "5 times" in failed.error.message
    assert not swarm.router.sends


async def test_a_refused_send_is_reported_to_its_sender(swarm: Swarm) -> None:
    alpha = await swarm.worker("alpha")
    alpha.report(send("beta"))
    beta = await swarm.transport.started("beta")
    await beta.received(1)
    beta.report(SendRefused("e1", IpcError("full", code="E_INSTANCE_QUEUE_FULL")))
    [(_, failed)] = alpha.events(SendFailed)
    assert failed.error.code == "E_INSTANCE_QUEUE_FULL"


@pytest.mark.parametrize(("text", "code"), [(" ", "EMPTY_INPUT"), ("hi", "AGENT_NOT_FOUND")])
async def test_a_send_that_cannot_be_delivered_is_reported(
    swarm: Swarm, text: str, code: str
) -> None:
    alpha = await swarm.worker("alpha")
    alpha.report(send("beta" if text == " " else "nobody", text))
    await alpha.received(1)
    [(_, failed)] = alpha.events(SendFailed)
    assert failed.error.code == code
    assert not swarm.router.sends


async def test_sends_stopped_by_the_shutdown_are_reported_as_such(swarm: Swarm) -> None:
    alpha = await swarm.worker("alpha")
    alpha.report(send("beta"))
    beta = await swarm.transport.started("beta")
    await beta.received(1)
    swarm.router.closing = True
    beta.crash()
    await alpha.received(1)
    [(_, failed)] = alpha.events(SendFailed)
    assert failed.error.code == "SHUTTING_DOWN"


# -- spawn, list, questions ----------------------------------------------------------------------------


async def test_spawn_prepares_the_instance_in_the_target_and_lists_it(swarm: Swarm) -> None:
    alpha = await swarm.worker("alpha")
    alpha.report(SpawnRequest("beta", "job-1", None, "default"), correlation_id="s1")
    beta = await swarm.transport.started("beta")
    await beta.received(1)
    [(question, prepare)] = beta.events(PrepareInstance)
    assert (prepare.instance_key, prepare.owner) == ("job-1", "alpha")
    beta.report(PrepareInstanceResult("job-1", True, "/w"), question.correlation_id)
    await alpha.received(1)
    [(reply, spawned)] = alpha.events(SpawnResult)
    assert reply.correlation_id == "s1"
    assert (spawned.instance_key, spawned.spawned, spawned.cwd) == ("job-1", True, "/w")
    alpha.report(ListRequest("default"), correlation_id="l1")
    [(_, listed)] = alpha.events(ListResult)
    assert [row["instanceKey"] for row in listed.agents] == ["job-1"]
    alpha.report(ListRequest("other"), correlation_id="l2")
    assert alpha.events(ListResult)[1][1].agents == []


async def test_a_question_the_agent_never_answers_times_out(swarm: Swarm) -> None:
    await swarm.worker("beta")
    asked = asyncio.ensure_future(swarm.router.ask("beta", DeleteInstance("k")))
    beta = swarm.transport.current("beta")
    await beta.received(1)
    swarm.clock.advance(AGENT_QUESTION_TIMEOUT_SECONDS + 0.1)
    with pytest.raises(IpcError) as failed:
        await asyncio.wait_for(asked, 2)
    assert failed.value.code == "AGENT_REQUEST_TIMEOUT"


async def test_a_question_to_an_agent_that_dies_fails_with_agent_crashed(swarm: Swarm) -> None:
    await swarm.worker("beta")
    asked = asyncio.ensure_future(swarm.router.ask("beta", DeleteInstance("k")))
    beta = swarm.transport.current("beta")
    await beta.received(1)
    beta.crash()
    with pytest.raises(IpcError) as failed:
        await asyncio.wait_for(asked, 2)
    assert failed.value.code == "AGENT_CRASHED"


async def test_an_answer_from_another_agent_is_not_taken_for_the_questions(swarm: Swarm) -> None:
    alpha, beta = await swarm.worker("alpha"), await swarm.worker("beta")
    asked = asyncio.ensure_future(swarm.router.ask("beta", DeleteInstance("k")))
    [(question, _)] = [*(await beta.received(1) and beta.events(DeleteInstance))]
    alpha.report(DeleteInstanceResult(True, True), question.correlation_id)
    assert not asked.done()
    beta.report(DeleteInstanceResult(True, True), question.correlation_id)
    answer = await asyncio.wait_for(asked, 2)
    assert isinstance(answer, DeleteInstanceResult)
    assert answer.deleted


# -- the dispatch table ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"kind": "bogus"},
        {"kind": "send", "target": "beta", "input": 3},
        {"kind": "status", "status": "sleeping"},
        [1, 2],
    ],
)
async def test_an_event_of_unknown_kind_or_wrong_shape_is_dropped(
    swarm: Swarm, payload: object
) -> None:
    alpha = await swarm.worker("alpha")
    alpha.deliver(EventMessage(sender="alpha", to="orchestrator", payload=payload))
    assert not swarm.router.sends
    assert swarm.supervisor.handle("alpha").status is ProcessStatus.IDLE
    # and the daemon routes on as before
    alpha.deliver(swarm.delegate("alpha", "nobody"))
    await alpha.received(1)
    assert [a.error.code for a in swarm.results_to(alpha) if a.error] == ["AGENT_NOT_FOUND"]


def test_two_handlers_for_one_kind_are_refused(swarm: Swarm) -> None:
    with pytest.raises(ValueError, match="two handlers"):
        Dispatcher(swarm.router, swarm.supervisor.event_handlers, swarm.router.event_handlers)


# -- streamed requests ------------------------------------------------------------------------------


async def test_a_streamed_requests_text_reaches_its_sink_until_it_is_answered(
    swarm: Swarm,
) -> None:
    seen: list[tuple[str, str]] = []
    request = asyncio.ensure_future(
        swarm.router.request(
            "beta", "hello", on_delta=lambda agent, delta: seen.append((agent, delta.text))
        )
    )
    beta = await swarm.transport.started("beta")
    [delegate] = (await beta.received(1)) and beta.delegates()
    handoff = Handoff.from_wire(delegate.payload)
    assert handoff.stream_id == delegate.correlation_id  # deltas find the request by it
    assert handoff.relay is False
    beta.report(TextDelta(handoff.stream_id, "hi ", handoff.trace_id))
    beta.report(TextDelta("corr_someone_else", "not mine"))
    beta.report(TextDelta(handoff.stream_id, "back", handoff.trace_id))
    beta.answer(delegate, "hi back")
    assert (await answer_of(request)).output == "hi back"
    assert seen == [("beta", "hi "), ("beta", "back")]
    assert swarm.router.streams == {}
    beta.report(TextDelta(handoff.stream_id, "late"))  # dropped: nobody waits
    assert len(seen) == 2


async def test_a_relayed_stream_reaches_the_caller_from_the_agents_it_asks(swarm: Swarm) -> None:
    seen: list[tuple[str, str]] = []
    request = asyncio.ensure_future(
        swarm.router.request(
            "alpha",
            "ask beta",
            on_delta=lambda agent, delta: seen.append((agent, delta.text)),
            relay=True,
        )
    )
    alpha = await swarm.transport.started("alpha")
    [delegate] = (await alpha.received(1)) and alpha.delegates()
    handoff = Handoff.from_wire(delegate.payload)
    assert handoff.relay is True
    beta = await swarm.worker("beta")
    # alpha's runtime passes the stream on to the request it makes (as agent_process does)
    alpha.deliver(
        swarm.delegate(
            "alpha",
            "beta",
            correlation_id="c-beta",
            call_chain=("alpha@default",),
            stream_id=handoff.stream_id,
            relay=True,
        )
    )
    [asked] = beta.delegates()
    beta.report(TextDelta(handoff.stream_id, "from beta"))
    beta.answer(asked, "from beta")
    alpha.report(TextDelta(handoff.stream_id, "from alpha"))
    alpha.answer(delegate, "from alpha")
    await answer_of(request)
    assert seen == [("beta", "from beta"), ("alpha", "from alpha")]


async def test_a_streamed_request_given_up_leaves_no_sink(swarm: Swarm) -> None:
    request = asyncio.ensure_future(
        swarm.router.request("beta", "hello", on_delta=lambda agent, delta: None)
    )
    beta = await swarm.transport.started("beta")
    [delegate] = (await beta.received(1)) and beta.delegates()
    assert len(swarm.router.streams) == 1
    request.cancel()  # the HTTP client went away
    with pytest.raises(asyncio.CancelledError):
        await request
    assert swarm.router.streams == {}
    beta.report(TextDelta(Handoff.from_wire(delegate.payload).stream_id, "into the void"))
    beta.answer(delegate, "nobody listens")  # the Turn still gets its one answer, dropped
    assert not swarm.router.pending


async def test_a_plain_request_does_not_stream(swarm: Swarm) -> None:
    request = asyncio.ensure_future(swarm.router.request("beta", "hello"))
    beta = await swarm.transport.started("beta")
    [delegate] = (await beta.received(1)) and beta.delegates()
    assert "streamId" not in delegate.payload
    beta.answer(delegate, "ok")
    await answer_of(request)


async def settle(swarm: Swarm, seconds: float, step: float = 0.2) -> None:
    """Advance the fake clock ``seconds`` in ``step`` s, letting the loop run between."""
    for _ in range(round(seconds / step)):
        swarm.clock.advance(step)
        for _ in range(5):
            await asyncio.sleep(0)


async def test_a_request_waits_for_a_cluster_node_back_in_a_moment(swarm: Swarm) -> None:
    swarm.transport.absent.add("beta")
    asked = asyncio.ensure_future(swarm.router.request("beta", "hi"))
    await settle(swarm, 3)
    assert not asked.done()  # a node lost a moment ago: waited for, not refused
    swarm.transport.absent.discard("beta")  # the node is back
    await settle(swarm, 0.4)
    beta = swarm.transport.current("beta")
    [message] = beta.delegates()
    beta.answer(message, "hello")
    answer = await answer_of(asked)
    assert (answer.status, answer.output) == ("ok", "hello")


async def test_a_request_whose_node_stays_away_is_refused_naming_it(swarm: Swarm) -> None:
    swarm.transport.absent.add("beta")
    asked = asyncio.ensure_future(swarm.router.request("beta", "hi"))
    await settle(swarm, NODE_ABSENT_WAIT_SECONDS + 1)
    answer = await answer_of(asked)
    assert code_of(answer) == "AGENT_UNAVAILABLE"
    assert "not in the cluster" in answer.error.message  # type: ignore[union-attr]


async def test_a_request_whose_target_dies_while_starting_is_delivered_once_it_is_back(
    swarm: Swarm,
) -> None:
    swarm.transport.ready_on_start = False
    asked = asyncio.ensure_future(swarm.router.request("beta", "hi"))
    first = await swarm.transport.started("beta")
    first.exit(69)  # its cluster node lost under the start, say: the request never reached it
    await settle(swarm, 0.4)
    again = await swarm.transport.started("beta", 2)
    again.ready()
    await settle(swarm, 0.4)
    [message] = again.delegates()
    again.answer(message, "hello")
    answer = await answer_of(asked)
    assert (answer.status, answer.output) == ("ok", "hello")
    assert not first.delegates()


async def test_a_target_that_dies_at_every_start_is_answered_crashed_not_waited_on(
    swarm: Swarm,
) -> None:
    swarm.transport.ready_on_start = False
    asked = asyncio.ensure_future(
        swarm.router.request("beta", "hi", timeout_ms=MAX_REQUEST_TIMEOUT_MS)
    )
    allowed = MAX_TURN_ATTEMPTS + EXTRA_DELIVERIES
    for start in range(1, allowed + 3):
        worker = await swarm.transport.started("beta", start)
        worker.exit(1)
        for _ in range(100):  # through the crash-loop backoff the later deaths bring
            await settle(swarm, 1.0)
            if asked.done() or len(swarm.transport.of("beta")) > start:
                break
        if asked.done():
            break
    answer = await answer_of(asked)
    assert code_of(answer) == "AGENT_CRASHED"
    assert "exited while starting" in answer.error.message  # type: ignore[union-attr]
    # Carried over the first death, then as many deaths at a start as it has deliveries.
    assert len(swarm.transport.of("beta")) == allowed + 2
