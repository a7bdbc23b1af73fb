"""Pydantic models of every goondan.yaml resource kind (``apiVersion: goondan.ai/v1``).

Fields are snake_case in Python and camelCase in YAML. Unknown fields are errors, so a typo
(``errorMesageLimit``) is reported instead of silently ignored. Every field documents itself;
the JSON Schema for editors (``python -m orchestrator schema``) is generated from these models.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from bundle.env_names import EnvNames
from bundle.scripted import ScriptSpec
from goondan.defaults import (
    APPROVAL_TIMEOUT_SECONDS,
    ERROR_MESSAGE_LIMIT,
    MAX_BACKGROUND_CALLS_PER_INSTANCE,
    MAX_STEPS_PER_TURN,
    MAX_TOOL_CALLS_PER_STEP,
    ON_MAX_STEPS,
    REQUEST_TIMEOUT_SECONDS,
    SHUTDOWN_GRACE_SECONDS,
)

API_VERSION = "goondan.ai/v1"
KINDS = (
    "Package",
    "Model",
    "Tool",
    "Agent",
    "Swarm",
    "Extension",
    "Connector",
    "Connection",
)

RESOURCE_NAME = re.compile(r"^[a-z0-9]([a-z0-9_.-]*[a-z0-9])?$")
TOOL_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")
EXPORT_NAME = re.compile(r"^[a-z0-9_-]+$")
PACKAGE_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$")
_REF_STRING_SCHEMA = {
    "type": "string",
    "pattern": "^[^/]+/[^/]+$",
    "description": '"Kind/name", e.g. "Tool/bash".',
}
NODE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
"""A cluster node's name: it becomes part of NATS subjects and keys, so no dots or spaces."""
LABEL_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,62}$"
"""A node label's name (``orchestrator node --label KEY=VALUE``)."""
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9_.-]{1,63}$"
"""A node label's value."""
MAX_TOOL_NAME_LENGTH = 64
"""Providers (OpenAI, Anthropic) refuse tool names longer than this."""
MAX_RESOURCE_NAME_LENGTH = 63
"""A resource name becomes a directory and process name (``agents/<name>/``): kept to a
DNS label's length, far inside every file system's name limit."""
MAX_SECONDS = 7 * 24 * 3600.0
"""The longest timeout or grace period accepted (a week): anything longer is a typo."""


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        protected_namespaces=(),
        allow_inf_nan=False,  # `.inf` as a timeout would wait forever
    )


# -- references --------------------------------------------------------------------------------


class ObjectRef(_Spec):
    """A reference to another resource: ``"Kind/name"`` or ``{kind, name, package?}``."""

    kind: str = Field(description="Kind of the referenced resource, e.g. `Tool`.")
    name: str = Field(description="metadata.name of the referenced resource.")
    package: str | None = Field(
        default=None,
        description='Package that declares it, e.g. "@goondan/base"; omitted means this bundle.',
    )
    api_version: Literal["goondan.ai/v1"] | None = Field(
        default=None, description="Optional; `goondan.ai/v1`."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_ref_string(value)
        return value

    @field_validator("kind", "name")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip() or "/" in value:
            raise ValueError(f"{value!r} must be non-blank and contain no '/'")
        return value.strip()

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"anyOf": [_REF_STRING_SCHEMA, handler(core_schema)]}


def parse_ref_string(value: str) -> dict[str, str]:
    """``"Tool/bash"`` → ``{"kind": "Tool", "name": "bash"}``; malformed strings are errors."""
    kind, sep, name = value.partition("/")
    if not sep or not kind.strip() or not name.strip() or "/" in name:
        shown = repr(value).replace("{", "{{").replace("}", "}}")
        raise PydanticCustomError(
            "invalid_ref", f"invalid ObjectRef {shown}: expected 'Kind/name' with exactly one '/'"
        )
    return {"kind": kind.strip(), "name": name.strip()}


def _ref_item(value: Any) -> Any:
    if isinstance(value, str) or (isinstance(value, dict) and "ref" not in value):
        return {"ref": value}
    return value


class RefItem(_Spec):
    """An entry of `tools`, `extensions` or `agents`: a ref, optionally with per-use config."""

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # A bare ref (string or object) is accepted in place of {ref: ...}.
        ref = handler(ObjectRef.__pydantic_core_schema__)
        return {"anyOf": [_REF_STRING_SCHEMA, ref, handler(core_schema)]}

    ref: ObjectRef = Field(description='The referenced resource ("Kind/name" or an object).')
    config: dict[str, Any] | None = Field(
        default=None,
        description="Per-agent configuration, shallow-merged over the resource's spec.config.",
    )


