"""Budgets and shared rate limits around every model call of one agent.

Before a model call the governor

1. holds the Turn's and the conversation instance's usage against their budgets
   (``Agent.spec.budgets`` over ``Swarm.spec.budgets``): a ceiling reached ends the Turn with
   ``E_BUDGET_EXCEEDED`` naming the budget and its figures, and the model is not called;
2. when the Model has ``spec.limits`` or a trace budget applies, asks the Orchestrator for a
   permit (``model_permit``), which may wait for the pool's limits, and may be refused
   ``E_BUDGET_EXCEEDED`` (the trace's budget) or ``E_MODEL_PERMIT_TIMEOUT``.

After it, the call's tokens (and cost, by the Model's ``pricing``) are added to the Turn and the
instance and, for an agent that asks permits, reported to the Orchestrator at once
(``model_usage``), which returns the permit. A 429 from
the provider of a Model with limits is reported with its ``retry-after``, which pauses every
agent of the pool, and the call is tried again through a new permit, up to ``maxRetries`` times.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import ipc
from agent_process.models.base import (
    RATE_LIMITED,
    ChatModel,
    ModelError,
    ModelRequest,
    ModelResponse,
)
from agent_process.runtime import OrchestratorLink
from agent_process.scope import TurnScope
from agent_process.tools.catalog import ToolCatalogItem
from bundle.plan import AgentPlan
from goondan.defaults import ANSWER_SAFETY_MARGIN_SECONDS
from goondan.usage import Reached, first_reached
from ipc import protocol as wire
from ipc.protocol import ORCHESTRATOR, DelegateAnswer, ModelPermitResult
from tools_base import Message

FALLBACK_PAUSE_SECONDS = 1.0
"""A 429 without ``retry-after`` pauses the pool this long, doubling with each retry."""
CHARS_PER_TOKEN = 4
"""The estimate of a call's input tokens, made before it for ``tokensPerMinute``."""


