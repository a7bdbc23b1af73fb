"""``kind: Model``, ``kind: Tool`` and ``kind: Agent``, with the limits, prices, budgets and
tool policies an Agent's model calls and tool calls obey."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from bundle.env_names import EnvNames
from bundle.scripted import ScriptSpec
from bundle.spec_base import MAX_SECONDS, ObjectRef, RefItemLike, Spec, ValueSource
from goondan.defaults import (
    APPROVAL_TIMEOUT_SECONDS,
    ERROR_MESSAGE_LIMIT,
    MAX_BACKGROUND_CALLS_PER_INSTANCE,
    MAX_TOOL_CALLS_PER_STEP,
    MAX_TURN_ATTEMPTS,
)

Concurrency = Literal["enqueue", "reject", "interrupt"]
"""``policy.concurrency``: what a message for a conversation whose Turn is running does."""

CONCURRENCY_DESCRIPTION = (
    "A message for a conversation (instance) whose Turn is running: enqueue (waits; Turns "
    "of one instance run one after another), reject (refused at once with INSTANCE_BUSY, "
    "409 over HTTP) or interrupt (the running Turn stops at its next Step boundary and a new "
    "Turn answers both messages; each caller gets that answer)."
)

FrontDoor = Literal["openai", "mcp", "a2a", "agUi"]
"""A protocol the daemon serves agents through besides its own API: ``openai`` (Chat
Completions, the Responses API and their model list), ``mcp`` (an MCP server), ``a2a`` (A2A
agent cards and JSON-RPC) and ``agUi`` (AG-UI event streams)."""
FRONT_DOORS: tuple[FrontDoor, ...] = ("openai", "mcp", "a2a", "agUi")
MAX_DESCRIPTION_LENGTH = 4096

EXPORT_NAME = re.compile(r"^[a-z0-9_-]+$")
POOL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


class ModelLimits(Spec):
    """Rate limits one provider key imposes, shared by every agent process calling the Model.

    The Orchestrator keeps one set of buckets per pool and hands out a permit before each model
    call; a 429 from the provider pauses the whole pool for its ``retry-after``.
    """

    max_concurrent: int | None = Field(
        default=None, ge=1, le=100_000, description="Model calls under way at once, swarm-wide."
    )
    requests_per_minute: float | None = Field(
        default=None, gt=0, le=10_000_000, description="Model calls started per minute."
    )
    tokens_per_minute: int | None = Field(
        default=None,
        gt=0,
        description="Tokens (input plus output) per minute; a call is admitted on an estimate "
        "of its input and settled with the tokens it really used.",
    )
    pool: str | None = Field(
        default=None,
        pattern=POOL_NAME_PATTERN,
        description="Models naming the same pool share one set of limits (one provider key "
        "used by several Models); default: the Model's own name.",
    )

    FIGURES: ClassVar[tuple[str, ...]] = (
        "max_concurrent",
        "requests_per_minute",
        "tokens_per_minute",
    )
    """The limits proper (every field but ``pool``)."""


class ModelPricing(Spec):
    """What the Model's tokens cost, for cost budgets (any currency, the same everywhere)."""

    input_per_million_tokens: float = Field(ge=0, description="Price of 1,000,000 input tokens.")
    output_per_million_tokens: float = Field(ge=0, description="Price of 1,000,000 output tokens.")
    currency: str = Field(default="USD", min_length=1, description="A label for displays.")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The price of one call's tokens."""
        return (
            input_tokens * self.input_per_million_tokens
            + output_tokens * self.output_per_million_tokens
        ) / 1_000_000