RefItemLike = Annotated[RefItem, BeforeValidator(_ref_item)]


# -- values and secrets ----------------------------------------------------------------------


class SecretRef(_Spec):
    """``{ref: "Secret/<name>", key}``: read from the environment (see ValueSource)."""

    ref: str = Field(
        description='"Secret/<name>"; read from GOONDAN_SECRET_<NAME>_<KEY> and similar.'
    )
    key: str | None = Field(
        default=None, min_length=1, description="Key inside the secret (default: the field name)."
    )

    @field_validator("ref")
    @classmethod
    def _secret_ref(cls, value: str) -> str:
        kind, _, name = value.partition("/")
        if kind != "Secret" or not name.strip() or "/" in name:
            raise ValueError(f"secretRef.ref {value!r} must look like 'Secret/<name>'")
        return value


class ValueFrom(_Spec):
    """Where a value comes from: an environment variable or a secret."""

    env: str | None = Field(
        default=None, min_length=1, description="Name of an environment variable."
    )
    secret_ref: SecretRef | None = Field(default=None, description="A secret reference.")

    @model_validator(mode="after")
    def _exclusive(self) -> ValueFrom:
        if (self.env is None) == (self.secret_ref is None):
            raise ValueError("valueFrom needs exactly one of `env` or `secretRef`")
        return self


class ValueSource(_Spec):
    """A literal ``value`` or a ``valueFrom`` reference, resolved late and never logged."""

    value: str | None = Field(default=None, description="Literal value (avoid for secrets).")
    value_from: ValueFrom | None = Field(default=None, description="Read the value from elsewhere.")

    @model_validator(mode="after")
    def _exclusive(self) -> ValueSource:
        if (self.value is None) == (self.value_from is None):
            raise ValueError("give exactly one of `value` or `valueFrom`")
        return self


# -- kinds -----------------------------------------------------------------------------------


class Metadata(_Spec):
    """``metadata`` of every resource."""

    name: str = Field(description="Resource name, unique per kind within a package.")
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Free-form notes.")


class PackageDependency(_Spec):
    """A package this bundle depends on."""

    name: str = Field(min_length=1, description='Package name, e.g. "@goondan/base".')
    version: str = Field(
        min_length=1,
        description="Semantic version range, e.g. ^1.0.0 (npm's syntax, or a PEP 440 specifier).",
    )
    distribution: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$",
        description="The Python distribution that provides it (default: the name without its "
        '"@" and with "/" as "-": @acme/tools → acme-tools).',
    )


class PackageSpec(_Spec):
    """``kind: Package``: the bundle's identity (optional; the first document when present)."""

    version: str | None = Field(default=None, description="Semantic version of this package.")
    description: str | None = Field(default=None, description="What the package is for.")
    access: Literal["public", "restricted"] = Field(default="public", description="Visibility.")
    dependencies: list[PackageDependency] = Field(
        default_factory=list, description="Packages used."
    )
    registry: dict[str, Any] | None = Field(default=None, description="Registry settings.")


POOL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"


class ModelLimits(_Spec):
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


class ModelPricing(_Spec):
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


class ModelSpec(_Spec):
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


class ToolExport(_Spec):
    """One function of a Tool; the model sees it as `{tool}__{export}`."""

    name: str = Field(description="Export name: lowercase letters, digits, `_` and `-`.")
    description: str | None = Field(default=None, description="What the model is told.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema (type: object) of the arguments.",
    )

    @field_validator("name")
    @classmethod
    def _export_name(cls, value: str) -> str:
        if "__" in value:
            raise ValueError(f"export name {value!r} must not contain '__'")
        if not EXPORT_NAME.match(value):
            raise ValueError(f"export name {value!r} must match [a-z0-9_-]+")
        return value


class ToolSpec(_Spec):
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


class ModelParams(_Spec):
    """Per-agent model parameters; they override the Model's own. Other keys are kept as given."""

    model_config = ConfigDict(extra="allow")

    temperature: float | None = Field(
        default=None, ge=0, description="Sampling temperature (default: the Model's)."
    )
    max_tokens: int | None = Field(
        default=None, gt=0, description="Maximum output tokens (default: the Model's)."
    )


