"""agents: every export delegates to ctx.runtime (a fake here); without it, a clear error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.tool_context import acall, make_ctx
from tools_base import (
    AgentCatalogResult,
    AgentEvent,
    AgentListResult,
    AgentRequestResult,
    AgentSendResult,
    AgentSpawnResult,
    AgentToolRuntime,
    ToolContext,
    ToolError,
)
from tools_base.tools import agents

H = agents.handlers


def real(path: Path) -> str:
    return os.path.realpath(path)


class FakeRuntime:
    """Records every call and answers like a small swarm would."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_with: ToolError | None = None

    def _check(self) -> None:
        if self.fail_with is not None:
            raise self.fail_with

    async def request(
        self, target: str, event: AgentEvent, *, timeout_ms: int | None = None, async_: bool = False
    ) -> AgentRequestResult:
        self.calls.append(("request", target, dict(event), timeout_ms, async_))
        self._check()
        return {
            "target": target,
            "eventId": "evt-1",
            "correlationId": "corr-1",
            "accepted": True,
            "async_": async_,
            "response": None if async_ else f"done: {event.get('input')}",
        }

    async def send(self, target: str, event: AgentEvent) -> AgentSendResult:
        self.calls.append(("send", target, dict(event)))
        self._check()
        return {"target": target, "eventId": "evt-2", "accepted": True}

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> AgentSpawnResult:
        self.calls.append(("spawn", target, instance_key, cwd))
        self._check()
        return {
            "target": target,
            "instanceKey": instance_key or f"{target}-instance-1",
            "spawned": True,
            "cwd": cwd,
        }

    async def list(self, *, include_all: bool = False) -> AgentListResult:
        self.calls.append(("list", include_all))
        self._check()
        return {
            "agents": [
                {
                    "target": "worker",
                    "instanceKey": "w1",
                    "ownerAgent": "coder",
                    "ownerInstanceKey": "default",
                    "createdAt": "2026-01-01T00:00:00Z",
                    "cwd": None,
                },
                {
                    "target": "reviewer",
                    "instanceKey": "r1",
                    "ownerAgent": "coder",
                    "ownerInstanceKey": "default",
                    "createdAt": "2026-01-01T00:00:01Z",
                    "cwd": "/tmp/r1",
                },
            ]
        }

    async def catalog(self) -> AgentCatalogResult:
        self.calls.append(("catalog",))
        self._check()
        return {
            "swarmName": "default",
            "entryAgent": "coder",
            "selfAgent": "coder",
            "availableAgents": ["coder", "reviewer", "worker"],
            "callableAgents": ["reviewer", "worker"],
        }


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime()


@pytest.fixture
def actx(workdir: Path, runtime: FakeRuntime) -> ToolContext:
    typed: AgentToolRuntime = runtime  # the fake satisfies the protocol
    return make_ctx(workdir, typed)


async def test_request_defaults(actx: ToolContext, runtime: FakeRuntime) -> None:
    out = await acall(H["request"], actx, {"target": "worker", "input": "write a file"})
    assert out == {
        "target": "worker",
        "eventId": "evt-1",
        "correlationId": "corr-1",
        "accepted": True,
        "async": False,
        "response": "done: write a file",
    }
    event = {"input": "write a file", "instanceKey": "default", "eventType": "agent.request"}
    assert runtime.calls == [("request", "worker", event, 60_000, False)]


async def test_request_with_every_option(actx: ToolContext, runtime: FakeRuntime) -> None:
    out = await acall(
        H["request"],
        actx,
        {
            "target": "worker",
            "input": "go",
            "instanceKey": "isolated",
            "eventType": "task.assign",
            "timeoutMs": 1500,
            "async": True,
            "metadata": {"priority": 1},
        },
    )
    assert isinstance(out, dict)
    assert out["async"] is True
    assert out["response"] is None
    event = {
        "input": "go",
        "instanceKey": "isolated",
        "eventType": "task.assign",
        "metadata": {"priority": 1},
    }
    assert runtime.calls == [("request", "worker", event, 1500, True)]


@pytest.mark.parametrize(
    ("timeout_ms", "expected"),
    [(2500, 2500), (2500.0, 2500), (0, 60_000), (-5, 60_000), (1.5, 60_000), (True, 60_000),
     ("100", 60_000), (None, 60_000), (1e20, 604_800_000), (10**20, 604_800_000),
     (float("inf"), 60_000)],
)  # fmt: skip
async def test_request_timeout_normalisation(
    actx: ToolContext, runtime: FakeRuntime, timeout_ms: Any, expected: int
) -> None:
    await acall(H["request"], actx, {"target": "worker", "input": "x", "timeoutMs": timeout_ms})
    assert runtime.calls[-1][3] == expected