class ModelSpec(Spec):
    """``kind: Model``: an LLM provider and model, or the offline `scripted` model."""

    provider: str = Field(
        min_length=1, description="`scripted` (offline), `openai`, `anthropic`, ..."
    )
    model: str = Field(min_length=1, description="The provider's model name.")
    api_key: ValueSource | None = Field(
        default=None, description="API key, e.g. {valueFrom: {env: OPENAI_API_KEY}}."
    )
    base_url: str | None = Field(
        default=None, description="Endpoint of an API-compatible server (Ollama, vLLM, ...)."
    )
    endpoint: str | None = Field(default=None, description="Alias of baseUrl (upstream name).")
    temperature: float | None = Field(default=None, ge=0, description="Sampling temperature.")
    max_tokens: int | None = Field(default=None, gt=0, description="Maximum output tokens.")
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=MAX_SECONDS, description="Per-call timeout."
    )
    max_retries: int | None = Field(default=None, ge=0, description="Retries on 429/5xx.")
    options: dict[str, Any] = Field(default_factory=dict, description="Provider options.")
    capabilities: dict[str, bool] = Field(default_factory=dict, description="Feature flags.")
    script: ScriptSpec | None = Field(
        default=None, description="Rules of the `scripted` provider (required for it)."
    )
    limits: ModelLimits | None = Field(
        default=None,
        description="Rate limits shared by every agent using this Model (or its pool).",
    )
    pricing: ModelPricing | None = Field(
        default=None, description="Token prices, needed by cost budgets."
    )

    @model_validator(mode="after")
    def _script_for_scripted(self) -> ModelSpec:
        if self.provider == "scripted" and self.script is None:
            raise ValueError("provider `scripted` needs `script` with at least one rule")
        return self


class ToolExport(Spec):
    """One function of a Tool; the model sees it as `{tool}__{export}`."""

    name: str = Field(description="Export name: lowercase letters, digits, `_` and `-`.")
    description: str | None = Field(default=None, description="What the model is told.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema (type: object) of the arguments.",
    )
    idempotent: bool | None = Field(
        default=None,
        description="This export may run twice with the same effect as once (default: the "
        "Tool's `idempotent`).",
    )

    @field_validator("name")
    @classmethod
    def _export_name(cls, value: str) -> str:
        if "__" in value:
            raise ValueError(f"export name {value!r} must not contain '__'")
        if not EXPORT_NAME.match(value):
            raise ValueError(f"export name {value!r} must match [a-z0-9_-]+")
        return value


class ToolSpec(Spec):
    """``kind: Tool``: a Python module whose `handlers` implement the exports."""

    entry: str = Field(description="Handler module, relative to the file that declares it.")
    error_message_limit: int = Field(
        default=ERROR_MESSAGE_LIMIT,
        ge=1,
        le=1_000_000,
        description="Characters kept of an error message (default 1000).",
    )
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=MAX_SECONDS, description="Handler timeout (default 300 s)."
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="Passed to the module's configure(config)."
    )
    sandboxed: bool = Field(
        default=False,
        description="Its handlers start programs in the tool sandbox: `run` refuses an agent "
        "holding it where no sandbox can be made (unless the Swarm's policy.sandbox is off).",
    )
    idempotent: bool = Field(
        default=False,
        description="Its calls may run twice with the same effect as once: a call the agent "
        "process died in is run again when the Turn resumes. Otherwise such a call is answered "
        "E_TOOL_INTERRUPTED (it may or may not have run) and never repeated.",
    )
    exports: list[ToolExport] = Field(min_length=1, description="At least one export.")
    env: EnvNames

    @model_validator(mode="before")
    @classmethod
    def _legacy_shape(cls, value: Any) -> Any:
        if isinstance(value, dict) and "exports" not in value:
            raise PydanticCustomError(
                "legacy_tool",
                "a Tool needs `exports`: legacy tool shapes without exports (top-level "
                "description/parameters and a default-exported function) are not supported",
            )
        return value


class ModelParams(Spec):
    """Per-agent model parameters; they override the Model's own. Other keys are kept as given."""

    model_config = ConfigDict(extra="allow")

    temperature: float | None = Field(
        default=None, ge=0, description="Sampling temperature (default: the Model's)."
    )
    max_tokens: int | None = Field(
        default=None, gt=0, description="Maximum output tokens (default: the Model's)."
    )