class ModelConfig(_Spec):
    """Which Model an Agent uses, and with what parameters."""

    model_ref: ObjectRef = Field(description="The Model, e.g. Model/claude.")
    params: ModelParams = Field(
        default_factory=ModelParams, description="temperature, maxTokens, ... for this agent."
    )


class Prompt(_Spec):
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


class AgentLimits(_Spec):
    """Resource limits of one AgentProcess."""

    memory_mib: int | None = Field(
        default=None,
        alias="memoryMiB",
        ge=128,
        le=1_048_576,
        description="Heap and thread memory of the agent process, in MiB: past it, allocations "
        "fail (a tool gets E_TOOL MemoryError; the agent itself exits with code 72).",
    )


class BudgetCeilings(_Spec):
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


class Budgets(_Spec):
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


class ApprovalPolicy(_Spec):
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


class ToolPolicy(_Spec):
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


class AgentSpec(_Spec):
    """``kind: Agent``."""

    model_config_: ModelConfig = Field(alias="modelConfig", description="The agent's model.")
    prompt: Prompt | None = Field(default=None, description="The system prompt.")
    tools: list[RefItemLike] = Field(default_factory=list, description="Tools it may call.")
    extensions: list[RefItemLike] = Field(default_factory=list, description="Extensions, in order.")
    required_tools: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="Full tool names; one must succeed in every Turn."
    )
    tool_policy: ToolPolicy = Field(default_factory=ToolPolicy, description="Tool-call policy.")
    budgets: Budgets | None = Field(
        default=None, description="Token and cost ceilings, over the Swarm's figure by figure."
    )
    limits: AgentLimits = Field(
        default_factory=lambda: AgentLimits(), description="Resource limits of the agent's process."
    )
    env: EnvNames


class ShutdownPolicy(_Spec):
    """Graceful shutdown of the swarm's agents."""

    grace_period_seconds: float = Field(
        default=SHUTDOWN_GRACE_SECONDS,
        ge=0,
        le=MAX_SECONDS,
        description="Time a Turn gets to finish before it is killed.",
    )


class LifecyclePolicy(_Spec):
    """Instance lifecycle (reserved: accepted and validated, not acted on yet)."""

    ttl_seconds: float | None = Field(
        default=None, gt=0, description="Idle time after which an instance may be collected."
    )
    gc_grace_seconds: float | None = Field(
        default=None, ge=0, description="Extra time before a collected instance is deleted."
    )


class ApiPolicy(_Spec):
    """The daemon's HTTP API beyond its Unix socket (``run --listen`` and
    ``--api-token-env`` override these)."""

    listen: str | None = Field(
        default=None,
        pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$",
        description="HOST:PORT of a TCP listener, e.g. 127.0.0.1:8080 (off loopback it needs a token).",
    )
    token_from: ValueFrom | None = Field(
        default=None,
        description="The bearer token every request must carry, e.g. {env: GOONDAN_API_TOKEN}.",
    )
    allowed_hosts: list[
        Annotated[
            str,
            StringConstraints(
                pattern=r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?$", max_length=255
            ),
        ]
    ] = Field(
        default_factory=list,
        max_length=256,
        description=(
            "More names the TCP listener answers to in the Host header (HOST, or HOST:PORT for "
            "that port only), e.g. the DNS name clients use; besides these it serves only its "
            "bound address, localhost, 127.0.0.1 and [::1] with its port (421 otherwise)."
        ),
    )
    cors_origins: list[
        Annotated[
            str,
            StringConstraints(
                pattern=r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?$",
                max_length=255,
            ),
        ]
    ] = Field(
        default_factory=list,
        max_length=256,
        description=(
            "Origins of web pages that may call the API from a browser, e.g. "
            "https://app.example.com (no path, no wildcard); a request from any other origin "
            "is refused (403). None by default."
        ),
    )


