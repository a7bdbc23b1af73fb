"""The permit broker: pools of shared rate limits and trace budgets, on a fake clock."""

from __future__ import annotations

from typing import Any

import pytest

from bundle.spec_agent import ModelLimits
from ipc.events import ModelUsage
from ipc.payload import EventBody
from ipc.questions import ModelPermitRequest, ModelPermitResult
from ipc.runtime_events import read_event
from orchestrator.limits import ModelBroker
from orchestrator.limits.usage import UsageBook
from orchestrator.testing import FakeClock

TRACE = "t" * 32


class Harness:
    """A broker whose answers and events are recorded (agents named ``quiet*`` ask no
    permits and report no usage of their own)."""

    def __init__(
        self, budgets: dict[str, dict[str, float]] | None = None, **pools: ModelLimits
    ) -> None:
        self.clock = FakeClock()
        self.answers: dict[str, ModelPermitResult] = {}
        self.events: list[dict[str, Any]] = []
        self.broker = ModelBroker(
            pools,
            usage=UsageBook(lambda agent: (budgets or {}).get(agent, {})),
            reply=self._reply,
            record=lambda event, agent: self.events.append({"agent": agent, **event.to_builtins()}),
            clock=self.clock,
            reports=lambda agent: not agent.startswith("quiet"),
        )
        self._ids = 0

    def _reply(self, agent: str, correlation_id: str, body: EventBody) -> None:
        assert isinstance(body, ModelPermitResult)
        assert correlation_id not in self.answers, "one answer per request"
        self.answers[correlation_id] = body

    def ask(
        self,
        agent: str = "a",
        *,
        pool: str = "key",
        tokens: int = 0,
        wait_ms: int = 60_000,
        trace: str = TRACE,
        out: int = 0,
        cost: float = 0.0,
    ) -> str:
        self._ids += 1
        permit = f"p{self._ids}"
        request = ModelPermitRequest(pool, trace, "default", tokens, wait_ms, out, cost)
        self.broker.permit_requested(agent, permit, request)
        return permit

    def done(
        self,
        permit: str,
        agent: str = "a",
        *,
        pool: str = "key",
        used: tuple[int, int] = (10, 5),
        retry_after_ms: int | None = None,
        trace: str = TRACE,
    ) -> None:
        report = ModelUsage(trace, "default", permit, pool, *used, 0.0, retry_after_ms)
        self.broker.usage_reported(agent, report)

    def granted(self, permit: str) -> bool:
        answer = self.answers.get(permit)
        return answer is not None and answer.granted

    def refused(self, permit: str) -> str | None:
        answer = self.answers.get(permit)
        return answer.error.code if answer is not None and answer.error is not None else None

    def reserved(self, trace: str = TRACE) -> dict[str, Any] | None:
        """The trace's reservations as ``/v1/usage`` shows them (``None``: none held)."""
        row: dict[str, Any] = self.broker.usage.traces[trace].to_json()
        return row.get("reserved")


def test_max_concurrent_grants_in_arrival_order_as_permits_come_back() -> None:
    h = Harness(key=ModelLimits(max_concurrent=1, pool="key"))
    first, second, third = h.ask("a"), h.ask("b"), h.ask("c")
    assert h.granted(first)
    assert second not in h.answers
    assert third not in h.answers
    waiting = [e for e in h.events if e["type"] == "model.permit.waiting"]
    assert [(e["agent"], e["reason"], e["position"]) for e in waiting] == [
        ("b", "maxConcurrent", 1),
        ("c", "maxConcurrent", 2),
    ]
    assert h.broker.waiting_by_agent()["b"] == 1
    h.clock.advance(0.25)
    h.done(first, "a")
    assert h.granted(second)
    assert third not in h.answers
    granted = [e for e in h.events if e["type"] == "model.permit.granted"]
    assert granted[0]["agent"] == "b"
    assert granted[0]["waitedMs"] == 250
    h.done(second, "b")
    assert h.granted(third)
    row = h.broker.snapshot()[0]
    assert (row["inUse"], row["waiting"], row["granted"], row["waited"]) == (1, 0, 3, 2)


def test_requests_per_minute_refill_evenly() -> None:
    h = Harness(key=ModelLimits(requests_per_minute=60, pool="key"))
    burst = [h.ask() for _ in range(60)]
    assert all(h.granted(p) for p in burst)  # a full minute's bucket
    late = h.ask()
    assert late not in h.answers
    h.clock.advance(0.9)
    assert late not in h.answers
    h.clock.advance(0.2)  # one request refills per second at 60/min
    assert h.granted(late)


