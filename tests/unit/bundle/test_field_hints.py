"""A misspelt field of any kind is answered with the field meant, found where it was written."""

from __future__ import annotations

import pytest

from bundle.field_hints import field_suggestion, fields_at


@pytest.mark.parametrize(
    ("kind", "path", "meant"),
    [
        ("Agent", ("spec", "modelConfg"), "modelConfig"),
        ("Swarm", ("spec", "policy", "maxStepsPerTrn"), "maxStepsPerTurn"),
        ("Tool", ("spec", "exports", 2, "descripton"), "description"),
        ("TestSuite", ("spec", "cases", 0, "expect", "maxStep"), "maxSteps"),
        ("TestSuite", ("spec", "cases", 1, "expect", "tools", "calls", 0, "nme"), "name"),
    ],
)
def test_the_closest_field_where_it_was_written(
    kind: str, path: tuple[str | int, ...], meant: str
) -> None:
    assert field_suggestion(kind, path) == f"did you mean {meant!r}?"


def test_nothing_is_suggested_off_the_models() -> None:
    assert field_suggestion("Agent", ("spec", "zzzzzz")) is None
    assert field_suggestion("Nope", ("spec", "name")) is None
    assert fields_at("Tool", ("spec", "config", "anything")) == []  # free-form config
    assert fields_at("Tool", ("metadata",)) == []
