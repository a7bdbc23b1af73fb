"""Token and cost usage, and the budget ceilings it is held against.

One tally type serves every scope a budget can be declared for: a Turn (counted by the agent), a
conversation instance (counted by the agent, kept in the instance's ``metadata.json``) and a trace
(counted by the Orchestrator, across every agent the request reaches). The agent and the
Orchestrator both judge a tally against ceilings with :func:`first_reached`, so both say the same
thing about the same figures.

Under parallel calls a tally alone is not enough: ten calls checked at once all see the same
figures. So each call first *reserves* what it may use (its prompt's estimate in, its
``maxTokens`` out, and their price) in a second tally per scope, the reservations of the calls
under way, and is admitted only if that fits beside what is used and what is reserved
(:func:`first_short`). When the call ends its reservation is given back and what it really used
is counted instead: the unused part is freed, any excess charged.
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

    def hold(self, call: Usage) -> None:
        """Count one call's reservation in (this tally holds the calls under way)."""
        self.add(call.input_tokens, call.output_tokens, call.cost)

    def release(self, call: Usage) -> None:
        """Take one call's reservation back out. Once no call is held every figure is exactly
        zero again, so float costs leave no residue behind."""
        self.calls -= 1
        if self.calls <= 0:
            self.input_tokens = self.output_tokens = self.calls = 0
            self.cost = 0.0
            return
        self.input_tokens -= call.input_tokens
        self.output_tokens -= call.output_tokens
        self.cost -= call.cost

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


NOTHING = Usage()
"""No usage (never added to): the reservations where no call is under way, or the reservation
of a call no budget needs room for."""


class Reached(NamedTuple):
    """A ceiling a tally has reached, or that a call's reservation does not fit under: which
    figure, how much is used, and the limit (with, for a reservation, what the calls under way
    hold and what the call asked for)."""

    figure: str
    used: float
    limit: float
    reserved: float = 0
    """What the calls not yet settled hold of the figure."""
    needed: float = 0
    """What the refused call would have reserved."""

    @property
    def reached(self) -> bool:
        """The tally itself is at or past the ceiling (not only short of room for a call)."""
        return self.used >= self.limit

    def to_json(self) -> dict[str, Any]:
        """The figures an event or an error's details carry: ``figure``, ``used``, ``limit``,
        and ``reserved`` and ``needed`` when the ceiling itself is not reached."""
        row: dict[str, Any] = {"figure": self.figure, "used": self.used, "limit": self.limit}
        if not self.reached:
            row.update(reserved=self.reserved, needed=self.needed)
        return row

    def describe(self) -> str:
        """``totalTokens 1210 of 1000``."""
        return f"{self.figure} {_number(self.used)} of {_number(self.limit)}"

    def shortfall(self) -> str:
        """What a refusal adds when the ceiling itself is not reached: ``, 470 more is reserved
        by calls not yet settled, and this call may take up to 235``; empty when it is."""
        if self.reached:
            return ""
        held = (
            f", {_number(self.reserved)} more is reserved by calls not yet settled"
            if self.reserved
            else ""
        )
        return f"{held}, and this call may take up to {_number(self.needed)}"


def first_reached(limits: Mapping[str, float], used: Usage) -> Reached | None:
    """The first ceiling of ``limits`` (figure → limit) that ``used`` has reached, if any.

    A ceiling is reached when the figure is at or past it: the next model call would take the
    tally over, so it is not made.
    """
    return first_short(limits, used, NOTHING, NOTHING)


def first_short(
    limits: Mapping[str, float], used: Usage, reserved: Usage, call: Usage
) -> Reached | None:
    """The first ceiling of ``limits`` that ``call``'s reservation does not fit under, beside
    what is ``used`` and what the calls under way have ``reserved``; ``None``: it fits.

    A ceiling already reached refuses every call (as :func:`first_reached`), even one that
    reserves nothing of its figure.
    """
    for name in BUDGET_FIGURES:
        limit = limits.get(name)
        if limit is None:
            continue
        spent, held, needed = used.figure(name), reserved.figure(name), call.figure(name)
        if spent >= limit or spent + held + needed > limit:
            return Reached(name, spent, limit, held, needed)
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