class SwarmPolicy(_Spec):
    """Limits of a Swarm."""

    max_steps_per_turn: int = Field(
        default=MAX_STEPS_PER_TURN, ge=1, le=10_000, description="Steps before a Turn stops."
    )
    on_max_steps: Literal["answer", "error"] = Field(
        default=ON_MAX_STEPS,
        description="A Turn that used up its Steps: answer (its last text, or a notice; "
        "finishReason max_steps) or error (E_MAX_STEPS, which fails its caller).",
    )
    request_timeout_seconds: float = Field(
        default=REQUEST_TIMEOUT_SECONDS,
        gt=0,
        le=MAX_SECONDS,
        description="Default timeout of agents__request.",
    )
    shutdown: ShutdownPolicy = Field(
        default_factory=ShutdownPolicy, description="Graceful shutdown settings."
    )
    lifecycle: LifecyclePolicy = Field(
        default_factory=LifecyclePolicy, description="Instance lifecycle (reserved)."
    )
    allow_spawn_outside_state: bool = Field(
        default=False,
        description=(
            "Let agents__spawn give an instance a cwd outside the state directory (by default "
            "a cwd must lie in the caller's own workspace; the state directory, the rest of "
            "it and its parents are refused either way)."
        ),
    )
    api: ApiPolicy = Field(default_factory=ApiPolicy, description="The daemon's HTTP API.")
    sandbox: Literal["auto", "bwrap", "namespaces", "off"] = Field(
        default="auto",
        description="The sandbox of tool programs (bash, MCP stdio servers): auto (bubblewrap, "
        "else the kernel's namespaces, else `run` refuses), bwrap, namespaces, or off "
        "(programs run as the agent, unconfined).",
    )


def _label_value(value: Any) -> Any:
    # YAML reads `gpu: true` as a boolean and `rack: 2` as a number; a node's `--label`
    # is always text, so compare as text.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return value


