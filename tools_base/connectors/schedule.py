"""``schedule``: periodic jobs; each schedule's cron expression fires an event into the swarm.

The Connection's ``config.schedules`` holds the schedules as YAML (or JSON) text, a list::

    config:
      schedules:
        value: |
          - name: digest
            cron: "0 9 * * 1-5"        # 09:00 on weekdays
            timezone: Asia/Seoul
            jitterSeconds: 30
            missed: once
            text: Write the morning digest.

Fields of a schedule:

``name`` (required)
    1 to 63 letters, digits, ``_``, ``.`` or ``-``; unique within the Connection.
``cron`` (required)
    Five fields (minute hour day-of-month month day-of-week), six with a seconds field first
    (``*/10 * * * * *``: every ten seconds), or an alias such as ``@hourly`` or ``@daily``;
    read by ``croniter`` (``H`` in a field picks a value from the schedule's name).
``timezone``
    The IANA zone the expression is read in; default ``UTC``. Across a daylight-saving change
    the fire times are croniter's: a time the change skips fires at the first instant after the
    gap (02:30 on the spring-forward day fires at 03:00), a time that happens twice fires twice.
``jitterSeconds``
    Each fire waits a random delay from 0 to this many seconds after its time (default 0), so
    that many swarms on one schedule do not all call their model at once. Keep it below the
    interval: a delay that runs past the next fire time makes that one a missed one.
``missed``
    What to do with fire times that passed while the connector was not waiting for them (the
    daemon was down, or the previous event was held back by back-pressure): ``skip`` (the
    default) lets them go, ``once`` fires one catch-up for the newest, ``all`` fires each of
    them, at most ``maxCatchUp`` (default 10, up to 1000): the newest ones.
``text`` (required)
    The input of the agent's Turn.
``instanceKey``
    The conversation the event belongs to; default ``schedule:<name>``, one per schedule.
``properties``
    More string properties for the event, for ingress rules to match on.

Event ``schedule_fired`` with properties (strings): ``schedule`` (the name), ``fire_id``
(``<name>@<fire time in UTC>``), ``scheduled_at`` (the fire time in the schedule's zone, ISO
8601), ``timezone``, ``catch_up`` (``true`` for a missed fire time fired late), and
``delay_seconds`` (the jitter drawn), plus the schedule's own ``properties``. Routing is the
Connection's ``ingress.rules``, as for every connector: match ``properties: {schedule: digest}``
to send a schedule to an agent of its own.

**Across restarts.** For each schedule, the fire time up to which every fire time has been dealt
with (fired or skipped) is kept in ``schedule-state.json`` in the Connection's state directory,
written (with :func:`goondan.files.write_atomic`) *before* the event is emitted: a connector
killed between the two loses that fire, it never fires it twice. On its first start a schedule
records the start time, so a downtime before its first fire counts as missed too.

``validate`` checks the schedules (every field, the expression, the zone) and names the field;
a ``valueFrom`` value is checked when the connector starts, where a bad one stops it with
``E_CONNECTOR_CONFIG``.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from goondan.files import write_atomic
from goondan.time import parse_timestamp, utc_timestamp
from tools_base import ConnectorContext, ConnectorError, ConnectorEvent, TextMessage
from tools_base.connectors._schedules import (
    SETTING,
    Schedule,
    check_config,
    parse_schedules,
)
from tools_base.connectors._state import read_state

__all__ = ["EVENT", "STATE_FILE", "Schedule", "ScheduleState", "check_config", "run"]

EVENT = "schedule_fired"
STATE_FILE = "schedule-state.json"
FORMAT_VERSION = 1
"""The format of ``schedule-state.json`` this runtime writes and reads."""
MAX_NAP_SECONDS = 30.0
"""The longest single sleep while waiting for a fire time: the wall clock is read again after
it, so a clock that was set, or a machine that was suspended, is noticed."""

Clock = Callable[[], datetime]


def _now() -> datetime:
    return datetime.now(UTC)


def read_schedules(ctx: ConnectorContext) -> list[Schedule]:
    """The Connection's schedules; ConnectorError naming every problem."""
    schedules, problems = parse_schedules(ctx.config.get(SETTING))
    if problems:
        raise ConnectorError("schedule: " + "; ".join(f"{p.field}: {p.message}" for p in problems))
    return schedules


