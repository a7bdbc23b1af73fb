"""A request that changes something, asked again of a cluster's next leader, safely.

A client naming several leaders (``--api-url`` repeated) used to give up on a request the
leader took and then lost (``LEADER_LOST``), since whether it ran was not known. With an
``Idempotency-Key`` the daemon runs one Turn per key however often it is asked (the key is
journaled with the request, so the next leader knows it too); so a keyed request is asked
again, of each leader in turn, after ``LEADER_LOST``, a reset connection, or while no leader
answers at all (``NO_LEADER``: an election under way), until the call's own timeout.

Standard library (and :mod:`goondan.errors`) only: the CLI imports this on every call.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from goondan.errors import DeliveryCode

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
RETRIED_CODES = frozenset({DeliveryCode.LEADER_LOST})
"""Codes of an answer that say the request's leader went away: asked again, with its key."""
FIRST_PAUSE_SECONDS = 0.2
"""The pause before asking the leaders again, doubled each time up to :data:`MAX_PAUSE_SECONDS`
(an election takes up to the cluster's expiry, seconds)."""
MAX_PAUSE_SECONDS = 2.0

_T = TypeVar("_T")


def new_key() -> str:
    """A fresh idempotency key (128 random bits, hex, as long as a uuid4's): one per invocation
    of a command, kept across its own retries. Not ``uuid``: it imports ``platform``, a tenth
    of ``send``'s start."""
    return os.urandom(16).hex()


def check_key(key: str) -> str:
    """``key`` if it may be sent as an ``Idempotency-Key`` (1 to 255 printable ASCII
    characters: no line break could end the header early), else ValueError saying why."""
    if not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise ValueError(f"an idempotency key is 1 to {MAX_KEY_LENGTH} characters, not {len(key)}")
    if not all(" " <= ch <= "~" for ch in key):
        raise ValueError("an idempotency key holds printable ASCII characters only")
    return key


def leader_lost(result: object) -> bool:
    """Whether ``result`` (a call's ``(status, body)``) is an answer saying the request's
    leader went away."""
    if not isinstance(result, tuple) or len(result) != 2:
        return False
    status, body = result
    error: Any = body.get("error") if isinstance(body, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return isinstance(status, int) and status >= 500 and code in RETRIED_CODES


def until_answered(
    ask: Callable[[float], _T],
    timeout: float,
    gave_up: tuple[type[Exception], ...],
    on_retry: Callable[[str], None] | None = None,
) -> _T:
    """``ask(seconds_left)`` again, after a growing pause, while it raises one of ``gave_up``
    or answers :func:`leader_lost`, until ``timeout`` seconds have passed: then its last
    error is raised, or its last answer returned. ``on_retry`` is told why before each retry."""
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE_SECONDS
    while True:
        left = deadline - time.monotonic()
        try:
            result = ask(max(left, 0.001))
        except gave_up as exc:
            if time.monotonic() + pause >= deadline:
                raise
            why = str(exc)
        else:
            if not leader_lost(result) or time.monotonic() + pause >= deadline:
                return result
            why = DeliveryCode.LEADER_LOST
        if on_retry is not None:
            on_retry(why)
        time.sleep(pause)
        pause = min(pause * 2, MAX_PAUSE_SECONDS)