NodeName = Annotated[str, StringConstraints(pattern=NODE_NAME_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[
    str, BeforeValidator(_label_value), StringConstraints(pattern=LABEL_VALUE_PATTERN)
]


class AgentPlacement(_Spec):
    """Which hosts of a clustered swarm may run one agent: a node, any of several nodes, or
    any node declaring some labels (``orchestrator node --label KEY=VALUE``); the leader's own
    host too with ``allowLeader``. When the node running it is lost, the leader starts it again
    on another host that qualifies."""

    node: NodeName | None = Field(
        default=None,
        description="Name of the node (`orchestrator node --name`) that runs the agent.",
    )
    nodes: list[NodeName] | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Nodes that may run the agent, the first one up preferred, e.g. "
        "[node-b, node-c].",
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        max_length=32,
        description="Labels a node must declare (every one, with this value) to run the agent, "
        'e.g. {gpu: "true"}; with `node`/`nodes`, only those nodes that declare them.',
    )
    allow_leader: bool = Field(
        default=False,
        description="When no node that qualifies is up, run the agent on the leader instead.",
    )

    @model_validator(mode="after")
    def _says_where(self) -> AgentPlacement:
        if self.node is not None and self.nodes is not None:
            raise ValueError("give `node` or `nodes`, not both")
        if self.node is None and self.nodes is None and not self.labels:
            raise ValueError("say which hosts may run the agent: `node`, `nodes` or `labels`")
        return self

    @property
    def named_nodes(self) -> tuple[str, ...]:
        """The nodes named (``node`` or ``nodes``), in order of preference; empty when any
        node with the labels will do."""
        if self.node is not None:
            return (self.node,)
        return tuple(self.nodes or ())

    def admits(self, node: str, labels: dict[str, str]) -> bool:
        """Whether node ``node``, declaring ``labels``, may run the agent."""
        named = self.named_nodes
        if named and node not in named:
            return False
        return all(labels.get(key) == value for key, value in self.labels.items())

    def describe(self) -> str:
        """The constraint in a few words, for messages and ``status``."""
        parts = ["|".join(self.named_nodes)] if self.named_nodes else []
        parts += [f"{key}={value}" for key, value in sorted(self.labels.items())]
        return ",".join(parts)


class SwarmSpec(_Spec):
    """``kind: Swarm``: the agents that run together."""

    entry_agent: ObjectRef = Field(
        description="The agent that receives input; must be one of `agents`."
    )
    agents: list[RefItemLike] = Field(min_length=1, description="Every agent of the swarm.")
    instance_key: str | None = Field(
        default=None, min_length=1, description="Swarm instance key (default: the swarm's name)."
    )
    policy: SwarmPolicy = Field(default_factory=SwarmPolicy, description="Limits and timeouts.")
    placement: dict[str, AgentPlacement] = Field(
        default_factory=dict,
        description="Agents that run on other hosts when the swarm runs with `--cluster`, by "
        "agent name, e.g. {worker: {node: gpu-1}}, {worker: {nodes: [gpu-1, gpu-2]}} or "
        '{worker: {labels: {gpu: "true"}, allowLeader: true}}; the others run on the leader. '
        "Ignored without --cluster.",
    )
    budgets: Budgets | None = Field(
        default=None,
        description="Token and cost ceilings for every agent of the swarm (an Agent's own "
        "override them figure by figure).",
    )


class ExtensionSpec(_Spec):
    """``kind: Extension``: a module with `register(api)`."""

    entry: str = Field(description="Extension module, relative to the declaring file.")
    config: dict[str, Any] = Field(default_factory=dict, description="Extension settings.")
    env: EnvNames


class EventProperty(_Spec):
    """A property of a connector event."""

    type: Literal["string", "number", "boolean"] = Field(description="JSON type of the value.")
    optional: bool = Field(default=False, description="Whether events may omit it.")


class ConnectorEventDeclaration(_Spec):
    """An event a Connector declares it emits (its name and properties), as goondan.yaml
    writes it; what a running connector emits is :class:`tools_base.ConnectorEvent`."""

    name: str = Field(description="Event name, unique within the Connector.")
    properties: dict[str, EventProperty] = Field(
        default_factory=dict, description="Properties the event carries, by name."
    )

    @field_validator("name")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("event name must not be blank")
        return value


class ConnectorSpec(_Spec):
    """``kind: Connector``: a module that turns outside events into swarm input."""

    entry: str = Field(description="Connector module, relative to the declaring file.")
    events: list[ConnectorEventDeclaration] = Field(
        min_length=1, description="Events it emits (at least one; names unique)."
    )
    env: EnvNames
    required_settings: list[str | list[str]] = Field(
        default_factory=list,
        max_length=64,
        description="Settings it cannot start without, each a name or a list of names any one "
        "of which will do, looked up as ctx.setting does: a Connection's secrets, its config, "
        "then the environment (names in `env` only). `doctor` and `run` check them.",
    )


class IngressMatch(_Spec):
    """Which events a rule takes."""

    event: str | None = Field(default=None, description="Event name; omitted matches any event.")
    properties: dict[str, Any] = Field(
        default_factory=dict, description="Property values the event must carry."
    )


class IngressRoute(_Spec):
    """Where a matched event goes."""

    agent_ref: ObjectRef | None = Field(
        default=None, description="Target agent (one of a swarm's agents); default: entryAgent."
    )
    instance_key: str | None = Field(default=None, description="Fixed instance key.")
    instance_key_prefix: str | None = Field(
        default=None, description="Prefix put before the instance key."
    )
    instance_key_property: str | None = Field(
        default=None, description="Event property whose value is the instance key."
    )

    @model_validator(mode="after")
    def _one_key_rule(self) -> IngressRoute:
        if self.instance_key is not None and self.instance_key_property is not None:
            raise ValueError("give `instanceKey` or `instanceKeyProperty`, not both")
        return self


class IngressRule(_Spec):
    """One routing rule; the first match wins."""

    match: IngressMatch = Field(default_factory=IngressMatch, description="Which events.")
    route: IngressRoute = Field(default_factory=IngressRoute, description="Where they go.")


class Ingress(_Spec):
    """Routing of a connection's events."""

    rules: list[IngressRule] = Field(default_factory=list, description="Tried in order.")


class ConnectionSpec(_Spec):
    """``kind: Connection``: binds a connector to a swarm."""

    connector_ref: ObjectRef = Field(description="The Connector, e.g. Connector/slack.")
    swarm_ref: ObjectRef | None = Field(
        default=None, description="Only bind when this Swarm runs; omitted binds to any swarm."
    )
    config: dict[str, ValueSource] = Field(
        default_factory=dict, description="Connector settings (value or valueFrom)."
    )
    secrets: dict[str, ValueSource] = Field(
        default_factory=dict, description="Connector secrets (prefer valueFrom)."
    )
    verify: dict[str, Any] = Field(
        default_factory=dict, description="Webhook verification settings (reserved)."
    )
    ingress: Ingress = Field(default_factory=Ingress, description="Event routing rules.")


SPEC_MODELS: dict[str, type[_Spec]] = {
    "Package": PackageSpec,
    "Model": ModelSpec,
    "Tool": ToolSpec,
    "Agent": AgentSpec,
    "Swarm": SwarmSpec,
    "Extension": ExtensionSpec,
    "Connector": ConnectorSpec,
    "Connection": ConnectionSpec,
}
