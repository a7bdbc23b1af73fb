"""Budgets and shared rate limits around every model call of one agent.

Before a model call the governor

1. reserves what the call may use: its prompt's estimate (characters / 4) in, its ``maxTokens``
   (or :data:`~goondan.defaults.MODEL_MAX_TOKENS`) out, and their price. The reservation must fit
   under the Turn's and the conversation instance's budgets (``Agent.spec.budgets`` over
   ``Swarm.spec.budgets``) beside what they used and what the calls under way hold; if it does
   not, the Turn ends with ``E_BUDGET_EXCEEDED`` naming the budget and its figures, and the
   model is not called;
2. when the Model has ``spec.limits`` or a trace budget applies, asks the Orchestrator for a
   permit (``model_permit``, carrying the reservation for the trace's budget), which may wait
   for the pool's limits, and may be refused ``E_BUDGET_EXCEEDED`` (the trace's budget) or
   ``E_MODEL_PERMIT_TIMEOUT``.

After it, the reservation is given back and the call's tokens (and cost, by the Model's
``pricing``, else the genai-prices catalogue: :mod:`bundle.prices`) are added to the Turn and
the instance instead; a call that failed or was given up gives its reservation back whole. An
agent that asks permits reports the call to the Orchestrator at once (``model_usage``), which
settles the trace's reservation and returns the permit. A 429 from the provider of a Model
with limits is reported with its ``retry-after``, which pauses every agent of the pool, and the
call is tried again through a new permit, up to ``maxRetries`` times.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import ipc
from agent_process.link import OrchestratorLink
from agent_process.models.base import (
    RATE_LIMITED,
    ChatModel,
    ModelCallError,
    ModelRequest,
    ModelResponse,
)
from agent_process.scope import TurnScope
from agent_process.tools.catalog import ToolCatalogItem
from bundle.plan import AgentPlan
from bundle.prices import ModelPrice, model_price
from goondan.defaults import ANSWER_SAFETY_MARGIN_SECONDS, MODEL_MAX_TOKENS
from goondan.errors import DeliveryCode
from goondan.usage import NOTHING, Reached, Usage, first_short
from ipc import build
from ipc.delegation import DelegateAnswer
from ipc.events import ModelUsage
from ipc.protocol import ORCHESTRATOR
from ipc.questions import ModelPermitRequest, ModelPermitResult
from ipc.runtime_events import BudgetExceededEvent
from tools_base import Message

FALLBACK_PAUSE_SECONDS = 1.0
"""A 429 without ``retry-after`` pauses the pool this long, doubling with each retry."""
CHARS_PER_TOKEN = 4
"""The estimate of a call's input tokens, made before it for budgets and ``tokensPerMinute``."""


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
        self.trace_budgets = plan.trace_budgets and self.asks
        self.reserves = bool(self.turn_limits or self.instance_limits or self.trace_budgets)
        """Calls reserve their tokens: some budget may hold them."""
        self.estimates = self.reserves or bool(limits and limits.tokens_per_minute)
        self.sizes = PromptSizes()
        self._held: dict[tuple[str, str], Usage] = {}
        """The reservations of the calls under way, by scope: ``("turn", turn id)`` and
        ``("instance", instance key)``; a scope leaves once its last call settles."""
        self.wait_ms = int(plan.model.timeout_seconds * 1000)
        self.on_instance_usage: Callable[[str], None] | None = None
        """Called with the instance key after each call adds to its usage, when an instance
        budget holds it (the instance manager writes it to ``metadata.json`` at once; without
        one, the Turn's end writes it)."""
        self.flush: Callable[[], None] | None = None
        """Writes out what is queued for the Orchestrator now. A permit goes back the moment
        its call ends, not when the Turn next yields (after its fsync, say): a pool of
        ``maxConcurrent: 1`` must not stay taken while this agent writes to disk."""

    @functools.cached_property
    def price(self) -> ModelPrice | None:
        """What the Model's calls cost: its ``pricing``, else the catalogue's, else ``None``.

        Looked up at the first call, so an agent that never calls its model never loads the
        catalogue."""
        return model_price(self.model, self.model.base_url)

    async def complete(
        self, model: ChatModel, request: ModelRequest, turn: TurnScope
    ) -> ModelResponse:
        """``model.complete(request)`` inside the budgets and limits; raises ``ModelCallError``
        (``E_BUDGET_EXCEEDED``, ``E_MODEL_PERMIT_TIMEOUT``, or the provider's)."""
        call = self._reservation(turn.instance_key, request) if self.estimates else NOTHING
        if self.reserves:
            self._hold(turn, call)
        try:
            # Settled in _attempts and released here with no await between: no other call
            # sees the usage counted and the reservation still held.
            return await self._attempts(model, request, turn, call)
        finally:
            if self.reserves:
                self._release(turn, call)

    async def _attempts(
        self, model: ChatModel, request: ModelRequest, turn: TurnScope, call: Usage
    ) -> ModelResponse:
        """The call, each attempt under a permit when the pool is shared, tried again after a
        429 while the Model's retries last."""
        retries = 0
        while True:
            permit_id = await self._permit(turn, call) if self.asks else ""
            try:
                response = await model.complete(request)
            except ModelCallError as exc:
                pause = self._pause_for(exc, retries)
                self._report(turn, permit_id, 0, 0, 0.0, pause)
                if pause is None or retries >= self.model.max_retries:
                    raise
                retries += 1
                await self._rate_limited(turn, pause, retries)
                continue
            except BaseException:  # cancelled: the permit goes back, nothing was used
                self._report(turn, permit_id, 0, 0, 0.0)
                raise
            return self._settle(turn, permit_id, response)

    async def _rate_limited(self, turn: TurnScope, pause: float, retries: int) -> None:
        turn.logger.warning(
            "model rate limited; pool paused, retrying",
            pool=self.pool,
            pause_seconds=pause,
            retry=retries,
        )
        if not self.asks:  # no Orchestrator holds the pool: wait here instead
            await asyncio.sleep(pause)

    # -- budgets ---------------------------------------------------------------------------

    def _reservation(self, instance_key: str, request: ModelRequest) -> Usage:
        """What the call may use: its prompt's estimate in, its ``maxTokens`` out, their
        price."""
        input_tokens = self.sizes.tokens(instance_key, request.messages, request.tools)
        output_tokens = request.max_tokens or MODEL_MAX_TOKENS
        price = self.price
        cost = price.cost(input_tokens, output_tokens) if price is not None else 0.0
        return Usage(input_tokens, output_tokens, cost, 1)

    def _scopes(self, turn: TurnScope) -> tuple[tuple[str, dict[str, float], Usage, str], ...]:
        """``(budget, ceilings, used, key)`` of the scopes the agent holds to a budget."""
        scopes: tuple[tuple[str, dict[str, float], Usage, str], ...] = ()
        if self.turn_limits:
            scopes += (("turn", self.turn_limits, turn.usage, turn.turn_id),)
        if self.instance_limits:
            scopes += (("instance", self.instance_limits, turn.instance_usage, turn.instance_key),)
        return scopes

    def _hold(self, turn: TurnScope, call: Usage) -> None:
        """Reserve ``call`` in the Turn's and the instance's budgets, or raise
        ``E_BUDGET_EXCEEDED`` (holding nothing) if it does not fit in one of them."""
        scopes = self._scopes(turn)
        for budget, limits, used, key in scopes:
            short = first_short(limits, used, self._held.get((budget, key), NOTHING), call)
            if short is not None:
                raise self._exceeded(turn, budget, short)
        for budget, _, _, key in scopes:
            self._held.setdefault((budget, key), Usage()).hold(call)

    def _release(self, turn: TurnScope, call: Usage) -> None:
        for budget, _, _, key in self._scopes(turn):
            held = self._held.get((budget, key))
            if held is not None:
                held.release(call)
                if not held.calls:
                    del self._held[(budget, key)]

    def _exceeded(self, turn: TurnScope, budget: str, reached: Reached) -> ModelCallError:
        whose = "this Turn" if budget == "turn" else f"conversation instance {turn.instance_key!r}"
        figures = reached.to_json()
        exceeded = BudgetExceededEvent.of(reached, budget)
        exceeded.turn_id = turn.turn_id
        turn.recorder.emit(exceeded, turn.span_id, turn.parent_span_id)
        turn.logger.warning("budget exceeded", budget=budget, **figures)
        return ModelCallError(
            f"{budget} budget exceeded: {reached.describe()} used by {whose} of "
            f"{self.agent_name!r}{reached.shortfall()}; the model was not called",
            code=ipc.BudgetExceeded.code,
        )

    # -- permits ---------------------------------------------------------------------------

    async def _permit(self, turn: TurnScope, call: Usage) -> str:
        """A permit's id, once the Orchestrator grants it (and has reserved ``call`` against
        the trace's budget, when one applies)."""
        link = self.link
        assert link is not None
        correlation_id, future = link.correlations.create()
        question = ModelPermitRequest(
            self.pool,
            turn.trace_id,
            turn.instance_key,
            call.input_tokens,
            self.wait_ms,
            call.output_tokens if self.trace_budgets else 0,
            call.cost if self.trace_budgets else 0.0,
        )
        link.send(build.event(self.agent_name, ORCHESTRATOR, question, correlation_id))
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
                raise ModelCallError(
                    f"the Orchestrator answered no permit request of Model/{self.model.name} "
                    f"within {self.wait_ms / 1000:g} s",
                    code=ipc.PermitTimeout.code,
                ) from None
            raise
        waited_ms = _granted(answer).waited_ms
        if waited_ms:
            turn.logger.info("model permit granted after a wait", waited_ms=waited_ms)
        return correlation_id

    def _pause_for(self, exc: ModelCallError, retries: int) -> float | None:
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
        price = self.price
        cost = price.cost(input_tokens, output_tokens) if price is not None else 0.0
        turn.usage.add(input_tokens, output_tokens, cost)
        turn.instance_usage.add(input_tokens, output_tokens, cost)
        if self.instance_limits and self.on_instance_usage is not None:
            self.on_instance_usage(turn.instance_key)
        self._report(turn, permit_id, input_tokens, output_tokens, cost)
        if usage is not None and price is not None:
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
        report = ModelUsage(
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
            self.link.send(build.event(self.agent_name, ORCHESTRATOR, report))
            if permit_id and self.flush is not None:
                self.flush()
        except Exception as exc:  # the Orchestrator is gone; nothing holds the permit now
            turn.logger.debug("model usage not reported", error=str(exc))


class PromptSizes:
    """The input tokens of a model call, estimated before it: characters / 4 of its messages
    and tool definitions.

    A conversation sends the same messages and tool definitions (frozen objects) again at every
    Step; their sizes are remembered per object, so a Step measures only what is new instead of
    writing every tool schema and tool result out as JSON again. Each instance keeps the sizes
    of the messages its last call sent, for the :data:`INSTANCES_KEPT` most recent instances.
    """

    INSTANCES_KEPT = 64

    def __init__(self) -> None:
        self._tools: dict[str, tuple[ToolCatalogItem, int]] = {}
        self._messages: OrderedDict[str, dict[str, tuple[Message, int]]] = OrderedDict()

    def tokens(
        self, instance_key: str, messages: Sequence[Message], tools: Sequence[ToolCatalogItem]
    ) -> int:
        """The estimate for a call of ``instance_key`` sending ``messages`` and ``tools``."""
        known = self._messages.pop(instance_key, None) or {}
        sent: dict[str, tuple[Message, int]] = {}
        chars = 0
        for message in messages:
            size = known.get(message.id)
            if size is None or size[0] is not message:
                size = (message, _message_chars(message))
            sent[message.id] = size
            chars += size[1]
        self._messages[instance_key] = sent
        if len(self._messages) > self.INSTANCES_KEPT:
            self._messages.popitem(last=False)
        for tool in tools:
            known_tool = self._tools.get(tool.name)
            if known_tool is None or known_tool[0] is not tool:
                known_tool = self._tools[tool.name] = (tool, _tool_chars(tool))
            chars += known_tool[1]
        return chars // CHARS_PER_TOKEN + 1


def _message_chars(message: Message) -> int:
    chars = len(message.content or "")
    if message.tool_result is not None:
        chars += len(_json(message.tool_result))
    for call in message.tool_calls:
        chars += len(call.name) + len(_json(call.args))
    return chars


def _tool_chars(tool: ToolCatalogItem) -> int:
    return len(tool.name) + len(tool.description or "") + len(_json(tool.parameters))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _granted(answer: object) -> ModelPermitResult:
    """The answer to a permit request when it grants the permit; else its ``ModelCallError``
    is raised."""
    if isinstance(answer, DelegateAnswer):  # the agent stops: every question is failed
        error = answer.error
        raise ModelCallError(
            error.message if error else "no permit", code=error.code if error else None
        )
    if not isinstance(answer, ModelPermitResult):
        raise ModelCallError("unexpected answer to a permit request", code=DeliveryCode.E_INTERNAL)
    if answer.error is not None:
        raise ModelCallError(answer.error.message, code=answer.error.code)
    return answer
