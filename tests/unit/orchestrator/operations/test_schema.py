"""Every route's body, as the goldens hold it, is valid against the JSON Schema its answer
exports; a body that is not (a field missing, one of the wrong type) is refused."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from orchestrator.operations.answers import ANSWERS, ErrorBody
from orchestrator.operations.schema import ROUTES, answer_schema, answer_schemas

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "http"
CASES = {
    "healthz": "GET /healthz",
    "readyz": "GET /readyz",  # 503 while the entry agent is not ready
    "agents": "GET /v1/agents",
    "requests-none": "GET /v1/requests",
    "requests-one": "GET /v1/requests",
    "instances": "GET /v1/instances",
    "instances-of-beta": "GET /v1/instances",
    "usage": "GET /v1/usage",
    "usage-trace": "GET /v1/usage?trace=ID",
    "approvals": "GET /v1/approvals",
    "approvals-all": "GET /v1/approvals",
    "approval": "GET /v1/approvals/{id}",
    "approve": "POST /v1/approvals/{id}/approve",
    "instance-delete": "DELETE /v1/agents/{agent}/instances/{key}",
    "instance-restart": "POST /v1/agents/{agent}/instances/{key}/restart",
    "send": "POST /v1/agents/{agent}/sends",
    "restart": "POST /v1/agents/{agent}/restart",
    "restart-fresh": "POST /v1/agents/{agent}/restart",
    "cancel": "POST /v1/requests/{id}/cancel",
}
"""Golden case → its route. The other goldens are failures (``ErrorBody``) or bodies whose
shape is not ours (a Turn's answer, the OpenAI-compatible routes)."""
NOT_OURS = {"request", "chat-completion", "models"}


def golden(name: str) -> tuple[int, object]:
    status, body = (GOLDEN / f"{name}.json").read_text(encoding="utf-8").split("\n", 1)
    return int(status), json.loads(body.replace('"<pid>"', "4242").replace('"<created>"', "0"))


@pytest.mark.parametrize("name", sorted(p.stem for p in GOLDEN.glob("*.json")))
def test_every_golden_body_is_valid_against_its_answers_schema(name: str) -> None:
    status, body = golden(name)
    if name in NOT_OURS:
        assert status < 300
        return
    kind = ROUTES[CASES[name]] if name in CASES else ErrorBody
    assert (status >= 400) is (kind is ErrorBody or name == "readyz")
    jsonschema.validate(body, answer_schema(kind))


def test_a_body_missing_a_field_or_of_a_wrong_type_is_refused() -> None:
    _, body = golden("agents")
    assert isinstance(body, dict)
    schema = answer_schema(ROUTES["GET /v1/agents"])
    del body["agents"][0]["pendingDelegates"]
    with pytest.raises(jsonschema.ValidationError, match="pendingDelegates"):
        jsonschema.validate(body, schema)
    _, body = golden("approvals")
    assert isinstance(body, dict)
    body["approvals"][0]["status"] = "maybe"
    with pytest.raises(jsonschema.ValidationError, match="maybe"):
        jsonschema.validate(body, answer_schema(ROUTES["GET /v1/approvals"]))


def test_every_answer_exports_a_schema_with_every_field_described() -> None:
    schemas = answer_schemas()
    assert set(schemas) == {kind.__name__ for kind in ANSWERS}
    undescribed = []
    for schema in schemas.values():
        definitions = schema["$defs"]
        assert isinstance(definitions, dict)
        for name, definition in definitions.items():
            for field, spec in definition.get("properties", {}).items():
                if "description" not in spec and "$ref" not in spec:
                    undescribed.append(f"{name}.{field}")
    assert undescribed == []
