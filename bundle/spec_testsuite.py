"""``kind: TestSuite``: conversations to run through a swarm, and what each must show.

A case sends one input (or several: successive Turns of one conversation) to an agent of the
swarm and checks the outcome: the answer's text, the agents that received a handoff, the tool
calls made, the Steps and tokens spent, and that nothing failed. ``goondan test`` runs the
cases on a real daemon, answering model calls from recorded cassettes.

Cross-resource rules (the agents and tools a case names exist in its swarm) are
:func:`check_testsuite`, called by :mod:`bundle.rules`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from bundle.spec_base import RESOURCE_NAME, RegexText, Spec

CASE_NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,98}[A-Za-z0-9])?$"
"""A case's name: it names its cassette file (``<suite>/<case>.yaml``) and its JUnit test."""


class AnswerExpectation(Spec):
    """What the final answer's text must show; each given check must hold."""

    contains: list[str] | None = Field(
        default=None, description="Text (or texts) the answer contains, case-sensitive."
    )
    matches: RegexText | None = Field(
        default=None, description="A regular expression the answer matches (re.search)."
    )
    equals: str | None = Field(default=None, description="The whole answer, exactly.")

    @field_validator("contains", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _something(self) -> AnswerExpectation:
        if self.contains is None and self.matches is None and self.equals is None:
            raise ValueError("give at least one of `contains`, `matches` or `equals`")
        return self


class ToolCallExpectation(Spec):
    """One tool call: its full name and a subset of its arguments."""

    name: str = Field(
        min_length=1, description="The tool's full name, `{resource}__{export}`, e.g. bash__exec."
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="Arguments the call must have (a subset: other arguments may be there; "
        "nested mappings are matched as subsets too).",
    )


def _calls_list(value: Any) -> Any:
    return {"calls": value} if isinstance(value, list) else value


class ToolsExpectation(Spec):
    """The tool calls a case must make (a list is taken as ``{calls: [...]}``)."""

    calls: list[ToolCallExpectation] = Field(description="The calls, each a {name, args}.")
    in_order: bool = Field(
        default=True,
        description="The calls appear in this order among every call made (others may come "
        "between); false: each appears somewhere.",
    )


class Expectation(Spec):
    """What a case checks once its last Turn answered."""

    answer: AnswerExpectation | None = Field(
        default=None, description="Checks on the last Turn's answer text."
    )
    handoffs: list[str] | None = Field(
        default=None,
        description="The agents that received an agents__request, in order (an empty list: "
        "no handoff at all).",
    )
    tools: Annotated[ToolsExpectation | None, BeforeValidator(_calls_list)] = Field(
        default=None, description="Tool calls that must be made: a list of {name, args}."
    )
    max_steps: int | None = Field(
        default=None, ge=1, description="At most this many Steps over every Turn of the case."
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="At most this many tokens over every Turn of the case."
    )
    no_errors: bool = Field(
        default=True,
        description="Every Turn answers without error and no tool call fails (default true).",
    )


class TestCase(Spec):
    """One conversation and its expectations."""

    __test__ = False  # not a pytest class, whatever its name

    name: str = Field(pattern=CASE_NAME_PATTERN, description="Unique within the suite.")
    agent: str | None = Field(
        default=None, description="The agent to ask (default: the Swarm's entry agent)."
    )
    instance_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="The conversation's instance key (default: the case's name).",
    )
    input: Annotated[list[str], Field(min_length=1)] = Field(
        description="The user's message, or a list of messages: successive Turns of one "
        "conversation."
    )
    expect: Expectation = Field(default_factory=Expectation, description="What must hold.")

    @field_validator("input", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class Fixture(Spec):
    """A file placed into an agent's workspace before each case runs."""

    path: str = Field(min_length=1, description="Where, relative to the workspace.")
    content: str | None = Field(default=None, description="The file's text.")
    source: str | None = Field(
        default=None, description="A file beside the suite to copy (instead of `content`)."
    )
    agents: list[str] | None = Field(
        default=None, description="Whose workspaces (default: every agent of the swarm)."
    )

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts:
            raise ValueError(f"{value!r} must be a relative path inside the workspace")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> Fixture:
        if (self.content is None) == (self.source is None):
            raise ValueError("give exactly one of `content` or `source`")
        return self


class TestSuiteSpec(Spec):
    """``spec`` of a TestSuite."""

    __test__ = False

    swarm: str | None = Field(
        default=None, description="The Swarm the cases run (default: the bundle's only one)."
    )
    cases: Annotated[list[TestCase], Field(min_length=1)] = Field(description="The cases.")
    fixtures: list[Fixture] = Field(
        default_factory=list, description="Files placed into workspaces before every case."
    )

    @field_validator("swarm")
    @classmethod
    def _swarm_name(cls, value: str | None) -> str | None:
        if value is not None and not RESOURCE_NAME.match(value):
            raise ValueError(f"{value!r} is not a resource name")
        return value


# -- cross-resource rules ------------------------------------------------------------------------

Report = Callable[[str, tuple[str | int, ...], str | None], None]
"""``report(message, field path, suggestion)``."""


def did_you_mean(name: str, known: list[str]) -> str:
    """A suggestion naming the closest of ``known`` to ``name``, or listing them."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]!r}?"
    return "use one of: " + ", ".join(sorted(known)) if known else "declare it first"


def check_testsuite(
    spec: TestSuiteSpec, agents: list[str], tools: list[str], report: Report
) -> None:
    """Report every agent and tool ``spec`` names that the swarm (its ``agents``, the tool
    names they can call, ``tools``) does not have; duplicate case names too."""
    seen: set[str] = set()
    for i, case in enumerate(spec.cases):
        where: tuple[str | int, ...] = ("spec", "cases", i)
        if case.name in seen:
            report(f"case name {case.name!r} is used twice", (*where, "name"), "rename one")
        seen.add(case.name)
        if case.agent is not None and case.agent not in agents:
            report(
                f"agent {case.agent!r} is not one of the swarm's agents",
                (*where, "agent"),
                did_you_mean(case.agent, agents),
            )
        expect = case.expect
        for j, agent in enumerate(expect.handoffs or ()):
            if agent not in agents:
                report(
                    f"handoff to {agent!r}, which is not one of the swarm's agents",
                    (*where, "expect", "handoffs", j),
                    did_you_mean(agent, agents),
                )
        for j, call in enumerate(expect.tools.calls if expect.tools else ()):
            if tools and call.name not in tools:
                report(
                    f"tool {call.name!r} is not offered to any agent of the swarm",
                    (*where, "expect", "tools", j, "name"),
                    did_you_mean(call.name, tools),
                )
    for i, fixture in enumerate(spec.fixtures):
        for j, agent in enumerate(fixture.agents or ()):
            if agent not in agents:
                report(
                    f"fixture for agent {agent!r}, which is not one of the swarm's agents",
                    ("spec", "fixtures", i, "agents", j),
                    did_you_mean(agent, agents),
                )