class ScheduleState:
    """Per schedule, the fire time through which all were dealt with, on disk when ``path`` is
    set (``None``: in memory only, nothing survives a restart)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._through, self._fired = ({}, {}) if path is None else _read(path)
        self._lock = asyncio.Lock()

    @classmethod
    def open(cls, ctx: ConnectorContext) -> ScheduleState:
        """The state of ``ctx``'s Connection (ConnectorError when its file is unreadable)."""
        directory = ctx.state_dir
        return cls(None if directory is None else directory / STATE_FILE)

    def through(self, name: str) -> datetime | None:
        """The fire time of ``name`` up to which every one was dealt with, if known."""
        return self._through.get(name)

    def keep_only(self, names: set[str]) -> None:
        """Forget schedules no longer declared (written with the next record)."""
        for name in set(self._through) - names:
            del self._through[name]
            self._fired.pop(name, None)

    async def record(self, name: str, through: datetime, *, fired: bool) -> None:
        """Remember ``through`` for ``name``, on disk before this returns (OSError if not)."""
        async with self._lock:
            self._through[name] = through
            if fired:
                self._fired[name] = through
            if self._path is None:
                return
            entries = {
                key: {
                    "through": _iso(value),
                    **({"lastFired": _iso(self._fired[key])} if key in self._fired else {}),
                }
                for key, value in self._through.items()
            }
            data = {
                "formatVersion": FORMAT_VERSION,
                "savedAt": utc_timestamp(),
                "schedules": entries,
            }
            encoded = json.dumps(data, separators=(",", ":")).encode()
            # Shielded: a cancelled fire must not leave a half-done write racing the next one.
            await asyncio.shield(asyncio.to_thread(write_atomic, self._path, encoded))


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _read(path: Path) -> tuple[dict[str, datetime], dict[str, datetime]]:
    """The ``through`` and ``lastFired`` times ``path`` holds (none when it does not exist), or
    ConnectorError."""
    data = read_state(path, "schedule state", FORMAT_VERSION)
    if data is None:
        return {}, {}
    entries = data.get("schedules")
    through: dict[str, datetime] = {}
    fired: dict[str, datetime] = {}
    try:
        if not isinstance(entries, dict):
            raise ValueError("no schedules")
        for name, entry in entries.items():
            through[str(name)] = _moment(entry["through"])
            if "lastFired" in entry:
                fired[str(name)] = _moment(entry["lastFired"])
    except (ValueError, TypeError, KeyError):
        raise ConnectorError(
            f"{path} is not a schedule state: move it away to start afresh (fire times missed "
            "while the connector was down are then not caught up)"
        ) from None
    return through, fired


def _moment(text: str) -> datetime:
    return parse_timestamp(text)


async def run(ctx: ConnectorContext) -> None:
    """Fire every schedule at its times until cancelled."""
    schedules = read_schedules(ctx)
    state = ScheduleState.open(ctx)
    state.keep_only({s.name for s in schedules})
    async with asyncio.TaskGroup() as group:
        for schedule in schedules:
            keeper = Keeper(ctx, schedule, state)
            group.create_task(keeper.run(), name=f"schedule:{schedule.name}")


class Keeper:
    """The loop of one schedule: wait for its next fire time, record it, emit it."""

    def __init__(
        self,
        ctx: ConnectorContext,
        schedule: Schedule,
        state: ScheduleState,
        clock: Clock = _now,
        rng: random.Random | None = None,
    ) -> None:
        self.ctx = ctx
        self.schedule = schedule
        self.state = state
        self.clock = clock
        self.rng = rng or random.Random()

    def jitter(self) -> float:
        """A delay drawn from 0 to the schedule's jitter, in seconds."""
        limit = self.schedule.jitter
        return self.rng.uniform(0.0, limit) if limit > 0 else 0.0

    async def run(self) -> None:
        """Until cancelled."""
        s = self.schedule
        through = self.state.through(s.name)
        now = self.clock()
        if through is None:  # first start: from now on, so a downtime later counts as missed
            through = now
            await self.state.record(s.name, through, fired=False)
        elif through > now:
            self.ctx.logger.warning(
                "schedule state is ahead of the clock; waiting for it",
                schedule=s.name,
                through=_iso(through),
            )
        armed = False
        while True:
            through = await self.catch_up(through)
            due = s.next_after(through)
            delay = self.jitter()
            fields = {"schedule": s.name, "next_fire": due.astimezone(s.zone).isoformat()}
            if not armed:
                armed = True
                self.ctx.logger.info("schedule armed", cron=s.cron, timezone=s.timezone, **fields)
            self.ctx.logger.debug("schedule waiting", delay_seconds=round(delay, 3), **fields)
            await self._sleep_until(due.timestamp() + delay)
            await self.fire(due, delay, catch_up=False)
            through = due

    async def catch_up(self, through: datetime) -> datetime:
        """Deal with the fire times in ``(through, now]`` by the schedule's policy; the new
        ``through``."""
        s = self.schedule
        missed, more = s.missed_between(through, self.clock(), s.catch_up_limit)
        if not missed:
            return through
        newest = missed[-1]
        if s.missed == "skip":
            self.ctx.logger.info(
                "missed fire times skipped", schedule=s.name, newest=_iso(newest), policy="skip"
            )
            await self.state.record(s.name, newest, fired=False)
            return newest
        if more:
            self.ctx.logger.warning(
                "more fire times missed than are caught up; the older ones are skipped",
                schedule=s.name,
                caught_up=len(missed),
                policy=s.missed,
            )
        for moment in missed:
            await self.fire(moment, 0.0, catch_up=True)
        return newest

    async def fire(self, moment: datetime, delay: float, *, catch_up: bool) -> None:
        """Record ``moment`` as dealt with, then emit its event: a crash between the two loses
        the fire rather than doubling it."""
        s = self.schedule
        await self.state.record(s.name, moment, fired=True)
        fire_id = f"{s.name}@{_iso(moment)}"
        properties = {
            **s.properties,
            "schedule": s.name,
            "fire_id": fire_id,
            "scheduled_at": moment.astimezone(s.zone).isoformat(),
            "timezone": s.timezone,
            "catch_up": "true" if catch_up else "false",
            "delay_seconds": f"{delay:.3f}",
        }
        event = ConnectorEvent(EVENT, TextMessage(s.text), s.instance_key, properties)
        try:
            await self.ctx.emit(event)
        except ValueError as exc:
            self.ctx.logger.error("schedule event refused", schedule=s.name, reason=str(exc))
            return
        self.ctx.logger.info("schedule fired", schedule=s.name, fire_id=fire_id, catch_up=catch_up)

    async def _sleep_until(self, timestamp: float) -> None:
        while True:
            remaining = timestamp - self.clock().timestamp()
            if remaining <= 0:
                return
            await asyncio.sleep(min(remaining, MAX_NAP_SECONDS))
