"""``python -m orchestrator`` and the ``goondan`` console script (``orchestrator.__main__:main``)."""

from orchestrator.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
