"""``python -m orchestrator`` and the ``goondan`` console script."""

from orchestrator.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
