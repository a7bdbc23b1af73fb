"""Token and cost usage, and the budget ceilings it is held against.

One tally type serves every scope a budget can be declared for: a Turn (counted by the agent), a
conversation instance (counted by the agent, kept in the instance's ``metadata.json``) and a trace
(counted by the Orchestrator, across every agent the request reaches). The agent and the
Orchestrator both judge a tally against ceilings with :func:`first_reached`, so both say the same
thing about the same figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

BUDGET_FIGURES = ("inputTokens", "outputTokens", "totalTokens", "cost")
"""What a budget can cap, in the order ceilings are checked (and named in errors)."""


class Usage:
    """What model calls consumed: tokens in and out, cost, and how many calls."""

    __slots__ = ("calls", "cost", "input_tokens", "output_tokens")

    def __init__(
        self, input_tokens: int = 0, output_tokens: int = 0, cost: float = 0.0, calls: int = 0
    ) -> None:
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cost = cost
        self.calls = calls

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def add(self, input_tokens: int, output_tokens: int, cost: float = 0.0) -> None:
        """Count one model call."""
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cost += cost
        self.calls += 1

    def figure(self, name: str) -> float:
        """One of :data:`BUDGET_FIGURES`."""
        if name == "inputTokens":
            return self.input_tokens
        if name == "outputTokens":
            return self.output_tokens
        if name == "totalTokens":
            return self.total_tokens
        if name == "cost":
            return self.cost
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """``{inputTokens, outputTokens, totalTokens, cost, calls}`` (cost rounded to 1e-6)."""
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.total_tokens,
            "cost": round(self.cost, 6),
            "calls": self.calls,
        }

    @classmethod
    def from_json(cls, data: Any) -> Usage:
        """The tally :meth:`to_json` wrote; anything unreadable counts as zero."""
        if not isinstance(data, dict):
            return cls()

        def number(key: str) -> float:
            value = data.get(key)
            return value if isinstance(value, int | float) and not isinstance(value, bool) else 0

        return cls(
            int(number("inputTokens")),
            int(number("outputTokens")),
            float(number("cost")),
            int(number("calls")),
        )

    def __repr__(self) -> str:
        return f"Usage({self.to_json()})"


class Reached(NamedTuple):
    """A ceiling a tally has reached: which figure, how much is used, and the limit."""

    figure: str
    used: float
    limit: float

    def describe(self) -> str:
        """``totalTokens 1210 of 1000``."""
        return f"{self.figure} {_number(self.used)} of {_number(self.limit)}"


def first_reached(limits: Mapping[str, float], used: Usage) -> Reached | None:
    """The first ceiling of ``limits`` (figure → limit) that ``used`` has reached, if any.

    A ceiling is reached when the figure is at or past it: the next model call would take the
    tally over, so it is not made.
    """
    for name in BUDGET_FIGURES:
        limit = limits.get(name)
        if limit is not None and used.figure(name) >= limit:
            return Reached(name, used.figure(name), limit)
    return None


def remaining(limits: Mapping[str, float], used: Usage) -> dict[str, float]:
    """What is left of each ceiling (never below zero)."""
    return {
        name: _rounded(max(0.0, limit - used.figure(name)))
        for name in BUDGET_FIGURES
        if (limit := limits.get(name)) is not None
    }


def _rounded(value: float) -> float:
    return int(value) if float(value).is_integer() else round(value, 6)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6f}".rstrip("0")