def test_tokens_per_minute_admit_on_the_estimate_and_settle_on_the_use() -> None:
    h = Harness(key=ModelLimits(tokens_per_minute=6000, pool="key"))
    big = h.ask(tokens=5000)
    assert h.granted(big)
    small = h.ask(tokens=2000)  # 1000 left: waits
    assert small not in h.answers
    h.done(big, used=(500, 100))  # it used 600 of its 5000: 4400 come back at once
    assert h.granted(small)


def test_a_call_larger_than_a_minute_waits_for_a_full_bucket_not_forever() -> None:
    h = Harness(key=ModelLimits(tokens_per_minute=1000, pool="key"))
    first = h.ask(tokens=900)
    assert h.granted(first)
    huge = h.ask(tokens=50_000)
    assert huge not in h.answers
    h.done(first, used=(900, 0))
    h.clock.advance(60)
    assert h.granted(huge)


def test_a_429_pauses_every_agent_of_the_pool() -> None:
    h = Harness(key=ModelLimits(max_concurrent=3, pool="key"))
    a, b = h.ask("a"), h.ask("b")
    h.done(a, "a", used=(0, 0), retry_after_ms=2000)
    c = h.ask("c")
    retry = h.ask("a")
    assert c not in h.answers
    assert retry not in h.answers
    assert [e["reason"] for e in h.events if e["type"] == "model.permit.waiting"] == [
        "paused",
        "paused",
    ]
    paused = [e for e in h.events if e["type"] == "model.rate_limited"]
    assert paused == [
        {
            "type": "model.rate_limited",
            "agent": "a",
            "instanceKey": "default",
            "traceId": TRACE,
            "pool": "key",
            "retryAfterMs": 2000,
        }
    ]
    h.clock.advance(2.0)  # Retry-After is up, but not the clock's grain added to it
    assert c not in h.answers
    h.clock.advance(0.01)
    assert h.granted(c)
    assert h.granted(retry)
    assert h.granted(b)
    assert h.broker.snapshot()[0]["pauses"] == 1


def test_a_shorter_429_does_not_cut_a_longer_pause_short() -> None:
    h = Harness(key=ModelLimits(max_concurrent=5, pool="key"))
    a, b = h.ask("a"), h.ask("b")
    h.done(a, retry_after_ms=5000)
    h.done(b, retry_after_ms=1000)
    later = h.ask()
    h.clock.advance(1.5)
    assert later not in h.answers
    h.clock.advance(3.6)
    assert h.granted(later)


def test_a_wait_longer_than_its_bound_is_refused_with_a_clear_code() -> None:
    h = Harness(key=ModelLimits(max_concurrent=1, pool="key"))
    held = h.ask("a")
    waiting = h.ask("b", wait_ms=1500)
    h.clock.advance(1.49)
    assert waiting not in h.answers
    h.clock.advance(0.02)
    assert h.refused(waiting) == "E_MODEL_PERMIT_TIMEOUT"
    error = h.answers[waiting].error
    assert error is not None
    assert "pool 'key' within 1.5 s" in error.message
    assert "maxConcurrent" in error.message
    assert h.broker.snapshot()[0]["timedOut"] == 1
    h.done(held)  # the timed-out request is gone: nothing is granted to it later
    assert h.answers[waiting].granted is False


def test_the_permits_of_an_exited_agent_return_and_its_waits_are_dropped() -> None:
    h = Harness(key=ModelLimits(max_concurrent=1, pool="key"))
    held = h.ask("crashy")
    also_crashy = h.ask("crashy")
    other = h.ask("b")
    assert h.granted(held)
    h.broker.agent_exited("crashy")
    assert h.granted(other)  # the head of the queue was crashy's: dropped, b goes
    assert also_crashy not in h.answers
    row = h.broker.snapshot()[0]
    assert (row["inUse"], row["waiting"]) == (1, 0)


def test_a_request_given_up_by_its_agent_leaves_the_queue() -> None:
    h = Harness(key=ModelLimits(max_concurrent=1, pool="key"))
    held, abandoned, next_one = h.ask("a"), h.ask("b"), h.ask("c")
    h.done(abandoned, "b", used=(0, 0))  # b's Turn was cancelled while it waited
    h.done(held)
    assert abandoned not in h.answers
    assert h.granted(next_one)


