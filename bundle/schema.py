"""JSON Schema of goondan.yaml documents, for editors (``yaml-language-server``)."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from bundle.spec_base import API_VERSION, Metadata
from bundle.spec_kinds import SPEC_MODELS


def json_schema() -> dict[str, Any]:
    """A draft 2020-12 schema of one goondan.yaml document: ``oneOf`` its kinds, by ``kind``.

    Descriptions come from the models' ``Field(description=...)`` and docstrings, so editors
    (``yaml-language-server``) show the same text as the code.
    """
    defs: dict[str, Any] = {}
    branches = []
    metadata = TypeAdapter(Metadata).json_schema(by_alias=True, ref_template="#/$defs/{model}")
    defs.update(metadata.pop("$defs", {}))
    defs["Metadata"] = metadata
    for kind, model in SPEC_MODELS.items():
        spec = model.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
        defs.update(spec.pop("$defs", {}))
        defs[model.__name__] = spec
        branches.append(
            {
                "title": kind,
                "description": spec.get("description", kind),
                "properties": {
                    "kind": {"const": kind},
                    "spec": {"$ref": f"#/$defs/{model.__name__}"},
                },
                # a Package may omit its spec; every other kind needs one
                "required": ["kind"] if kind == "Package" else ["kind", "spec"],
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://goondan.ai/schemas/goondan.yaml.json",
        "title": "goondan.yaml resource",
        "description": "One document of a goondan.yaml: a Goondan resource.",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": API_VERSION, "description": "Always goondan.ai/v1."},
            "kind": {"enum": list(SPEC_MODELS), "description": "The resource kind."},
            "metadata": {"$ref": "#/$defs/Metadata"},
            "spec": {"type": "object", "description": "Kind-specific settings."},
        },
        "oneOf": branches,
        "$defs": defs,
    }
