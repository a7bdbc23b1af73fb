"""The arithmetic of budgets: tallies, reservations of calls under way, and what fits."""

from __future__ import annotations

import pytest

from goondan.usage import Reached, Usage, first_reached, first_short

LIMITS = {"totalTokens": 600.0}


def test_a_reservation_fits_only_beside_what_is_used_and_reserved() -> None:
    used, reserved = Usage(50, 0), Usage()
    call = Usage(150, 60, calls=1)  # 210
    for _ in range(2):
        assert first_short(LIMITS, used, reserved, call) is None
        reserved.hold(call)
    short = first_short(LIMITS, used, reserved, call)
    assert short == Reached("totalTokens", 50, 600, 420, 210)
    assert short.to_json() == {
        "figure": "totalTokens",
        "used": 50,
        "limit": 600,
        "reserved": 420,
        "needed": 210,
    }


def test_a_reservation_may_fill_a_ceiling_exactly() -> None:
    assert first_short(LIMITS, Usage(300, 0), Usage(90, 0), Usage(200, 10, calls=1)) is None
    short = first_short(LIMITS, Usage(300, 0), Usage(90, 0), Usage(200, 11, calls=1))
    assert short is not None
    assert short.shortfall() == (
        ", 90 more is reserved by calls not yet settled, and this call may take up to 211"
    )


def test_a_reached_ceiling_refuses_even_a_call_reserving_none_of_its_figure() -> None:
    limits = {"outputTokens": 100.0}
    short = first_short(limits, Usage(0, 100), Usage(), Usage(50, 0, calls=1))
    assert short == Reached("outputTokens", 100, 100, 0, 0)
    assert short.reached
    assert short.describe() == "outputTokens 100 of 100"
    assert short.shortfall() == ""  # the message is the one of a reached ceiling
    assert short.to_json() == {"figure": "outputTokens", "used": 100, "limit": 100}
    assert first_reached(limits, Usage(0, 100)) == Reached("outputTokens", 100, 100)


def test_figures_are_judged_in_order_and_every_one_counts() -> None:
    limits = {"inputTokens": 1000.0, "outputTokens": 50.0, "cost": 1.0}
    short = first_short(limits, Usage(10, 10, 0.1), Usage(), Usage(20, 60, 0.1, 1))
    assert short is not None
    assert (short.figure, short.used, short.needed) == ("outputTokens", 10, 60)
    short = first_short(limits, Usage(10, 10, 0.5), Usage(0, 0, 0.3, 1), Usage(20, 20, 0.3, 1))
    assert short is not None
    assert short.figure == "cost"
    assert short.shortfall() == (
        ", 0.3 more is reserved by calls not yet settled, and this call may take up to 0.3"
    )


def test_released_reservations_leave_no_residue() -> None:
    reserved = Usage()
    calls = [Usage(100, 20, 0.1, 1), Usage(7, 3, 0.2, 1), Usage(1, 1, 0.3, 1)]
    for call in calls:
        reserved.hold(call)
    assert (reserved.total_tokens, reserved.calls) == (132, 3)
    assert reserved.cost == pytest.approx(0.6)
    reserved.release(calls[1])
    assert (reserved.input_tokens, reserved.output_tokens, reserved.calls) == (101, 21, 2)
    reserved.release(calls[0])
    reserved.release(calls[2])
    # Float costs added and taken away in another order would leave 1e-17 behind.
    assert reserved.to_json() == Usage().to_json()
    assert reserved.cost == 0.0
