"""slot_constructor: what ``cls(...)`` builds, from the same arguments."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent_process.tools.constructors import slot_constructor
from tools_base import Message, ToolCallResult, ToolContext, ToolErrorInfo


@dataclass(frozen=True, kw_only=True, slots=True)
class Item:
    name: str
    count: int = 0
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Mixed:
    first: str
    second: int = 2
    third: str = field(default="x", kw_only=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class Child(Item):
    extra: str


new_item = slot_constructor(Item)
new_mixed = slot_constructor(Mixed)
new_child = slot_constructor(Child)


@pytest.mark.parametrize("cls", [Item, Mixed, Child, ToolContext, ToolCallResult, ToolErrorInfo])
def test_takes_the_arguments_of_the_class(cls: type) -> None:
    wanted = [str(p) for p in inspect.signature(cls).parameters.values()]
    got = [str(p) for p in inspect.signature(slot_constructor(cls)).parameters.values()]
    assert got == wanted


def test_builds_what_the_class_builds() -> None:
    assert new_item(name="a") == Item(name="a")
    assert repr(new_item(name="a", count=2, tags=["t"])) == repr(
        Item(name="a", count=2, tags=["t"])
    )
    assert new_item(name="a").tags is not new_item(name="a").tags  # a fresh list each time
    assert new_mixed("a") == Mixed("a", 2, third="x")
    assert new_child(name="n", extra="e") == Child(name="n", extra="e")
    assert type(new_child(name="n", extra="e")) is Child
    new_result = slot_constructor(ToolCallResult)
    result = new_result(tool_call_id="c", tool_name="t__x", status="ok", output={"a": 1})
    assert result == ToolCallResult(
        tool_call_id="c", tool_name="t__x", status="ok", output={"a": 1}
    )
    assert hash(result.error) == hash(None)
    assert pickle.loads(pickle.dumps(result)) == result
    assert dataclasses.replace(result, status="error").status == "error"


def test_what_it_builds_stays_frozen() -> None:
    ctx = slot_constructor(ToolContext)(
        agent_name="a",
        instance_key="k",
        turn_id="t",
        trace_id="0" * 32,
        tool_call_id="c",
        message=Message(id="m", role="assistant"),
        workdir=Path(),
        logger=None,  # type: ignore[arg-type]
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.turn_id = "other"  # type: ignore[misc]
    assert ctx.inbound == {}
    assert ctx.runtime is None


def test_wrong_arguments_fail_as_for_the_class() -> None:
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'name'"):
        new_item()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        new_item(name="a", bogus=1)  # type: ignore[call-arg]


def test_only_frozen_slotted_dataclasses() -> None:
    @dataclass(frozen=True)
    class NoSlots:
        name: str

    @dataclass(slots=True)
    class NotFrozen:
        name: str

    @dataclass(frozen=True, slots=True)
    class Hidden:
        name: str = field(default="x", init=False)

    @dataclass(frozen=True, slots=True)
    class Checked:
        name: str

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class Private:
        _secret: str

    for cls in (NoSlots, NotFrozen):
        with pytest.raises(TypeError, match="not a frozen dataclass with slots"):
            slot_constructor(cls)
    with pytest.raises(TypeError, match="init=False"):
        slot_constructor(Hidden)
    with pytest.raises(TypeError, match="__post_init__"):
        slot_constructor(Checked)
    with pytest.raises(TypeError, match="field name not supported"):
        slot_constructor(Private)
