"""Shared rate limits and trace budgets: the permit an agent needs before each model call.

Agents run in processes of their own, so no limiter inside one of them can keep fifteen agents
on one provider key under its rate limit. The Orchestrator does it for them: an agent whose
Model declares ``spec.limits`` (or any agent, when a trace budget applies) asks for a permit
(``model_permit``) before each model call and reports the call's usage (``model_usage``) after
it, which returns the permit. Per pool (the Models sharing one provider key) the broker keeps

- the permits in use, against ``maxConcurrent``;
- a token bucket per minute figure: ``requestsPerMinute`` (one per call) and
  ``tokensPerMinute`` (a call is admitted on its estimated input tokens and settled with what it
  really used). A bucket holds up to one minute's figure and refills evenly;
- a pause: a provider's 429 with ``retry-after`` stops every grant of the pool for that long;
- a first-come, first-served queue of the requests that must wait. Each waits at most its own
  bound (the model call's timeout) and is then refused ``E_MODEL_PERMIT_TIMEOUT``.

Trace budgets hold under parallel calls by reservation: a request carries what its call may use
(its prompt's estimate, its ``maxTokens``, their price), and is refused ``E_BUDGET_EXCEEDED``
before any wait unless that fits under the trace's budget beside what the trace used and what its
other calls not yet settled reserved, whichever agents they run in. The reservation is held from
then on and settled by the call's ``model_usage`` (the unused part freed, any excess charged); a
request refused, timed out or given up frees it whole. When an agent exits, whatever it held or
waited for goes back to its pools at once; a reservation of a call it had started stays held,
since what that call used is unknown. Agents that ask no permits send no ``model_usage``; their
calls are counted from their ``step.completed`` events (:meth:`observe`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import structlog

from bundle.spec_agent import ModelLimits
from goondan.usage import Reached, Usage
from ipc import BudgetExceeded, EventMessage, PermitTimeout
from ipc.events import ModelUsage
from ipc.payload import EventBody
from ipc.protocol import EventKind
from ipc.questions import ModelPermitRequest, ModelPermitResult
from ipc.runtime_events import (
    AnyEvent,
    BudgetExceededEvent,
    ModelPermitEvent,
    ModelPermitGrantedEvent,
    ModelPermitTimeoutEvent,
    ModelPermitWaitingEvent,
    ModelRateLimitedEvent,
    RuntimeEvent,
)
from orchestrator.clock import Clock, Timer
from orchestrator.dispatch import EventHandler
from orchestrator.limits.usage import TraceUsage, UsageBook

WAIT_REASONS = ("paused", "maxConcurrent", "requestsPerMinute", "tokensPerMinute")
"""Why a permit request waits, in the order they are judged."""
SECONDS_PER_MINUTE = 60.0
PAUSE_GRAIN_SECONDS = 0.005
"""Added to a provider's ``Retry-After``: the event loop's clock counts whole milliseconds (and a
pause is timed twice on it, when it starts and when it ends), so without it the pool could
resume a few milliseconds before the provider's time is up."""

Reply = Callable[[str, str, EventBody], None]
"""``(agent, correlation id, answer)``: send an agent the answer to its permit request."""
Record = Callable[[RuntimeEvent, str], None]
"""``(event, agent)``: a runtime event about ``agent`` for the event log, stamped there."""


@dataclass(slots=True, eq=False)
class PermitRequest:
    """A request waiting in a pool's queue, or a permit in use."""

    permit_id: str
    agent: str
    request: ModelPermitRequest
    asked_at: float
    reason: str = ""
    """Why it waits now (one of :data:`WAIT_REASONS`)."""
    timer: Timer | None = field(default=None, repr=False)


class Hold(NamedTuple):
    """A call's reservation against its trace's budget, until the call is settled."""

    trace: TraceUsage
    call: Usage

    def release(self) -> None:
        """The call is settled or never made: its reservation no longer counts."""
        self.trace.reserved.release(self.call)


