"""The schedules of a ``schedule`` Connection: read from its ``schedules`` setting, checked
field by field, and the fire times of each computed with ``croniter`` in its own time zone.

Every problem is collected with the field it is about (``schedules[1].timezone``), so that
``validate`` names them all at once and the connector, at boot, refuses the lot in one message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from croniter import CroniterBadDateError, CroniterError, croniter

SETTING = "schedules"
"""The Connection ``config`` key holding the schedules (YAML or JSON text)."""
POLICIES = ("skip", "once", "all")
"""What to do with fire times that passed while nothing was waiting for them."""
DEFAULT_POLICY = "skip"
DEFAULT_TIMEZONE = "UTC"
DEFAULT_MAX_CATCH_UP = 10
MAX_CATCH_UP = 1000
MAX_JITTER_SECONDS = 24 * 60 * 60
MAX_SCHEDULES = 100
BUILT_IN_PROPERTIES = frozenset(
    {"schedule", "fire_id", "scheduled_at", "timezone", "catch_up", "delay_seconds"}
)
"""Properties every ``schedule_fired`` event carries; a schedule's own may not reuse them."""
FIELDS = frozenset(
    {
        "name",
        "cron",
        "timezone",
        "jitterSeconds",
        "missed",
        "maxCatchUp",
        "text",
        "instanceKey",
        "properties",
    }
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the schedules: ``field`` is its path inside the Connection's
    config (``schedules[0].cron``)."""

    field: str
    message: str


@dataclass(frozen=True, slots=True)
class Schedule:
    """One declared schedule."""

    name: str
    cron: str
    zone: ZoneInfo
    text: str
    instance_key: str
    jitter: float = 0.0
    """Seconds: each fire waits a random delay from 0 to this, to spread load."""
    missed: str = DEFAULT_POLICY
    max_catch_up: int = DEFAULT_MAX_CATCH_UP
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def timezone(self) -> str:
        """The IANA name of the schedule's zone."""
        return self.zone.key

    @property
    def catch_up_limit(self) -> int:
        """How many missed fire times are fired at most: none for ``skip`` (the newest is
        looked up only to be passed over), one for ``once``."""
        return self.max_catch_up if self.missed == "all" else 1

    def _iterator(self, start: datetime) -> croniter[datetime]:
        return croniter(
            self.cron,
            start.astimezone(self.zone),
            hash_id=self.name.encode(),
            second_at_beginning=_has_seconds(self.cron),
        )

    def next_after(self, moment: datetime) -> datetime:
        """The first fire time strictly after ``moment`` (aware), in UTC."""
        return self._iterator(moment).get_next(datetime).astimezone(UTC)

    def missed_between(
        self, after: datetime, through: datetime, limit: int
    ) -> tuple[list[datetime], bool]:
        """The newest ``limit`` fire times in ``(after, through]``, oldest first and in UTC,
        and whether older ones were left out. Walks back from ``through``, so a long downtime
        of a every-second schedule costs ``limit`` steps, not one per second missed."""
        found: list[datetime] = []
        iterator = self._iterator(through + _ONE_MICROSECOND)
        while len(found) <= limit:
            try:
                moment = iterator.get_prev(datetime).astimezone(UTC)
            except CroniterBadDateError:  # nothing earlier at all
                break
            if moment <= after:
                break
            found.append(moment)
        return list(reversed(found[:limit])), len(found) > limit


def _has_seconds(cron: str) -> bool:
    return len(cron.split()) == 6


def parse_schedules(text: str | None) -> tuple[list[Schedule], list[Problem]]:
    """The schedules ``text`` declares (a YAML or JSON list), and every problem found; the
    schedules are only usable when there are no problems."""
    data = _schedule_list(text)
    if isinstance(data, Problem):
        return [], [data]
    schedules: list[Schedule] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, item in enumerate(data):
        schedule, found = _parse_one(item, f"{SETTING}[{index}]")
        problems.extend(found)
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and name in seen:
            problems.append(
                Problem(f"{SETTING}[{index}].name", f"schedule name {name!r} is used twice")
            )
        seen.add(str(name))
        if schedule is not None:
            schedules.append(schedule)
    return schedules, problems


def _schedule_list(text: str | None) -> list[Any] | Problem:
    """The list ``text`` holds, or why it holds none."""
    if text is None or not text.strip():
        return Problem(SETTING, "no schedules: set config.schedules to a list of schedules")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1} of the value)" if mark is not None else ""
        reason = getattr(exc, "problem", None) or "not YAML"
        return Problem(SETTING, f"cannot be read as YAML{where}: {reason}")
    if not isinstance(data, list) or not data:
        return Problem(SETTING, "must be a non-empty list of schedules")
    if len(data) > MAX_SCHEDULES:
        return Problem(SETTING, f"at most {MAX_SCHEDULES} schedules, got {len(data)}")
    return data