def test_a_trace_over_its_budget_is_refused_before_any_wait() -> None:
    h = Harness(budgets={"front": {"totalTokens": 100}})
    first = h.ask("front", pool="")
    assert h.granted(first)
    h.done(first, "front", pool="", used=(70, 40))
    assert [e for e in h.events if e["type"] == "budget.exceeded"] == []
    refused = h.ask("back", pool="")  # another agent of the same trace
    assert h.refused(refused) == "E_BUDGET_EXCEEDED"
    exceeded = [e for e in h.events if e["type"] == "budget.exceeded"]
    assert exceeded == [
        {
            "type": "budget.exceeded",
            "agent": "back",
            "instanceKey": "default",
            "traceId": TRACE,
            "budget": "trace",
            "root": "front",
            "figure": "totalTokens",
            "used": 110,
            "limit": 100,
        }
    ]
    error = h.answers[refused].error
    assert error is not None
    assert error.message.startswith("trace budget exceeded: totalTokens 110 of 100")
    assert error.details["figure"] == "totalTokens"
    other_trace = h.ask("front", pool="", trace="u" * 32)
    assert h.granted(other_trace)


def test_a_trace_gets_the_budget_of_the_agent_it_entered_at() -> None:
    h = Harness(budgets={"front": {"cost": 1.0}, "back": {"totalTokens": 1}})
    first = h.ask("front", pool="")
    h.done(first, "front", pool="", used=(500, 500))
    second = h.ask("back", pool="")
    assert h.granted(second)  # back's own (tiny) budget is for requests entering at back
    assert h.broker.usage.traces[TRACE].limits == {"cost": 1.0}


def test_a_queued_request_of_a_trace_that_ran_out_meanwhile_is_refused_at_its_turn() -> None:
    h = Harness(budgets={"a": {"inputTokens": 50}}, key=ModelLimits(max_concurrent=1, pool="key"))
    held = h.ask("a")
    waiting = h.ask("a")
    h.done(held, used=(60, 0))
    assert h.refused(waiting) == "E_BUDGET_EXCEEDED"


def test_an_edited_pool_keeps_its_permits_and_takes_the_new_figures() -> None:
    h = Harness(key=ModelLimits(max_concurrent=1, pool="key"))
    held, waiting = h.ask(), h.ask()
    h.broker.configure({"key": ModelLimits(max_concurrent=2, pool="key")})
    assert h.granted(waiting)
    assert h.broker.snapshot()[0]["inUse"] == 2
    assert h.granted(held)


@pytest.mark.parametrize("pool", ["", "unknown"])
def test_a_call_without_a_known_pool_is_granted_at_once(pool: str) -> None:
    h = Harness(key=ModelLimits(max_concurrent=1, pool="key"))
    assert h.granted(h.ask(pool=pool))


def test_usage_adds_up_per_agent_and_trace() -> None:
    h = Harness(key=ModelLimits(max_concurrent=4, pool="key"))
    h.done(h.ask("a"), "a", used=(100, 20))
    h.done(h.ask("b"), "b", used=(50, 10))
    book = h.broker.usage.snapshot()
    assert book["total"]["totalTokens"] == 180
    assert book["total"]["calls"] == 2
    assert book["agents"]["a"]["inputTokens"] == 100
    assert book["traces"][0]["usage"]["totalTokens"] == 180
    assert book["traces"][0]["agents"] == ["a", "b"]


def test_the_calls_of_agents_that_ask_no_permits_are_counted_from_their_steps() -> None:
    h = Harness()

    def step(agent: str, **usage: Any) -> dict[str, Any]:
        return {
            "type": "step.completed",
            "agentName": agent,
            "instanceKey": "u1",
            "traceId": TRACE,
            "tokenUsage": usage,
        }

    h.broker.observe(read_event(step("quiet", promptTokens=40, completionTokens=2, cost=0.5)))
    h.broker.observe(read_event(step("loud", promptTokens=999, completionTokens=9)))  # its own
    h.broker.observe(read_event({"type": "step.failed", "agentName": "quiet", "tokenUsage": None}))
    book = h.broker.usage.snapshot()
    assert book["agents"] == {
        "quiet": {
            "inputTokens": 40,
            "outputTokens": 2,
            "totalTokens": 42,
            "cost": 0.5,
            "calls": 1,
        }
    }
    assert book["traces"][0]["usage"]["calls"] == 1