class RatePool:
    """One pool's limits and state (see the module docstring)."""

    def __init__(self, name: str, limits: ModelLimits, now: float) -> None:
        self.name = name
        self.limits = limits
        self.in_use: dict[str, PermitRequest] = {}
        self.waiting: deque[PermitRequest] = deque()
        self.requests_level = float(limits.requests_per_minute or 0)
        self.tokens_level = float(limits.tokens_per_minute or 0)
        self.refilled_at = now
        self.paused_until = 0.0
        self.granted = 0
        self.waited = 0
        """Grants that had to wait."""
        self.timed_out = 0
        self.pauses = 0
        self.wait_seconds = 0.0
        """Total time grants waited."""

    def adopt(self, limits: ModelLimits, now: float) -> None:
        """New figures (an edited goondan.yaml): buckets keep their level, capped by them."""
        self._refill(now)
        self.limits = limits
        if limits.requests_per_minute is not None:
            self.requests_level = min(self.requests_level, limits.requests_per_minute)
        if limits.tokens_per_minute is not None:
            self.tokens_level = min(self.tokens_level, float(limits.tokens_per_minute))

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.refilled_at)
        self.refilled_at = now
        rpm, tpm = self.limits.requests_per_minute, self.limits.tokens_per_minute
        if rpm is not None:
            self.requests_level = min(rpm, self.requests_level + elapsed * rpm / SECONDS_PER_MINUTE)
        if tpm is not None:
            self.tokens_level = min(tpm, self.tokens_level + elapsed * tpm / SECONDS_PER_MINUTE)

    def _tokens_needed(self, request: PermitRequest) -> float:
        tpm = self.limits.tokens_per_minute
        # A call larger than a whole minute's figure waits for a full bucket, not forever.
        return min(float(request.request.estimated_tokens), float(tpm)) if tpm else 0.0

    def blocked(self, request: PermitRequest, now: float) -> tuple[str, float | None] | None:
        """Why ``request`` cannot be granted now, and when that may change (``None``: when a
        permit comes back); ``None`` when it can."""
        self._refill(now)
        limits = self.limits
        if now < self.paused_until:
            return "paused", self.paused_until
        if limits.max_concurrent is not None and len(self.in_use) >= limits.max_concurrent:
            return "maxConcurrent", None
        rpm = limits.requests_per_minute
        if rpm is not None and self.requests_level < 1.0:
            return "requestsPerMinute", now + (1.0 - self.requests_level) * SECONDS_PER_MINUTE / rpm
        tpm = limits.tokens_per_minute
        need = self._tokens_needed(request)
        if tpm is not None and (self.tokens_level < need or self.tokens_level <= 0):
            missing = max(need, 1.0) - self.tokens_level
            return "tokensPerMinute", now + missing * SECONDS_PER_MINUTE / tpm
        return None

    def grant(self, request: PermitRequest) -> None:
        self.in_use[request.permit_id] = request
        if self.limits.requests_per_minute is not None:
            self.requests_level -= 1.0
        if self.limits.tokens_per_minute is not None:
            self.tokens_level -= float(request.request.estimated_tokens)
        self.granted += 1

    def settle(self, permit: PermitRequest, used_tokens: int, now: float) -> None:
        """A permit back: the tokens bucket takes the difference between estimate and use."""
        self.in_use.pop(permit.permit_id, None)
        tpm = self.limits.tokens_per_minute
        if tpm is not None:
            self._refill(now)
            correction = float(permit.request.estimated_tokens - used_tokens)
            self.tokens_level = min(float(tpm), self.tokens_level + correction)

    def pause(self, seconds: float, now: float) -> bool:
        """Stop granting for ``seconds``; ``False`` when an as long pause already runs."""
        until = now + seconds
        if until <= self.paused_until:
            return False
        self.paused_until = until
        self.pauses += 1
        return True

    def snapshot(self, now: float) -> dict[str, Any]:
        """A row of ``status`` / ``/v1/usage``."""
        self._refill(now)
        limits = self.limits
        row: dict[str, Any] = {
            "pool": self.name,
            "inUse": len(self.in_use),
            "waiting": len(self.waiting),
            "maxConcurrent": limits.max_concurrent,
            "requestsPerMinute": limits.requests_per_minute,
            "tokensPerMinute": limits.tokens_per_minute,
            "granted": self.granted,
            "waited": self.waited,
            "timedOut": self.timed_out,
            "pauses": self.pauses,
            "waitSeconds": round(self.wait_seconds, 3),
            "pausedForSeconds": round(max(0.0, self.paused_until - now), 3),
        }
        if limits.requests_per_minute is not None:
            row["requestsAvailable"] = round(max(0.0, self.requests_level), 3)
        if limits.tokens_per_minute is not None:
            row["tokensAvailable"] = round(self.tokens_level)
        return row


