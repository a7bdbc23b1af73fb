"""Reading what an agent's instances record of their model usage."""

from __future__ import annotations

import json
import time
from pathlib import Path


def metadata_usage(state_dir: Path, agent: str, *, calls: int) -> None:
    """Wait (at most 10 s) until ``agent``'s one instance records ``calls`` model calls."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for path in state_dir.glob(f"agents/{agent}/instances/*/metadata.json"):
            try:
                usage = json.loads(path.read_text()).get("usage") or {}
            except (OSError, ValueError):  # replaced while read
                continue
            if usage.get("calls") == calls:
                return
        time.sleep(0.01)
    raise AssertionError(f"{agent}'s instance never recorded {calls} model calls")