class ModelGovernor:
    """The budgets and permits of one agent's model calls (see the module docstring)."""

    def __init__(self, plan: AgentPlan, link: OrchestratorLink | None = None) -> None:
        self.agent_name = plan.agent_name
        self.model = plan.model
        self.pool = plan.model.pool or ""
        self.link = link
        self.asks = plan.ask_permits and link is not None
        budgets = plan.budgets
        self.turn_limits = budgets.turn.limits() if budgets.turn is not None else {}
        self.instance_limits = budgets.instance.limits() if budgets.instance is not None else {}
        limits = plan.model.limits
        self.estimates = limits is not None and limits.tokens_per_minute is not None
        self.wait_ms = int(plan.model.timeout_seconds * 1000)
        self.on_instance_usage: Callable[[str], None] | None = None
        """Called with the instance key after each call adds to its usage, when an instance
        budget holds it (the instance manager writes it to ``metadata.json`` at once; without
        one, the Turn's end writes it)."""
        self.flush: Callable[[], None] | None = None
        """Writes out what is queued for the Orchestrator now. A permit goes back the moment
        its call ends, not when the Turn next yields (after its fsync, say): a pool of
        ``maxConcurrent: 1`` must not stay taken while this agent writes to disk."""

    async def complete(
        self, model: ChatModel, request: ModelRequest, turn: TurnScope
    ) -> ModelResponse:
        """``model.complete(request)`` inside the budgets and limits; raises ``ModelError``
        (``E_BUDGET_EXCEEDED``, ``E_MODEL_PERMIT_TIMEOUT``, or the provider's)."""
        self._check_budgets(turn)
        estimate = _estimate_tokens(request.messages, request.tools) if self.estimates else 0
        retries = 0
        while True:
            permit_id = await self._permit(turn, estimate) if self.asks else ""
            try:
                response = await model.complete(request)
            except ModelError as exc:
                pause = self._pause_for(exc, retries)
                self._report(turn, permit_id, 0, 0, 0.0, pause)
                if pause is not None and retries < self.model.max_retries:
                    retries += 1
                    turn.logger.warning(
                        "model rate limited; pool paused, retrying",
                        pool=self.pool,
                        pause_seconds=pause,
                        retry=retries,
                    )
                    if not self.asks:  # no Orchestrator holds the pool: wait here instead
                        await asyncio.sleep(pause)
                    continue
                raise
            except BaseException:  # cancelled: the permit goes back, nothing was used
                self._report(turn, permit_id, 0, 0, 0.0)
                raise
            return self._settle(turn, permit_id, response)

    # -- budgets ---------------------------------------------------------------------------

    def _check_budgets(self, turn: TurnScope) -> None:
        for budget, limits, used, whose in (
            ("turn", self.turn_limits, turn.usage, "this Turn"),
            (
                "instance",
                self.instance_limits,
                turn.instance_usage,
                f"conversation instance {turn.instance_key!r}",
            ),
        ):
            reached = first_reached(limits, used) if limits else None
            if reached is not None:
                raise self._exceeded(turn, budget, whose, reached)

    def _exceeded(self, turn: TurnScope, budget: str, whose: str, reached: Reached) -> ModelError:
        turn.recorder.emit(
            "budget.exceeded",
            turn.span_id,
            turn.parent_span_id,
            turnId=turn.turn_id,
            budget=budget,
            figure=reached.figure,
            used=reached.used,
            limit=reached.limit,
        )
        turn.logger.warning(
            "budget exceeded", budget=budget, figure=reached.figure, used=reached.used
        )
        return ModelError(
            f"{budget} budget exceeded: {reached.describe()} used by {whose} of "
            f"{self.agent_name!r}; the model was not called",
            code=ipc.BudgetExceeded.code,
        )

    # -- permits ---------------------------------------------------------------------------

    async def _permit(self, turn: TurnScope, estimate: int) -> str:
        """A permit's id, once the Orchestrator grants it."""
        link = self.link
        assert link is not None
        correlation_id, future = link.correlations.create()
        question = wire.ModelPermitRequest(
            self.pool, turn.trace_id, turn.instance_key, estimate, self.wait_ms
        )
        link.send(wire.event(self.agent_name, ORCHESTRATOR, question, correlation_id))
        try:
            # The Orchestrator answers by the wait's end; a little more guards against one
            # that vanished.
            async with asyncio.timeout(self.wait_ms / 1000 + ANSWER_SAFETY_MARGIN_SECONDS):
                answer = await future
        except BaseException as exc:
            # Given up (timed out, or the Turn was cancelled): out of the queue, or, if granted
            # meanwhile, back to the pool.
            link.correlations.forget(correlation_id)
            self._report(turn, correlation_id, 0, 0, 0.0)
            if isinstance(exc, TimeoutError):
                raise ModelError(
                    f"the Orchestrator answered no permit request of Model/{self.model.name} "
                    f"within {self.wait_ms / 1000:g} s",
                    code=ipc.PermitTimeout.code,
                ) from None
            raise
        if isinstance(answer, DelegateAnswer):  # the agent stops: every question is failed
            error = answer.error
            raise ModelError(
                error.message if error else "no permit", code=error.code if error else None
            )
        if not isinstance(answer, ModelPermitResult):
            raise ModelError("unexpected answer to a permit request", code="E_INTERNAL")
        if answer.error is not None:
            raise ModelError(answer.error.message, code=answer.error.code)
        if answer.waited_ms:
            turn.logger.info("model permit granted after a wait", waited_ms=answer.waited_ms)
        return correlation_id

    def _pause_for(self, exc: ModelError, retries: int) -> float | None:
        """How long a 429 pauses the pool (``None``: not a 429 of a Model with limits)."""
        if exc.code != RATE_LIMITED or not self.pool:
            return None
        if exc.retry_after is not None:
            return float(exc.retry_after)
        return FALLBACK_PAUSE_SECONDS * float(1 << retries)

    # -- usage -----------------------------------------------------------------------------

    def _settle(self, turn: TurnScope, permit_id: str, response: ModelResponse) -> ModelResponse:
        usage = response.usage
        input_tokens = usage.prompt_tokens if usage is not None else 0
        output_tokens = usage.completion_tokens if usage is not None else 0
        pricing = self.model.pricing
        cost = pricing.cost(input_tokens, output_tokens) if pricing is not None else 0.0
        turn.usage.add(input_tokens, output_tokens, cost)
        turn.instance_usage.add(input_tokens, output_tokens, cost)
        if self.instance_limits and self.on_instance_usage is not None:
            self.on_instance_usage(turn.instance_key)
        self._report(turn, permit_id, input_tokens, output_tokens, cost)
        if usage is not None and pricing is not None:
            response = replace(response, usage=replace(usage, cost=cost))
        return response

    def _report(
        self,
        turn: TurnScope,
        permit_id: str,
        input_tokens: int,
        output_tokens: int,
        cost: float,
        pause: float | None = None,
    ) -> None:
        """Tell the Orchestrator what a call used; it takes the permit back. Only an agent that
        asks permits reports: the Orchestrator counts the others' calls from their
        ``step.completed`` events, so a call without limits costs no message of its own."""
        if self.link is None or not self.asks:
            return
        report = wire.ModelUsage(
            turn.trace_id,
            turn.instance_key,
            permit_id,
            self.pool,
            input_tokens,
            output_tokens,
            cost,
            round(pause * 1000) if pause is not None else None,
        )
        try:
            self.link.send(wire.event(self.agent_name, ORCHESTRATOR, report))
            if permit_id and self.flush is not None:
                self.flush()
        except Exception as exc:  # the Orchestrator is gone; nothing holds the permit now
            turn.logger.debug("model usage not reported", error=str(exc))


def _estimate_tokens(messages: Sequence[Message], tools: Sequence[ToolCatalogItem]) -> int:
    """Input tokens of a call, roughly (characters / 4), before it is made."""
    chars = 0
    for message in messages:
        chars += len(message.content or "")
        if message.tool_result is not None:
            chars += len(_json(message.tool_result))
        for call in message.tool_calls:
            chars += len(call.name) + len(_json(call.args))
    for tool in tools:
        chars += len(tool.name) + len(tool.description or "") + len(_json(tool.parameters))
    return chars // CHARS_PER_TOKEN + 1


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
