"""Replay protection of the HTTP connectors: a window around every signed timestamp, and the
deliveries already taken, remembered on disk across the connector's restarts.

A signature proves who sent a request, not that it is sent for the first time: whoever saw one
(a proxy's log, a capture) could post it again. So:

* a scheme that signs a timestamp (``webhook``, ``slack``, ``discord``) refuses one further
  than its window from now, :data:`WINDOW_SECONDS` unless ``<X>_SIGNATURE_WINDOW_SECONDS``
  says otherwise (1 to :data:`MAX_WINDOW_SECONDS`): past it a copy is worth nothing;
* inside the window, :class:`Deliveries` refuses a second delivery. Each request that leads to
  an event leaves keys (its delivery id, its signature: what the scheme has), remembered until
  its window is over (plus :data:`MARGIN_SECONDS` for clocks that disagree), or for
  :data:`UNTIMED_SECONDS` where nothing signed says when it was sent (GitHub).

The keys live in ``deliveries.json`` in the Connection's state directory
(``ConnectorContext.state_dir``), rewritten with :func:`goondan.files.write_atomic` before the
request is answered, so a connector killed and restarted still refuses what it took.

They are written only once the event is in the ingress journal (:func:`accept_once`): a request
is first *claimed* in memory (a copy arriving meanwhile is refused), its event journaled, and
only then its keys *recorded* on disk. A connector killed between the two has journaled the
event and recorded nothing, so the sender's retry is taken again; the event carries the
request's delivery id (``ConnectorEvent.delivery_id``), from which the runtime derives the
event's id, so the retry is the same event and is not run twice. Recorded first, a kill before
the journal would have refused the retry of an event nobody holds. A key is
stored hashed (a delivery id is whatever the sender put in a header) with the Unix second after
which it may go: the schemes' timestamps are Unix seconds, and these are compared with them. At
most :data:`CAPACITY` are kept; past that the ones expiring first go early (logged once).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from goondan import crashpoints
from goondan.files import write_atomic
from goondan.time import utc_timestamp
from tools_base._connector import ConnectorContext, ConnectorError
from tools_base._context import ToolLogger
from tools_base.connectors import _http
from tools_base.connectors._state import read_state

WINDOW_SECONDS = 5 * 60
"""How far a signed timestamp may be from now (Slack's and Stripe's five minutes)."""
MAX_WINDOW_SECONDS = 60 * 60
"""The widest window a Connection may set: wider would let a copy be replayed for longer."""
MARGIN_SECONDS = 60
"""How much longer than its window a delivery is remembered."""
UNTIMED_SECONDS = 7 * 24 * 60 * 60
"""How long a delivery with no signed timestamp is remembered (GitHub redelivers a delivery on
request for three days)."""
CAPACITY = 10_000
"""Deliveries remembered per Connection at most."""
FILE_NAME = "deliveries.json"
FORMAT_VERSION = 1
"""The format of ``deliveries.json`` this runtime writes and reads."""
_PRUNE_EVERY_SECONDS = 60

# ASCII digits only: str.isdigit() also takes "²", which int() then refuses, and 12 digits
# reach the year 33000 while keeping a header of 5,000 digits from ever reaching int().
_UNIX_SECONDS = re.compile(r"[0-9]{1,12}")


def unix_seconds(raw: str | None) -> int | None:
    """The Unix timestamp a header holds (whole seconds), or ``None`` unless it is 1 to 12
    ASCII digits."""
    text = (raw or "").strip()
    return int(text) if _UNIX_SECONDS.fullmatch(text) else None


def within(timestamp: int, now: float, window: int) -> bool:
    """Whether ``timestamp`` lies no more than ``window`` seconds before or after ``now``."""
    return abs(now - timestamp) <= window


def window_setting(ctx: ConnectorContext, name: str) -> int:
    """The window setting ``name`` in seconds (default :data:`WINDOW_SECONDS`), or
    ConnectorError when it is not a whole number from 1 to :data:`MAX_WINDOW_SECONDS`."""
    raw = ctx.setting(name, default=str(WINDOW_SECONDS))
    return _http._integer(raw, name, 1, MAX_WINDOW_SECONDS)


class Outcome(Enum):
    """What :func:`accept_once` did with a request."""

    ACCEPTED = "accepted"
    """Its event is journaled and its keys recorded: answer it as taken."""
    REPLAY = "replay"
    """Its keys were taken already: answer it as a duplicate, nothing done."""
    REFUSED = "refused"
    """Its event could not be journaled now (too many waiting): answer 503, keys forgotten."""


@dataclass(frozen=True, slots=True)
class Claim:
    """The keys of one request held by :meth:`Deliveries.claim`, hashed."""

    keys: frozenset[str]
    expiry: int


async def accept_once(
    deliveries: Deliveries,
    keys: Collection[str],
    *,
    until: float,
    accept: Callable[[], Awaitable[bool]],
) -> Outcome:
    """Take one request: refuse it if ``keys`` were taken, else ``accept()`` its event (journal
    it; ``False``: not now) and only then record ``keys`` on disk, so that no crash can leave a
    request refused as a replay whose event was never journaled. ``accept`` raising (an event
    the Connector does not declare) forgets the keys and raises."""
    claim = deliveries.claim(keys, until=until)
    if claim is None:
        return Outcome.REPLAY
    try:
        accepted = await accept()
    except BaseException:
        await asyncio.shield(deliveries.release(claim))
        raise
    if not accepted:
        await deliveries.release(claim)
        return Outcome.REFUSED
    await deliveries.record(claim)
    return Outcome.ACCEPTED


class Deliveries:
    """The deliveries one Connection has taken, each remembered until it may be forgotten.

    ``path`` ``None`` keeps them in memory only (a connector run without a state directory).
    """

    def __init__(
        self,
        path: Path | None,
        logger: ToolLogger,
        *,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = path
        self._log = logger
        self._capacity = capacity
        self._clock = clock
        self._expiry: dict[str, int] = {} if path is None else _read(path)
        """Recorded keys (hashed) and the Unix second after which each may go."""
        self._claimed: dict[str, int] = {}
        """Keys of requests whose events are being journaled: refused, not yet written."""
        self._version = 0
        """Counts the changes in memory; ``_written`` is the one on disk."""
        self._written = 0
        self._lock = asyncio.Lock()
        self._next_prune = 0.0
        self._warned_full = False
        self._prune(self._clock())

    @classmethod
    def open(cls, ctx: ConnectorContext) -> Deliveries:
        """The deliveries of ``ctx``'s Connection, read from its state directory (ConnectorError
        when the file there cannot be read or is not one)."""
        directory = ctx.state_dir
        return cls(None if directory is None else directory / FILE_NAME, ctx.logger)

    def __len__(self) -> int:
        return len(self._expiry)

    def claim(self, keys: Collection[str], *, until: float) -> Claim | None:
        """Hold ``keys`` (one request's) in memory until the Unix second ``until``: a copy of
        the request arriving meanwhile is refused. ``None``, nothing held, when one of them is
        held or remembered already: the request is a replay. Nothing is on disk until
        :meth:`record`."""
        now = self._clock()
        hashed = frozenset(_hash(key) for key in keys)
        if any(key in self._claimed or self._expiry.get(key, -1) >= now for key in hashed):
            return None
        expiry = math.ceil(until)
        for key in hashed:
            self._claimed[key] = expiry
        return Claim(hashed, expiry)

    async def record(self, claim: Claim) -> None:
        """Remember ``claim``'s keys on disk (call it once its event is journaled). A write
        that fails is logged: the keys stay remembered in memory and go to disk with the next
        write, and until then a retry after a restart is the same event (its delivery id),
        which the runtime does not run twice."""
        if not claim.keys:
            return
        for key in claim.keys:
            self._claimed.pop(key, None)
            self._expiry[key] = claim.expiry
        self._version += 1
        self._prune(self._clock())
        try:
            await self._save()
        except OSError as exc:
            self._log.error("deliveries not recorded", error=exc.strerror or str(exc))

    async def release(self, claim: Claim) -> None:
        """Forget ``claim``'s keys: its event was not accepted after all (the journal full, the
        event refused), so the sender's retry must be taken."""
        if not claim.keys:
            return
        recorded = False
        for key in claim.keys:
            self._claimed.pop(key, None)
            recorded |= self._expiry.pop(key, None) is not None
        if not recorded:  # never written: nothing on disk to take back
            return
        self._version += 1
        try:
            await self._save()
        except OSError as exc:  # the retry is refused after a restart only
            self._log.warning("released deliveries not recorded", error=exc.strerror or str(exc))

    def _prune(self, now: float) -> None:
        """Forget what expired (at most once a minute: it reads every entry), then the entries
        expiring first while there are more than the capacity."""
        if now >= self._next_prune:
            self._next_prune = now + _PRUNE_EVERY_SECONDS
            for key in [key for key, expiry in self._expiry.items() if expiry < now]:
                del self._expiry[key]
        excess = len(self._expiry) - self._capacity
        if excess <= 0:
            return
        for key in heapq.nsmallest(excess, self._expiry, key=self._expiry.__getitem__):
            del self._expiry[key]
        if not self._warned_full:
            self._warned_full = True
            self._log.warning(
                "delivery cache full: the deliveries expiring first are forgotten early",
                capacity=self._capacity,
            )

    async def _save(self) -> None:
        if self._path is None:
            return
        # Shielded: a request cancelled mid-write must not leave the lock to a second writer
        # while its thread still writes, which could put an older snapshot last.
        writing = asyncio.ensure_future(self._write(self._version))
        writing.add_done_callback(_retrieve)
        await asyncio.shield(writing)

    async def _write(self, wanted: int) -> None:
        """Write the entries unless a write since ``wanted`` was made has put them there; one
        write serves every request that waited for the one before (a group commit)."""
        assert self._path is not None
        async with self._lock:
            if self._written >= wanted:
                return
            version = self._version
            data = {
                "formatVersion": FORMAT_VERSION,
                "savedAt": utc_timestamp(),
                "entries": self._expiry,
            }
            encoded = json.dumps(data, separators=(",", ":")).encode()
            await asyncio.to_thread(write_atomic, self._path, encoded)
            self._written = version
        crashpoints.point("connector.deliveries-recorded")


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _retrieve(task: asyncio.Future[None]) -> None:
    """Mark a write's outcome as seen: its caller may have been cancelled and not await it."""
    if not task.cancelled():
        task.exception()


def _read(path: Path) -> dict[str, int]:
    """The entries ``path`` holds (none when it does not exist), or ConnectorError."""
    data = read_state(path, "delivery cache", FORMAT_VERSION)
    if data is None:
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict) or not all(
        isinstance(expiry, int) and not isinstance(expiry, bool) for expiry in entries.values()
    ):
        raise ConnectorError(
            f"{path} is not a delivery cache: move it away to start with an empty one (a "
            "delivery already taken and still inside its window could then be taken again)"
        )
    return {str(key): expiry for key, expiry in entries.items()}
