"""What a delegating caller gets back from a failed Turn."""

from __future__ import annotations

import pytest

from agent_process.runtime import _unwrap
from ipc.delegation import DelegateAnswer
from tools_base import ToolError


def test_a_turn_that_ran_out_of_steps_hands_its_last_text_to_the_caller() -> None:
    answer = {
        "status": "error",
        "output": "three of five files written",
        "error": {"code": "E_MAX_STEPS", "message": "Turn stopped: reached maxStepsPerTurn (32)"},
    }
    with pytest.raises(ToolError) as failed:
        _unwrap(DelegateAnswer.from_wire(answer), "worker")
    assert failed.value.code == "E_MAX_STEPS"
    assert str(failed.value).endswith("Its last text: three of five files written")


def test_a_failure_without_text_says_only_why() -> None:
    answer = {
        "status": "error",
        "output": "",
        "error": {"code": "AGENT_CRASHED", "message": "gone"},
    }
    with pytest.raises(ToolError) as failed:
        _unwrap(DelegateAnswer.from_wire(answer), "worker")
    assert str(failed.value) == "Agent request to 'worker' failed: gone"