class ModelConfig(Spec):
    """Which Model an Agent uses, and with what parameters."""

    model_ref: ObjectRef = Field(description="The Model, e.g. Model/claude.")
    params: ModelParams = Field(
        default_factory=ModelParams, description="temperature, maxTokens, ... for this agent."
    )


class Prompt(Spec):
    """The agent's system prompt: inline, or from a file."""

    system: str | None = Field(default=None, description="System prompt text.")
    system_ref: str | None = Field(
        default=None, description="File with the system prompt, relative to the YAML file."
    )

    @model_validator(mode="after")
    def _not_both(self) -> Prompt:
        if self.system is not None and self.system_ref is not None:
            raise ValueError("give `system` or `systemRef`, not both")
        return self


class AgentLimits(Spec):
    """Resource limits of one AgentProcess."""

    memory_mib: int | None = Field(
        default=None,
        alias="memoryMiB",
        ge=128,
        le=1_048_576,
        description="Heap and thread memory of the agent process, in MiB: past it, allocations "
        "fail (a tool gets E_TOOL MemoryError; the agent itself exits with code 72).",
    )


class BudgetCeilings(Spec):
    """Ceilings on what model calls may consume in one scope; a model call that would start past
    any of them is not made, and the Turn ends with ``E_BUDGET_EXCEEDED``."""

    input_tokens: int | None = Field(default=None, ge=1, description="Input (prompt) tokens.")
    output_tokens: int | None = Field(default=None, ge=1, description="Output (completion) tokens.")
    total_tokens: int | None = Field(default=None, ge=1, description="Input plus output tokens.")
    cost: float | None = Field(
        default=None, gt=0, description="Cost in the pricing's currency (needs Model pricing)."
    )

    def limits(self) -> dict[str, float]:
        """``figure → limit`` of the ceilings set; the figures are the fields' YAML names,
        which are ``goondan.usage.BUDGET_FIGURES``."""
        return {
            field.alias or name: value
            for name, field in type(self).model_fields.items()
            if (value := getattr(self, name)) is not None
        }

    def over(self, base: BudgetCeilings | None) -> BudgetCeilings:
        """These ceilings, with ``base``'s for the figures these leave unset."""
        if base is None:
            return self
        unset = {name for name in type(self).model_fields if getattr(self, name) is None}
        return self.model_copy(update={name: getattr(base, name) for name in unset})


class Budgets(Spec):
    """Token and cost ceilings per Turn, per conversation instance and per trace."""

    turn: BudgetCeilings | None = Field(
        default=None, description="One Turn of one agent (checked by the agent)."
    )
    instance: BudgetCeilings | None = Field(
        default=None,
        description="Everything one conversation instance ever used (checked by the agent; "
        "kept across restarts).",
    )
    trace: BudgetCeilings | None = Field(
        default=None,
        description="One request across every agent it reaches (checked by the Orchestrator). "
        "An Agent's applies to the requests that enter the swarm at it.",
    )

    def over(self, base: Budgets | None) -> Budgets:
        """These budgets, figure by figure over ``base``'s (an Agent's over its Swarm's)."""
        if base is None:
            return self

        def merged(
            own: BudgetCeilings | None, under: BudgetCeilings | None
        ) -> BudgetCeilings | None:
            return under if own is None else own.over(under)

        return Budgets(
            turn=merged(self.turn, base.turn),
            instance=merged(self.instance, base.instance),
            trace=merged(self.trace, base.trace),
        )

    def scopes(self) -> dict[str, BudgetCeilings]:
        """``turn``/``instance``/``trace`` → ceilings, for the scopes that have any."""
        found = {"turn": self.turn, "instance": self.instance, "trace": self.trace}
        return {name: c for name, c in found.items() if c is not None and c.limits()}


def _full_tool_name(name: str) -> str:
    if "__" not in name.strip("_"):
        raise PydanticCustomError(
            "approval_tool_name",
            "'{name}' is not a full tool name: write it as TOOL__EXPORT, e.g. bash__exec",
            {"name": name},
        )
    return name


