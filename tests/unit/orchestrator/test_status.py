"""Crash-loop backoff and exit causes."""

from __future__ import annotations

import pytest

from orchestrator.status import EXIT_BOOT_FAILURE, ExitInfo, ProcessStatus, next_restart_delay


@pytest.mark.parametrize(
    ("crashes", "delay"),
    [
        (0, 0.0),
        (1, 0.0),
        (5, 0.0),
        (6, 1.0),
        (7, 2.0),
        (8, 4.0),
        (13, 128.0),
        (14, 256.0),
        (15, 300.0),
        (10_000, 300.0),
    ],
)
def test_backoff_table(crashes: int, delay: float) -> None:
    """5 immediate restarts, then min(1 s · 2^(n−6), 300 s)."""
    assert next_restart_delay(crashes) == delay


def test_backoff_parameters() -> None:
    assert next_restart_delay(3, threshold=2, initial=0.5) == 0.5
    assert next_restart_delay(4, threshold=2, initial=0.5, maximum=0.75) == 0.75


def test_exit_info() -> None:
    assert ExitInfo(-9).to_json() == {
        "exitCode": None,
        "signal": "SIGKILL",
        "reason": "signal SIGKILL",
    }
    assert ExitInfo(1).to_json() == {"exitCode": 1, "signal": None, "reason": "exit code 1"}
    assert ExitInfo(0).clean
    assert not ExitInfo(1).clean
    assert ExitInfo(EXIT_BOOT_FAILURE).boot_failure


def test_statuses_are_the_seven_of_the_design_and_not_started() -> None:
    assert [s.value for s in ProcessStatus] == [
        "notStarted",
        "spawning",
        "idle",
        "processing",
        "draining",
        "terminated",
        "crashed",
        "crashLoopBackOff",
    ]
