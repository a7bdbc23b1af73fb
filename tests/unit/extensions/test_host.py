"""The extension host: loading in order, middleware from extensions, dynamic tools, state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_process.extensions import ExtensionLoadError
from tests.support.extensions import ExtensionHarness, extension_file

TRACING = """
from pathlib import Path

def register(api, config):
    log = Path(config["trace"])

    def note(text):
        with log.open("a") as out:
            out.write(f"{api.name}:{text}\\n")

    async def turn(ctx):
        note("turn:pre")
        result = await ctx.next()
        note("turn:post")
        return result

    async def tool_call(ctx):
        note("call:pre")
        if config.get("refuse"):
            from agent_process.tools.results import error_result
            return error_result(ctx.tool_call_id, ctx.tool_name, message=f"refused by {api.name}",
                                code="E_REFUSED", name="Refused")
        result = await ctx.next()
        note("call:post")
        return result

    api.pipeline.register("turn", turn)
    api.pipeline.register("toolCall", tool_call)
"""

RULES: list[dict[str, Any]] = [
    {"when": {"input": "^say$"}, "call": {"tool": "echo__say", "args": {"text": "x"}}},
    {"when": {"input": "^dyn dyn__add$"}, "call": {"tool": "dyn__add"}},
    {"when": {"input": "^dyn dyn__later$"}, "call": {"tool": "dyn__later"}},
    {"when": {"toolResult": "dyn__add", "status": "ok"}, "call": {"tool": "dyn__later"}},
    {"when": {"status": "ok"}, "reply": "ok {result}"},
    {"when": {"status": "error"}, "reply": "error {errorCode}"},
    {"reply": "plain"},
]

calls: list[str] = []


def say(ctx: object, args: dict[str, object]) -> str:
    calls.append("say")
    return "said"


def tracing(tmp_path: Path, name: str, **config: Any) -> Any:
    plan = extension_file(tmp_path / f"{name}.py", TRACING, name)
    return plan.model_copy(update={"config": {"trace": str(tmp_path / "trace"), **config}})


async def test_extensions_declared_first_wrap_those_declared_later(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=RULES,
        extensions=[tracing(tmp_path, "first"), tracing(tmp_path, "second")],
        tools={"echo__say": say},
    )
    assert (await harness.turn("say")).text == "ok said"
    assert (tmp_path / "trace").read_text().split() == [
        "first:turn:pre",
        "second:turn:pre",
        "first:call:pre",
        "second:call:pre",
        "second:call:post",
        "first:call:post",
        "second:turn:post",
        "first:turn:post",
    ]
    await harness.close()


async def test_an_outer_toolcall_layer_can_refuse_before_the_tool_runs(tmp_path: Path) -> None:
    calls.clear()
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=RULES,
        extensions=[tracing(tmp_path, "guard", refuse=True), tracing(tmp_path, "inner")],
        tools={"echo__say": say},
    )
    assert (await harness.turn("say")).text == "error E_REFUSED"
    assert calls == []
    trace = (tmp_path / "trace").read_text().split()
    assert "inner:call:pre" not in trace
    assert "guard:call:pre" in trace
    await harness.close()


HIDER = """
def register(api):
    async def step(ctx):
        ctx.tool_catalog[:] = [t for t in ctx.tool_catalog if t.name != "echo__say"]
        return await ctx.next()

    api.pipeline.register("step", step)
"""


async def test_a_step_layer_that_hides_a_tool_makes_its_calls_not_in_catalog(
    tmp_path: Path,
) -> None:
    calls.clear()
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=RULES,
        extensions=[extension_file(tmp_path / "hider.py", HIDER, "hider")],
        tools={"echo__say": say},
    )
    assert (await harness.turn("say")).text == "error E_TOOL_NOT_IN_CATALOG"
    assert calls == []
    await harness.close()


DYNAMIC = """
def register(api):
    async def later(ctx, args):
        return "later ran"

    def add(ctx, args):
        api.tools.register({"name": "dyn__later"}, later)
        return "added"

    name = api.tools.register(
        {"name": "dyn__add", "description": "adds dyn__later",
         "parameters": {"type": "object", "properties": {}}},
        add,
    )
    assert name == "dyn__add"

    seen = []

    async def step(ctx):
        seen.append([t.name for t in ctx.tool_catalog])
        api.events.emit("catalog", seen[-1])
        return await ctx.next()

    api.pipeline.register("step", step)