def _parse_one(item: Any, at: str) -> tuple[Schedule | None, list[Problem]]:
    if not isinstance(item, dict):
        return None, [Problem(at, "must be a mapping (name, cron, text, ...)")]
    fields = _Fields(item, at)
    fields.unknown()
    name = fields.name()
    text = fields.text()
    zone = _zone(item.get("timezone", DEFAULT_TIMEZONE), fields.bad)
    cron = fields.cron(name, zone)
    jitter = fields.jitter()
    missed, max_catch_up = fields.catch_up()
    instance_key = fields.instance_key(name)
    properties = fields.properties()
    if fields.problems:
        return None, fields.problems
    assert zone is not None
    assert isinstance(name, str)
    assert isinstance(cron, str)
    assert isinstance(text, str)
    return (
        Schedule(
            name=name,
            cron=cron,
            zone=zone,
            text=text,
            instance_key=instance_key,
            jitter=float(jitter),
            missed=missed,
            max_catch_up=max_catch_up,
            properties=dict(properties),
        ),
        [],
    )


class _Fields:
    """The fields of one schedule item, each read and checked by its own method; the problems
    found, in the order the fields are read."""

    def __init__(self, item: dict[Any, Any], at: str) -> None:
        self.item = item
        self.at = at
        self.problems: list[Problem] = []

    def bad(self, key: str, message: str) -> None:
        label = self.item.get("name")
        owner = f"schedule {label!r}: " if isinstance(label, str) and label else ""
        self.problems.append(Problem(f"{self.at}.{key}", owner + message))

    def unknown(self) -> None:
        for key in sorted(set(self.item) - FIELDS, key=str):
            self.bad(str(key), f"unknown field; the fields are {', '.join(sorted(FIELDS))}")

    def name(self) -> Any:
        name = self.item.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            self.bad(
                "name",
                "required: 1 to 63 letters, digits, '_', '.' or '-', "
                "starting with one of the first two",
            )
        return name

    def text(self) -> Any:
        text = self.item.get("text")
        if not isinstance(text, str) or not text.strip():
            self.bad("text", "required: the input the agent's Turn gets")
        return text

    def cron(self, name: Any, zone: ZoneInfo | None) -> Any:
        cron = self.item.get("cron")
        if not isinstance(cron, str) or not cron.strip():
            self.bad("cron", "required: a cron expression such as '0 9 * * 1-5'")
            return cron
        cron = " ".join(cron.split())
        reason = cron_problem(cron, str(name), zone or ZoneInfo(DEFAULT_TIMEZONE))
        if reason is not None:
            self.bad("cron", reason)
        return cron

    def jitter(self) -> Any:
        jitter = self.item.get("jitterSeconds", 0)
        if not _number(jitter) or not 0 <= jitter <= MAX_JITTER_SECONDS:
            self.bad(
                "jitterSeconds",
                f"must be a number of seconds from 0 to {MAX_JITTER_SECONDS}, got {jitter!r}",
            )
        return jitter

    def catch_up(self) -> tuple[Any, Any]:
        """``missed`` and ``maxCatchUp``, which only goes with ``missed: all``."""
        missed = self.item.get("missed", DEFAULT_POLICY)
        if missed not in POLICIES:
            self.bad("missed", f"must be one of {', '.join(POLICIES)}, got {missed!r}")
        max_catch_up = self.item.get("maxCatchUp", DEFAULT_MAX_CATCH_UP)
        if "maxCatchUp" in self.item and missed != "all":
            self.bad("maxCatchUp", "only applies with missed: all")
        elif not _integer(max_catch_up) or not 1 <= max_catch_up <= MAX_CATCH_UP:
            self.bad(
                "maxCatchUp",
                f"must be a whole number from 1 to {MAX_CATCH_UP}, got {max_catch_up!r}",
            )
        return missed, max_catch_up

    def instance_key(self, name: Any) -> Any:
        instance_key = self.item.get("instanceKey", f"schedule:{name}")
        if not isinstance(instance_key, str) or not instance_key.strip():
            self.bad("instanceKey", "must be a non-empty string")
        return instance_key

    def properties(self) -> dict[Any, Any]:
        properties = self.item.get("properties", {})
        if not isinstance(properties, dict):
            self.bad("properties", "must be a mapping of names to strings")
            return {}
        for key, value in properties.items():
            if key in BUILT_IN_PROPERTIES:
                self.bad(
                    f"properties.{key}", "is set by the connector on every event; use another name"
                )
            elif not isinstance(key, str) or not isinstance(value, str):
                self.bad(f"properties.{key}", f"must be a string (quote it), got {value!r}")
        return properties