class ModelBroker:
    """Grants permits for model calls and counts what the calls used (see the module)."""

    def __init__(
        self,
        pools: Mapping[str, ModelLimits],
        *,
        usage: UsageBook,
        reply: Reply,
        record: Record,
        clock: Clock,
        reports: Callable[[str], bool] = lambda agent: True,
    ) -> None:
        self.clock = clock
        self.usage = usage
        self.reports = reports
        """Whether an agent reports its calls' usage itself (``model_usage``)."""
        self._reply = reply
        self._record = record
        self.pools: dict[str, RatePool] = {}
        self._timers: dict[str, Timer] = {}
        """A pool's wake-up, when its head waits for time to pass (a pause, a bucket)."""
        self._holds: dict[tuple[str, str], Hold] = {}
        """Reservations against trace budgets, by agent and permit id (an agent settles only
        its own), until their calls settle."""
        self.log = structlog.get_logger("goondan.limits")
        self.configure(pools)

    def configure(self, pools: Mapping[str, ModelLimits]) -> None:
        """Adopt the bundle's pools; a pool that stays keeps its permits and queue, one that
        went stays only until its last permit comes back."""
        now = self.clock.now()
        for name, limits in pools.items():
            pool = self.pools.get(name)
            if pool is None:
                self.pools[name] = RatePool(name, limits, now)
            else:
                pool.adopt(limits, now)
                self._serve(pool)
        for name in [n for n, p in self.pools.items() if n not in pools]:
            if not self.pools[name].in_use and not self.pools[name].waiting:
                del self.pools[name]

    # -- messages from agents -----------------------------------------------------------------

    @property
    def event_handlers(self) -> dict[EventKind, EventHandler]:
        """The event kinds the broker answers, for the Orchestrator's dispatch table."""
        return {
            EventKind.MODEL_PERMIT: self._permit_event,
            EventKind.MODEL_USAGE: self._usage_event,
        }

    def _permit_event(self, agent: str, message: EventMessage, body: ModelPermitRequest) -> None:
        self.permit_requested(agent, message.correlation_id, body)

    def _usage_event(self, agent: str, message: EventMessage, body: ModelUsage) -> None:
        self.usage_reported(agent, body)

    def permit_requested(
        self, agent: str, correlation_id: str | None, body: ModelPermitRequest
    ) -> None:
        """A ``model_permit``: answer at once, or queue it."""
        if not correlation_id:
            self.log.warning("permit request without a correlation id", agent=agent)
            return
        if body.trace_id:
            trace = self.usage.trace(body.trace_id, agent)
            if trace.limits:
                call = Usage(body.estimated_tokens, body.max_output_tokens, body.reserved_cost, 1)
                short = trace.short_of(call)
                if short is not None:
                    self._refuse_budget(agent, correlation_id, body, trace.root, short)
                    return
                trace.reserved.hold(call)
                self._holds[(agent, correlation_id)] = Hold(trace, call)
        pool = self.pools.get(body.pool) if body.pool else None
        if pool is None:
            # No limits to honour (or a pool this bundle no longer has): the trace budget was
            # all there was to check.
            self._reply(agent, correlation_id, ModelPermitResult())
            return
        now = self.clock.now()
        request = PermitRequest(correlation_id, agent, body, asked_at=now)
        if not pool.waiting and pool.blocked(request, now) is None:
            pool.grant(request)
            self._reply(agent, correlation_id, ModelPermitResult())
            return
        if body.wait_ms <= 0:
            self._time_out(pool, request, "no wait allowed")
            return
        pool.waiting.append(request)
        request.timer = self.clock.call_later(body.wait_ms / 1000, self._expired, pool, request)
        self._serve(pool)
        if request in pool.waiting:  # still waiting after the queue moved: say why
            request.reason = request.reason or pool.waiting[0].reason
            waiting = ModelPermitWaitingEvent(
                reason=request.reason,
                position=pool.waiting.index(request) + 1,
                in_use=len(pool.in_use),
            )
            self._note(waiting, agent, body, pool)

    def usage_reported(self, agent: str, body: ModelUsage) -> None:
        """A ``model_usage``: count it, settle its reservation, take the permit back, pause the
        pool on a 429."""
        self.usage.add(agent, body.trace_id, body.input_tokens, body.output_tokens, body.cost)
        if body.permit_id:
            self._free(agent, body.permit_id)
        pool = self.pools.get(body.pool) if body.pool else None
        if pool is None:
            return
        now = self.clock.now()
        if body.permit_id:
            self._give_back(pool, body.permit_id, body.input_tokens + body.output_tokens, now)
        if body.retry_after_ms is not None and body.retry_after_ms > 0:
            seconds = body.retry_after_ms / 1000
            if pool.pause(seconds + PAUSE_GRAIN_SECONDS, now):
                self.log.warning(
                    "provider rate limit: pool paused",
                    pool=pool.name,
                    agent=agent,
                    seconds=seconds,
                )
                limited = ModelRateLimitedEvent(retry_after_ms=body.retry_after_ms)
                self._note(limited, agent, body, pool)
        self._serve(pool)

    def observe(self, event: AnyEvent) -> None:
        """Take in a runtime event: the Turn that began a trace names its root, and a
        ``step.completed`` counts the model call of an agent that reports no usage of its own
        (one that asks no permits: no limits and no trace budget)."""
        self.usage.observe(event, count=lambda agent: not self.reports(agent))

    def agent_exited(self, agent: str) -> None:
        """Return every permit ``agent`` held and drop its waiting requests: a crashed agent
        reports nothing, and its pools must not shrink for it."""
        now = self.clock.now()
        for pool in self.pools.values():
            held = [p for p in pool.in_use.values() if p.agent == agent]
            gone = [r for r in pool.waiting if r.agent == agent]
            for request in gone:
                pool.waiting.remove(request)
                self._cancel_timer(request)
                self._free(agent, request.permit_id)
            for permit in held:
                # What it used is unknown: the estimate stays spent.
                pool.settle(permit, permit.request.estimated_tokens, now)
            if held or gone:
                self.log.info(
                    "permits of an exited agent returned",
                    agent=agent,
                    pool=pool.name,
                    returned=len(held),
                    dropped=len(gone),
                )
                self._serve(pool)
        # Its calls under way may have used their reservation: they keep it held, for good.
        for key in [key for key in self._holds if key[0] == agent]:
            del self._holds[key]

    # -- what status and metrics read -----------------------------------------------------------

    def waiting_by_agent(self) -> Counter[str]:
        """Permit requests waiting now, by agent (one pass over every queue)."""
        return Counter(r.agent for pool in self.pools.values() for r in pool.waiting)

    def snapshot(self) -> list[dict[str, Any]]:
        """One row per pool."""
        now = self.clock.now()
        return [pool.snapshot(now) for _, pool in sorted(self.pools.items())]

    def close(self) -> None:
        """Cancel the timers (the daemon stops; waiting agents are told by their own end)."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for pool in self.pools.values():
            for request in pool.waiting:
                self._cancel_timer(request)

    # -- the queue -----------------------------------------------------------------------------

    def _serve(self, pool: RatePool) -> None:
        """Grant from the head of ``pool``'s queue while it can; then sleep until the head may
        go (a pause or a bucket) or until a permit comes back."""
        timer = self._timers.pop(pool.name, None)
        if timer is not None:
            timer.cancel()
        now = self.clock.now()
        while pool.waiting:
            head = pool.waiting[0]
            if head.request.trace_id:
                trace = self.usage.traces.get(head.request.trace_id)
                if trace is not None and (reached := trace.reached()) is not None:
                    pool.waiting.popleft()
                    self._cancel_timer(head)
                    self._free(head.agent, head.permit_id)
                    self._refuse_budget(
                        head.agent, head.permit_id, head.request, trace.root, reached
                    )
                    continue
            blocked = pool.blocked(head, now)
            if blocked is not None:
                reason, at = blocked
                head.reason = reason
                if at is not None:
                    self._timers[pool.name] = self.clock.call_later(
                        max(at - now, 0.001), self._serve, pool
                    )
                return
            pool.waiting.popleft()
            self._cancel_timer(head)
            pool.grant(head)
            waited = now - head.asked_at
            pool.waited += 1
            pool.wait_seconds += waited
            waited_ms = round(waited * 1000)
            self._reply(head.agent, head.permit_id, ModelPermitResult(waited_ms))
            granted = ModelPermitGrantedEvent(waited_ms=waited_ms, reason=head.reason or None)
            self._note(granted, head.agent, head.request, pool)

    def _expired(self, pool: RatePool, request: PermitRequest) -> None:
        if request not in pool.waiting:
            return
        pool.waiting.remove(request)
        self._time_out(pool, request, request.reason or "waiting")
        self._serve(pool)  # the head may have been this one

    def _time_out(self, pool: RatePool, request: PermitRequest, reason: str) -> None:
        self._free(request.agent, request.permit_id)
        pool.timed_out += 1
        waited = self.clock.now() - request.asked_at
        bound = request.request.wait_ms / 1000
        error = PermitTimeout(
            f"no permit for a model call from pool {pool.name!r} within {bound:g} s "
            f"(the model call's timeout): it waited on {reason}",
            details={"pool": pool.name, "reason": reason, "waitedMs": round(waited * 1000)},
        )
        self._reply(
            request.agent, request.permit_id, ModelPermitResult(round(waited * 1000), error)
        )
        timeout = ModelPermitTimeoutEvent(reason=reason, waited_ms=round(waited * 1000))
        self._note(timeout, request.agent, request.request, pool)

    def _free(self, agent: str, permit_id: str) -> None:
        """``agent``'s call of ``permit_id`` is settled or will not be made: its reservation,
        if any, no longer counts."""
        hold = self._holds.pop((agent, permit_id), None)
        if hold is not None:
            hold.release()

    def _give_back(self, pool: RatePool, permit_id: str, used_tokens: int, now: float) -> None:
        permit = pool.in_use.get(permit_id)
        if permit is not None:
            pool.settle(permit, used_tokens, now)
            return
        # The agent gave up a request still waiting (its Turn was cancelled, or its own wait
        # ran out first): it leaves the queue.
        for request in pool.waiting:
            if request.permit_id == permit_id:
                pool.waiting.remove(request)
                self._cancel_timer(request)
                return

    def _note(
        self,
        event: ModelPermitEvent,
        agent: str,
        about: ModelPermitRequest | ModelUsage,
        pool: RatePool,
    ) -> None:
        """Record ``event`` about one model call of ``agent`` in ``pool``."""
        event.instance_key, event.trace_id = about.instance_key, about.trace_id or None
        event.pool = pool.name
        self._record(event, agent)

    @staticmethod
    def _cancel_timer(request: PermitRequest) -> None:
        if request.timer is not None:
            request.timer.cancel()
            request.timer = None

    def _refuse_budget(
        self,
        agent: str,
        correlation_id: str,
        body: ModelPermitRequest,
        root: str,
        reached: Reached,
    ) -> None:
        error = BudgetExceeded(
            f"trace budget exceeded: {reached.describe()} used by this request across the swarm"
            f"{reached.shortfall()} (the trace budget of {root!r}); the model was not called",
            details={"budget": "trace", "traceId": body.trace_id, **reached.to_json()},
        )
        self._reply(agent, correlation_id, ModelPermitResult(0, error))
        exceeded = BudgetExceededEvent.of(reached, "trace")
        exceeded.instance_key, exceeded.trace_id, exceeded.root = (
            body.instance_key,
            body.trace_id,
            root,
        )
        self._record(exceeded, agent)