"""


async def test_dynamic_tools_join_the_catalog_from_the_next_step(tmp_path: Path) -> None:
    harness = await ExtensionHarness.start(
        tmp_path,
        rules=RULES,
        extensions=[extension_file(tmp_path / "dyn.py", DYNAMIC, "dyn")],
    )
    catalogs: list[list[str]] = []
    harness.host.events.on("catalog", catalogs.append)
    assert (await harness.turn("dyn dyn__later")).text == "error E_TOOL_NOT_IN_CATALOG"
    catalogs.clear()
    # dyn__add registers dyn__later during Step 0; the model calls it in Step 1
    assert (await harness.turn("dyn dyn__add")).text == "ok later ran"
    assert catalogs == [["dyn__add"], ["dyn__add", "dyn__later"], ["dyn__add", "dyn__later"]]
    [item] = [t.item for t in harness.registry if t.name == "dyn__later"]
    assert item.source is not None
    assert item.source.to_json() == {"type": "extension", "name": "dyn"}
    await harness.close()


COUNTER = """
def register(api):
    async def turn(ctx):
        state = api.state.get() or {"turns": 0}
        state["turns"] += 1
        api.state.set(state)
        return await ctx.next()

    api.pipeline.register("turn", turn)
"""


async def test_state_is_saved_per_instance_and_survives_a_new_host(tmp_path: Path) -> None:
    plan = extension_file(tmp_path / "counter.py", COUNTER, "counter")
    harness = await ExtensionHarness.start(tmp_path, rules=RULES, extensions=[plan])
    await harness.turn("one")
    await harness.turn("two")
    path = harness.state_directory / "counter.json"
    assert json.loads(path.read_text()) == {"turns": 2}
    await harness.close()
    restarted = await ExtensionHarness.start(tmp_path, rules=RULES, extensions=[plan])
    await restarted.turn("three")
    assert json.loads(path.read_text()) == {"turns": 3}
    await restarted.close()


BAD_STATE = """
import pytest
from tools_base import ExtensionError

def register(api):
    with pytest.raises(ExtensionError, match="while a Turn runs"):
        api.state.get()

    async def turn(ctx):
        with pytest.raises(ExtensionError, match="JSON object"):
            api.state.set(["not", "an", "object"])
        with pytest.raises(ExtensionError, match="not JSON"):
            api.state.set({"x": object()})
        return await ctx.next()

    api.pipeline.register("turn", turn)
"""


async def test_state_outside_a_turn_or_not_an_object_is_refused(tmp_path: Path) -> None:
    plan = extension_file(tmp_path / "bad_state.py", BAD_STATE, "bad-state")
    harness = await ExtensionHarness.start(tmp_path, rules=RULES, extensions=[plan])
    assert (await harness.turn("hi")).status == "ok"
    assert not (harness.state_directory / "bad-state.json").exists()
    await harness.close()


@pytest.mark.parametrize(
    ("source", "code", "words"),
    [
        ("x = 1\n", "E_EXT_LOAD", "no `register(api)`"),
        ("def register(api):\n    raise RuntimeError('boom')\n", "E_EXT_INIT", "boom"),
        ("import not_a_module_anywhere\n", "E_EXT_INIT", "not_a_module_anywhere"),
        (
            "def register(api):\n    api.pipeline.register('sideways', lambda ctx: None)\n",
            "E_EXT_INIT",
            "sideways",
        ),
        (
            "def register(api):\n    api.tools.register({'name': 'no-separator'}, print)\n",
            "E_EXT_INIT",
            "invalid tool name",
        ),
    ],
)
async def test_a_broken_extension_is_a_named_load_error(
    tmp_path: Path, source: str, code: str, words: str
) -> None:
    plan = extension_file(tmp_path / "broken.py", source, "broken")
    with pytest.raises(ExtensionLoadError) as raised:
        await ExtensionHarness.start(tmp_path, rules=RULES, extensions=[plan])
    assert raised.value.code == code
    assert raised.value.extension == "broken"
    assert str(raised.value).startswith("Extension/broken: ")
    assert words in str(raised.value)


LIFECYCLE = """
import asyncio
from pathlib import Path

async def register(api, config):
    await asyncio.sleep(0)
    stopped = Path(config["stopped"])

    async def stop():
        stopped.write_text("stopped")

    api.on_stop(stop)
    unsubscribe = api.events.on("ping", lambda n: stopped.with_suffix(".ping").write_text(str(n)))
    api.events.emit("ping", 1)
    unsubscribe()
    api.events.emit("ping", 2)
"""


async def test_async_register_stop_callbacks_and_the_event_bus(tmp_path: Path) -> None:
    stopped = tmp_path / "stopped"
    plan = extension_file(tmp_path / "life.py", LIFECYCLE, "life").model_copy(
        update={"config": {"stopped": str(stopped)}}
    )
    harness = await ExtensionHarness.start(tmp_path, rules=RULES, extensions=[plan])
    assert stopped.with_suffix(".ping").read_text() == "1"
    assert not stopped.exists()
    await harness.close()
    assert stopped.read_text() == "stopped"