async def test_runtime_errors_reach_the_model_unchanged(
    actx: ToolContext, runtime: FakeRuntime
) -> None:
    runtime.fail_with = ToolError("cycle a -> b -> a", code="CIRCULAR_CALL_DETECTED")
    with pytest.raises(ToolError) as exc_info:
        await acall(H["request"], actx, {"target": "worker", "input": "x"})
    assert exc_info.value.code == "CIRCULAR_CALL_DETECTED"


async def test_send(actx: ToolContext, runtime: FakeRuntime) -> None:
    out = await acall(H["send"], actx, {"target": "worker", "input": "fyi"})
    assert out == {"target": "worker", "eventId": "evt-2", "accepted": True}
    event = {"input": "fyi", "instanceKey": "default", "eventType": "agent.send"}
    assert runtime.calls == [("send", "worker", event)]


async def test_spawn(actx: ToolContext, runtime: FakeRuntime) -> None:
    out = await acall(H["spawn"], actx, {"target": "worker"})
    assert out == {
        "target": "worker",
        "instanceKey": "worker-instance-1",
        "spawned": True,
        "cwd": None,
    }
    out = await acall(H["spawn"], actx, {"target": "worker", "instanceKey": "w2", "cwd": "jobs/w2"})
    # a relative cwd is the caller's: under its own workdir, not the daemon's directory
    inside = real(actx.workdir / "jobs" / "w2")
    assert out == {"target": "worker", "instanceKey": "w2", "spawned": True, "cwd": inside}
    assert runtime.calls == [("spawn", "worker", None, None), ("spawn", "worker", "w2", inside)]


async def test_spawn_resolves_symlinks_in_cwd_as_the_kernel_would(
    actx: ToolContext, runtime: FakeRuntime, workdir: Path, outside: Path
) -> None:
    """The target agent judges the path the caller sends: it gets the real one, not a name
    whose symlinks or ``..`` could mean another place once followed."""
    (workdir / "out").symlink_to(outside, target_is_directory=True)
    for cwd, sent in [
        ("out/job", real(outside / "job")),
        ("out/../x", real(outside.parent / "x")),  # `..` of the link's target
        ("../../../../..", real(workdir / "../../../../..")),
        (str(workdir / "a" / "." / "b"), real(workdir / "a" / "b")),
    ]:
        runtime.calls.clear()
        await acall(H["spawn"], actx, {"target": "worker", "cwd": cwd})
        assert runtime.calls == [("spawn", "worker", None, sent)], cwd


async def test_list(actx: ToolContext, runtime: FakeRuntime) -> None:
    out = await acall(H["list"], actx, {"includeAll": True})
    assert isinstance(out, dict)
    assert out["count"] == 2
    assert [a["instanceKey"] for a in out["agents"]] == ["w1", "r1"]
    assert out["agents"][0]["cwd"] is None
    assert runtime.calls == [("list", True)]
    await acall(H["list"], actx, {})
    assert runtime.calls[-1] == ("list", False)


async def test_catalog(actx: ToolContext) -> None:
    out = await acall(H["catalog"], actx, {})
    assert out == {
        "swarmName": "default",
        "entryAgent": "coder",
        "selfAgent": "coder",
        "availableCount": 3,
        "callableCount": 2,
        "availableAgents": ["coder", "reviewer", "worker"],
        "callableAgents": ["reviewer", "worker"],
    }


@pytest.mark.parametrize(
    ("export", "args"),
    [
        ("request", {"target": "worker", "input": "x"}),
        ("send", {"target": "worker", "input": "x"}),
        ("spawn", {"target": "worker"}),
        ("list", {}),
        ("catalog", {}),
    ],
)
async def test_without_a_runtime(ctx: ToolContext, export: str, args: dict[str, Any]) -> None:
    assert ctx.runtime is None
    with pytest.raises(ToolError) as exc_info:
        await acall(H[export], ctx, args)
    assert exc_info.value.code == "E_AGENT_RUNTIME_UNAVAILABLE"
    assert exc_info.value.message == "agent runtime interface not available"


@pytest.mark.parametrize(
    ("export", "args"),
    [
        ("request", {"target": "", "input": "x"}),
        ("request", {"target": "worker"}),
        ("request", {"target": "worker", "input": "x", "metadata": "m"}),
        ("request", {"target": "worker", "input": "x", "async": "yes"}),
        ("send", {"target": "worker", "input": 3}),
        ("spawn", {}),
        ("list", {"includeAll": 1}),
    ],
)
async def test_invalid_arguments(actx: ToolContext, export: str, args: dict[str, Any]) -> None:
    with pytest.raises(ToolError) as exc_info:
        await acall(H[export], actx, args)
    assert exc_info.value.code == "E_TOOL_INVALID_ARGS"
