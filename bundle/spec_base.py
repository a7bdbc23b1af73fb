"""Building blocks shared by every goondan.yaml resource kind (``apiVersion: goondan.ai/v1``).

Fields are snake_case in Python and camelCase in YAML. Unknown fields are errors, so a typo
(``errorMesageLimit``) is reported instead of silently ignored. Every field documents itself;
the JSON Schema for editors (``python -m orchestrator schema``) is generated from these models.
The kinds themselves live in ``spec_package``, ``spec_agent`` (Model, Tool, Agent),
``spec_swarm`` and ``spec_connector`` (Extension, Connector, Connection); ``spec_kinds``
maps each kind's name to its model.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

API_VERSION = "goondan.ai/v1"

RESOURCE_NAME = re.compile(r"^[a-z0-9]([a-z0-9_.-]*[a-z0-9])?$")
TOOL_NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$")
PACKAGE_NAME = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$")
_REF_STRING_SCHEMA = {
    "type": "string",
    "pattern": "^[^/]+/[^/]+$",
    "description": '"Kind/name", e.g. "Tool/bash".',
}
MAX_TOOL_NAME_LENGTH = 64
"""Providers (OpenAI, Anthropic) refuse tool names longer than this."""
MAX_RESOURCE_NAME_LENGTH = 63
"""A resource name becomes a directory and process name (``agents/<name>/``): kept to a
DNS label's length, far inside every file system's name limit."""
MAX_SECONDS = 7 * 24 * 3600.0
"""The longest timeout or grace period accepted (a week): anything longer is a typo."""


def _compiles(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
    return value


RegexText = Annotated[str, AfterValidator(_compiles)]
"""A regular expression as written, refused where Python's ``re`` cannot compile it."""


class Spec(BaseModel):
    """Base of every resource model: camelCase aliases, unknown fields refused, immutable."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        protected_namespaces=(),
        allow_inf_nan=False,  # `.inf` as a timeout would wait forever
    )


# -- references --------------------------------------------------------------------------------


class ObjectRef(Spec):
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


class RefItem(Spec):
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


class SecretRef(Spec):
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


class ValueFrom(Spec):
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


class ValueSource(Spec):
    """A literal ``value`` or a ``valueFrom`` reference, resolved late and never logged."""

    value: str | None = Field(default=None, description="Literal value (avoid for secrets).")
    value_from: ValueFrom | None = Field(default=None, description="Read the value from elsewhere.")

    @model_validator(mode="after")
    def _exclusive(self) -> ValueSource:
        if (self.value is None) == (self.value_from is None):
            raise ValueError("give exactly one of `value` or `valueFrom`")
        return self


# -- metadata ------------------------------------------------------------------------------------


class Metadata(Spec):
    """``metadata`` of every resource."""

    name: str = Field(description="Resource name, unique per kind within a package.")
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Free-form notes.")