def cron_problem(cron: str, name: str, zone: ZoneInfo) -> str | None:
    """Why ``cron`` is no usable expression, or ``None``: 5 fields, 6 with seconds first, or
    an alias such as ``@daily``; it must also fire at some time."""
    fields = len(cron.split())
    if not cron.startswith("@") and fields not in (5, 6):
        return (
            f"{cron!r} has {fields} field{'s' if fields != 1 else ''}; give 5 (minute hour "
            "day-of-month month day-of-week) or 6 (second first)"
        )
    try:
        iterator = croniter(
            cron,
            datetime.now(zone),
            hash_id=name.encode(),
            second_at_beginning=fields == 6,
        )
        iterator.get_next(datetime)
    except CroniterBadDateError:
        return f"{cron!r} never fires"
    except (CroniterError, ValueError, TypeError, KeyError) as exc:
        return f"{cron!r} is not a cron expression: {exc}"
    return None


def _zone(value: Any, bad: Callable[[str, str], None]) -> ZoneInfo | None:
    if not isinstance(value, str) or not value.strip():
        bad("timezone", f"must be an IANA time zone name such as 'Asia/Seoul', got {value!r}")
        return None
    try:
        return ZoneInfo(value.strip())
    except (ZoneInfoNotFoundError, ValueError, OSError):
        bad("timezone", f"unknown time zone {value!r}; use an IANA name such as 'Europe/Berlin'")
        return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_config(config: Mapping[str, str | None]) -> Iterable[tuple[str, str, int | None]]:
    """The problems of a ``schedule`` Connection's config, as ``(field, message, line)`` (the
    line inside the value's text, when known): what ``validate`` reports. A value given by
    ``valueFrom`` (``None`` here) is only known when the connector starts, so it is checked
    then."""
    if SETTING in config and config[SETTING] is None:
        return []
    text = config.get(SETTING)
    _, problems = parse_schedules(text)
    lines = _field_lines(text or "")
    return [(p.field, p.message, _line_of(p.field, lines)) for p in problems]


def _field_lines(text: str) -> dict[str, int]:
    """The 1-based line of each schedule and each of its fields in ``text``."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        return {SETTING: mark.line + 1} if mark is not None else {}
    lines: dict[str, int] = {}
    if not isinstance(node, yaml.SequenceNode):
        return lines
    for index, item in enumerate(node.value):
        at = f"{SETTING}[{index}]"
        lines[at] = item.start_mark.line + 1
        if isinstance(item, yaml.MappingNode):
            for key, value in item.value:
                lines[f"{at}.{key.value}"] = key.start_mark.line + 1
                if isinstance(value, yaml.MappingNode):
                    for inner, _ in value.value:
                        lines[f"{at}.{key.value}.{inner.value}"] = inner.start_mark.line + 1
    return lines


def _line_of(field: str, lines: Mapping[str, int]) -> int | None:
    """The line of ``field``, or of the nearest enclosing field that has one."""
    while field:
        if field in lines:
            return lines[field]
        cut = max(field.rfind("."), field.rfind("["))
        field = field[:cut] if cut > 0 else ""
    return None
