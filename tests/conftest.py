"""Settings every test session shares.

Each daemon a test starts holds a state reserve (``goondan/reserve.py``), 64 MiB of allocated
disk by default; the suite starts hundreds of daemons and keeps their directories until it
ends, so the default would take tens of GB of the machine's disk and, on a smaller disk, fill
it part way through the run (every later test then fails on its temporary directory). The
suite holds a 1 MiB reserve instead: the reserve is still made, released and made again on
every daemon, and the tests of its size set their own.
"""

from __future__ import annotations

import os

import pytest

SUITE_RESERVE_MIB = "1"


def pytest_configure(config: pytest.Config) -> None:
    # The environment is what the daemons, agents and CLIs the tests start inherit.
    os.environ.setdefault("GOONDAN_STATE_RESERVE_MIB", SUITE_RESERVE_MIB)
