"""What every benchmark checks of its own work, so a figure never times something broken.

Not ``assert``: ``python -O`` would skip it. A failed check raises :class:`WrongAnswer`, which
ends the run with a non-zero exit status and what was wrong.
"""

from __future__ import annotations


class WrongAnswer(RuntimeError):
    """A call or a Turn did not do its work (no answer, or not the one it must give): the
    run is void."""


def expect(condition: bool, what: object) -> None:
    """Fail the run unless ``condition`` (``what``: what was got instead, for the message)."""
    if not condition:
        raise WrongAnswer(repr(what))
