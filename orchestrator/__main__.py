# PYTHON_ARGCOMPLETE_OK: argcomplete completes `goondan` and `python -m orchestrator` by running
# this module (orchestrator/cli/completion.py).
"""``python -m orchestrator`` and the ``goondan`` console script (``orchestrator.__main__:main``)."""

from orchestrator.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