def test_calls_of_one_trace_in_several_agents_reserve_against_its_budget() -> None:
    h = Harness(budgets={"front": {"totalTokens": 600}})
    h.done(h.ask("front", pool=""), "front", pool="", used=(30, 20))
    # Each worker call may take 150 in and 60 out: two fit beside the 50 used, not three.
    first = h.ask("w1", pool="", tokens=150, out=60)
    second = h.ask("w2", pool="", tokens=150, out=60)
    third = h.ask("w3", pool="", tokens=150, out=60)
    assert h.granted(first)
    assert h.granted(second)
    assert h.refused(third) == "E_BUDGET_EXCEEDED"
    assert h.reserved() == {
        "inputTokens": 300,
        "outputTokens": 120,
        "totalTokens": 420,
        "cost": 0,
        "calls": 2,
    }
    error = h.answers[third].error
    assert error is not None
    assert error.message == (
        "trace budget exceeded: totalTokens 50 of 600 used by this request across the swarm, "
        "420 more is reserved by calls not yet settled, and this call may take up to 210 (the "
        "trace budget of 'front'); the model was not called"
    )
    assert (error.details["reserved"], error.details["needed"]) == (420, 210)
    [event] = [e for e in h.events if e["type"] == "budget.exceeded"]
    assert (event["agent"], event["used"], event["reserved"], event["needed"]) == (
        "w3",
        50,
        420,
        210,
    )
    # 140 more does not fit beside 50 used and 420 reserved...
    assert h.refused(h.ask("w4", pool="", tokens=100, out=40)) == "E_BUDGET_EXCEEDED"
    # ... but does once the first call settles with 200 of its 210: the unused 10 came back.
    h.done(first, "w1", pool="", used=(150, 50))
    assert h.broker.usage.traces[TRACE].usage.total_tokens == 250
    reserved = h.reserved()
    assert reserved is not None
    assert (reserved["totalTokens"], reserved["calls"]) == (210, 1)
    assert h.granted(h.ask("w4", pool="", tokens=100, out=40))


def test_a_call_using_more_than_it_reserved_is_charged_the_excess() -> None:
    h = Harness(budgets={"front": {"outputTokens": 100}})
    call = h.ask("front", pool="", tokens=10, out=60)
    h.done(call, "front", pool="", used=(10, 130))  # a provider that ignored maxTokens
    assert h.reserved() is None
    refused = h.ask("front", pool="", tokens=10, out=1)
    error = h.answers[refused].error
    assert error is not None
    assert error.message.startswith(
        "trace budget exceeded: outputTokens 130 of 100 used by this request across the swarm "
        "(the trace"
    )


def test_a_cost_budget_holds_the_reserved_cost() -> None:
    h = Harness(budgets={"front": {"cost": 0.01}})
    assert h.granted(h.ask("front", pool="", tokens=100, out=100, cost=0.006))
    assert h.refused(h.ask("front", pool="", tokens=100, out=100, cost=0.006)) == (
        "E_BUDGET_EXCEEDED"
    )


def test_a_call_that_failed_or_never_started_frees_its_reservation() -> None:
    h = Harness(budgets={"a": {"totalTokens": 300}}, key=ModelLimits(max_concurrent=1, pool="key"))
    held = h.ask(tokens=100, out=100)
    waiting = h.ask(tokens=50, out=50, wait_ms=1000)
    assert h.reserved() == {
        "inputTokens": 150,
        "outputTokens": 150,
        "totalTokens": 300,
        "cost": 0,
        "calls": 2,
    }
    h.clock.advance(1.5)  # the waiting one times out in the queue
    assert h.refused(waiting) == "E_MODEL_PERMIT_TIMEOUT"
    reserved = h.reserved()
    assert reserved is not None
    assert (reserved["totalTokens"], reserved["calls"]) == (200, 1)
    h.done(held, used=(0, 0))  # the call failed: nothing used, all of it back
    assert h.reserved() is None
    given_up = h.ask(tokens=100, out=100)
    assert h.granted(given_up)
    queued = h.ask(tokens=100, out=100)
    h.done(queued, used=(0, 0))  # its agent gave up waiting
    assert h.reserved() is not None
    h.done(given_up, used=(0, 0))
    assert h.reserved() is None
    assert h.granted(h.ask(tokens=150, out=150))  # the whole budget is free again


def test_an_exited_agent_keeps_the_reservations_of_the_calls_it_started() -> None:
    h = Harness(budgets={"a": {"totalTokens": 1000}}, key=ModelLimits(max_concurrent=1, pool="key"))
    h.ask("a", tokens=100, out=100)
    h.ask("a", tokens=300, out=100)  # waits for the pool
    h.ask("b", pool="", tokens=50, out=50)
    h.broker.agent_exited("a")
    # What a's call under way used is unknown: its 200 stay held; its waiting 400 do not.
    reserved = h.reserved()
    assert reserved is not None
    assert (reserved["totalTokens"], reserved["calls"]) == (300, 2)
    assert h.broker.snapshot()[0]["inUse"] == 0  # the pool's permit came back all the same