class ApprovalPolicy(Spec):
    """Tool calls that wait for an operator's decision before they run."""

    tools: list[Annotated[str, AfterValidator(_full_tool_name)]] = Field(
        min_length=1,
        description="Full tool names (`{tool}__{export}`) whose calls are parked until an "
        "operator approves (the call runs, with edited arguments if given) or rejects them "
        "(the model gets E_TOOL_REJECTED with the reason).",
    )
    timeout_seconds: float = Field(
        default=APPROVAL_TIMEOUT_SECONDS,
        gt=0,
        le=MAX_SECONDS,
        description="How long a parked call waits for a decision; past it the model gets "
        "E_TOOL_APPROVAL_TIMEOUT. The deadline is kept on disk and survives restarts.",
    )


class ToolPolicy(Spec):
    """How the agent's tool calls are checked."""

    allow_registry_calls: bool = Field(
        default=False,
        description="Allow calls to registry tools missing from the Step's catalog (unsafe).",
    )
    handler_timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=MAX_SECONDS,
        description="Default handler timeout for this agent's tools.",
    )
    max_tool_calls_per_step: int = Field(
        default=MAX_TOOL_CALLS_PER_STEP,
        ge=1,
        le=1024,
        description="Tool calls of one model response that run; the rest get E_TOOL_CALL_LIMIT.",
    )
    max_pending_calls: int = Field(
        default=MAX_BACKGROUND_CALLS_PER_INSTANCE,
        ge=1,
        le=1024,
        description="Calls per conversation that may run on in the background at once.",
    )
    approval: ApprovalPolicy | None = Field(
        default=None,
        description="Tool calls that need a human's approval before they run.",
    )
    parallel_tool_calls: bool = Field(
        default=False,
        description="Run the tool calls of one model response concurrently (results still "
        "join the conversation in the model's order).",
    )


class CrashPolicy(Spec):
    """What happens to a Turn whose agent process dies under it."""

    max_turn_attempts: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Attempts at one Turn: when its agent process dies mid-Turn, the Turn "
        f"resumes once the agent is back, until it has died this many times (default "
        f"{MAX_TURN_ATTEMPTS}; the Agent's value overrides the Swarm's); then its caller is "
        "answered AGENT_CRASHED.",
    )


class AgentPolicy(Spec):
    """Policies of one Agent; unset fields follow the Swarm's policy."""

    concurrency: Concurrency | None = Field(
        default=None, description=CONCURRENCY_DESCRIPTION + " Default: the Swarm's."
    )
    crash: CrashPolicy = Field(
        default_factory=CrashPolicy, description="Turns whose agent process dies."
    )


class AgentSpec(Spec):
    """``kind: Agent``."""

    description: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_DESCRIPTION_LENGTH,
        description="What the agent does, in a sentence or two: the description callers of "
        "its front doors see (the MCP tool's, the A2A card's, the model list's).",
    )
    expose: list[FrontDoor] | None = Field(
        default=None,
        description="The front doors that show this agent (openai, mcp, a2a, agUi); default: "
        "every one the Swarm's `expose` lets it through. `[]` hides it from all of them (its "
        "own API still reaches it).",
    )
    model_config_: ModelConfig = Field(alias="modelConfig", description="The agent's model.")
    prompt: Prompt | None = Field(default=None, description="The system prompt.")
    tools: list[RefItemLike] = Field(default_factory=list, description="Tools it may call.")
    extensions: list[RefItemLike] = Field(default_factory=list, description="Extensions, in order.")
    required_tools: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="Full tool names; one must succeed in every Turn."
    )
    tool_policy: ToolPolicy = Field(default_factory=ToolPolicy, description="Tool-call policy.")
    policy: AgentPolicy = Field(
        default_factory=AgentPolicy,
        description="Conversation and crash policy, over the Swarm's.",
    )
    budgets: Budgets | None = Field(
        default=None, description="Token and cost ceilings, over the Swarm's figure by figure."
    )
    limits: AgentLimits = Field(
        default_factory=lambda: AgentLimits(), description="Resource limits of the agent's process."
    )
    env: EnvNames
