"""The ``schedule`` connector: its schedules checked field by field, fire times in their zone
(a daylight-saving day included), events fired on time with a bounded jitter, the state written
before each event, and missed fire times skipped or caught up after a downtime."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from bundle import load_bundle
from tests.support.connector_run import LoggingContext, running
from tools_base import ConnectorError, ConnectorEvent
from tools_base.connectors import schedule
from tools_base.connectors._schedules import (
    BUILT_IN_PROPERTIES,
    Schedule,
    check_config,
    parse_schedules,
)

EVERY_SECOND = "* * * * * *"


def schedules_text(*items: dict[str, Any]) -> str:
    return yaml.safe_dump(list(items), sort_keys=False)


def one(**fields: Any) -> Schedule:
    item = {"name": "job", "cron": "0 9 * * *", "text": "go", **fields}
    [parsed], problems = parse_schedules(schedules_text(item))
    assert problems == []
    return parsed


def problems_of(**fields: Any) -> dict[str, str]:
    item = {"name": "job", "cron": "0 9 * * *", "text": "go", **fields}
    return {
        field: message for field, message, _ in check_config({"schedules": schedules_text(item)})
    }


def context(tmp_path: Path, *items: dict[str, Any]) -> LoggingContext:
    return LoggingContext(
        config={"schedules": schedules_text(*items)},
        declared={schedule.EVENT},
        state_dir=tmp_path,
    )


def write_state(directory: Path, through: dict[str, datetime]) -> None:
    """The state file as the connector writes it."""
    entries = {
        name: {"through": moment.astimezone(UTC).isoformat().replace("+00:00", "Z")}
        for name, moment in through.items()
    }
    data = {"formatVersion": 1, "savedAt": "2026-01-01T00:00:00Z", "schedules": entries}
    (directory / schedule.STATE_FILE).write_text(json.dumps(data))


def stored_through(directory: Path, name: str) -> datetime:
    data = json.loads((directory / schedule.STATE_FILE).read_text())
    return datetime.fromisoformat(data["schedules"][name]["through"])


def at(event: ConnectorEvent) -> datetime:
    return datetime.fromisoformat(event.properties["scheduled_at"])


def far_hourly(now: datetime) -> str:
    """An hourly expression whose fire times are half an hour from ``now``: nothing fires
    while a test runs, and each hour before it is a missed fire time."""
    return f"{(now.minute + 30) % 60} * * * *"


# -- the schedules, checked -----------------------------------------------------------------


def test_a_schedule_with_every_field() -> None:
    item = {
        "name": "digest",
        "cron": "*/10 * * * * *",
        "timezone": "Asia/Seoul",
        "jitterSeconds": 2.5,
        "missed": "all",
        "maxCatchUp": 3,
        "text": "Write the digest.",
        "instanceKey": "digests",
        "properties": {"team": "ops"},
    }
    [parsed], problems = parse_schedules(json.dumps([item]))  # JSON is YAML too
    assert problems == []
    assert (parsed.name, parsed.timezone, parsed.jitter, parsed.missed) == (
        "digest",
        "Asia/Seoul",
        2.5,
        "all",
    )
    assert (parsed.max_catch_up, parsed.instance_key, dict(parsed.properties)) == (
        3,
        "digests",
        {"team": "ops"},
    )
    defaults = one()
    assert (defaults.timezone, defaults.jitter, defaults.missed) == ("UTC", 0.0, "skip")
    assert defaults.instance_key == "schedule:job"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"cron": "61 9 * * *"}, "cron", "not a cron expression"),
        ({"cron": "* * *"}, "cron", "has 3 fields"),
        ({"cron": "0 0 0 1 1 * 2030"}, "cron", "has 7 fields"),
        ({"cron": "0 0 31 2 *"}, "cron", "never fires"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "unknown time zone"),
        ({"timezone": "../../etc/passwd"}, "timezone", "unknown time zone"),
        ({"jitterSeconds": -1}, "jitterSeconds", "from 0 to"),
        ({"jitterSeconds": "5"}, "jitterSeconds", "must be a number"),
        ({"missed": "sometimes"}, "missed", "one of skip, once, all"),
        ({"maxCatchUp": 5}, "maxCatchUp", "only applies with missed: all"),
        ({"missed": "all", "maxCatchUp": 0}, "maxCatchUp", "from 1 to"),
        ({"text": " "}, "text", "required"),
        ({"name": "no spaces"}, "name", "required"),
        ({"instanceKey": ""}, "instanceKey", "non-empty"),
        ({"properties": {"schedule": "x"}}, "properties.schedule", "set by the connector"),
        ({"properties": {"count": 3}}, "properties.count", "must be a string"),
        ({"colour": "red"}, "colour", "unknown field"),
    ],
)
def test_a_bad_field_is_named(fields: dict[str, Any], field: str, words: str) -> None:
    found = problems_of(**fields)
    assert list(found) == [f"schedules[0].{field}"], found
    assert words in found[f"schedules[0].{field}"]


def test_every_problem_is_reported_with_its_line() -> None:
    text = (
        "- name: a\n"
        "  cron: '0 9 * * *'\n"
        "  text: hi\n"
        "- name: a\n"
        "  cron: '0 9 * * *'\n"
        "  timezone: Nowhere/Land\n"
        "  text: hi\n"
    )
    found = {field: (message, line) for field, message, line in check_config({"schedules": text})}
    assert found["schedules[1].timezone"][1] == 6
    assert "'a'" in found["schedules[1].timezone"][0]  # the schedule is named
    assert found["schedules[1].name"] == ("schedule name 'a' is used twice", 4)


@pytest.mark.parametrize(
    ("text", "words"),
    [(None, "no schedules"), ("- [unclosed", "cannot be read as YAML"), ("name: x", "list")],
)
def test_the_setting_itself_is_checked(text: str | None, words: str) -> None:
    config = {} if text is None else {"schedules": text}
    [(field, message, _)] = check_config(config)
    assert field == "schedules"
    assert words in message


def test_a_value_from_the_environment_is_checked_at_start_only() -> None:
    assert list(check_config({"schedules": None})) == []


async def test_a_bad_schedule_stops_the_connector_naming_the_field(tmp_path: Path) -> None:
    ctx = context(tmp_path, {"name": "a", "cron": "0 9 * * *", "text": "x", "timezone": "Nope"})
    with pytest.raises(ConnectorError, match=r"schedules\[0\]\.timezone: .*unknown time zone"):
        await schedule.run(ctx)


# -- fire times ------------------------------------------------------------------------------


def test_fire_times_are_read_in_the_schedules_zone() -> None:
    start = datetime(2026, 6, 1, 12, tzinfo=UTC)
    assert one(timezone="Asia/Seoul").next_after(start) == datetime(2026, 6, 2, 0, tzinfo=UTC)
    assert one(timezone="UTC").next_after(start) == datetime(2026, 6, 2, 9, tzinfo=UTC)
    assert one(timezone="America/New_York").next_after(start) == datetime(
        2026, 6, 1, 13, tzinfo=UTC
    )


def test_a_daylight_saving_day() -> None:
    # Berlin moves from UTC+1 to UTC+2 on 2026-03-29: 09:00 stays 09:00 local.
    berlin = one(timezone="Europe/Berlin")
    first = berlin.next_after(datetime(2026, 3, 28, 12, tzinfo=UTC))
    second = berlin.next_after(first)
    assert (first, second) == (
        datetime(2026, 3, 29, 7, tzinfo=UTC),
        datetime(2026, 3, 30, 7, tzinfo=UTC),
    )
    assert first.astimezone(ZoneInfo("Europe/Berlin")).hour == 9
    assert berlin.next_after(datetime(2026, 3, 27, 12, tzinfo=UTC)) == datetime(
        2026, 3, 28, 8, tzinfo=UTC
    )
    # New York skips 02:00-03:00 on 2026-03-08: a 02:30 job runs at 03:00 that day.
    skipped = one(cron="30 2 * * *", timezone="America/New_York")
    assert skipped.next_after(datetime(2026, 3, 8, 5, tzinfo=UTC)) == datetime(
        2026, 3, 8, 7, tzinfo=UTC
    )
    # ... and repeats 01:00-02:00 on 2026-11-01: a 01:30 job runs in both.
    repeated = one(cron="30 1 * * *", timezone="America/New_York")
    missed, more = repeated.missed_between(
        datetime(2026, 11, 1, 0, tzinfo=UTC), datetime(2026, 11, 1, 12, tzinfo=UTC), 10
    )
    assert (missed, more) == (
        [datetime(2026, 11, 1, 5, 30, tzinfo=UTC), datetime(2026, 11, 1, 6, 30, tzinfo=UTC)],
        False,
    )


def test_missed_fire_times_are_the_newest_and_bounded() -> None:
    every_second = one(cron=EVERY_SECOND, missed="all", maxCatchUp=3)
    now = datetime(2026, 5, 1, 12, 0, 10, 500_000, tzinfo=UTC)
    # Thirty days of one fire a second: only the newest three are looked at.
    missed, more = every_second.missed_between(now - timedelta(days=30), now, 3)
    assert missed == [now.replace(microsecond=0) - timedelta(seconds=s) for s in (2, 1, 0)]
    assert more is True
    exact = now.replace(microsecond=0)
    assert every_second.missed_between(exact - timedelta(seconds=2), exact, 5) == (
        [exact - timedelta(seconds=1), exact],
        False,
    )


def test_jitter_is_drawn_within_its_bound() -> None:
    keeper = schedule.Keeper(
        LoggingContext(), one(jitterSeconds=4), schedule.ScheduleState(None), rng=random.Random(7)
    )
    draws = [keeper.jitter() for _ in range(2000)]
    assert all(0 <= d <= 4 for d in draws)
    assert max(draws) - min(draws) > 3  # spread over the range, not a constant
    no_jitter = schedule.Keeper(LoggingContext(), one(), schedule.ScheduleState(None))
    assert no_jitter.jitter() == 0


# -- running ---------------------------------------------------------------------------------


class StateReadingContext(LoggingContext):
    """Reads the state file as each event is emitted: it must already hold the fire."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.stored_at_emit: list[datetime] = []

    async def emit(self, event: ConnectorEvent) -> None:
        assert self.state_dir is not None
        self.stored_at_emit.append(stored_through(self.state_dir, event.properties["schedule"]))
        await super().emit(event)


async def test_every_second_events_record_the_fire_before_they_are_emitted(
    tmp_path: Path,
) -> None:
    ctx = StateReadingContext(
        config={
            "schedules": schedules_text(
                {
                    "name": "tick",
                    "cron": EVERY_SECOND,
                    "text": "tick tock",
                    "properties": {"team": "ops"},
                }
            )
        },
        declared={schedule.EVENT},
        state_dir=tmp_path,
    )
    started = datetime.now(UTC)
    async with running(schedule.run, ctx):
        first = await ctx.next_event()
        second = await ctx.next_event()
    for event in (first, second):
        assert (event.name, event.text(), event.instance_key) == (
            schedule.EVENT,
            "tick tock",
            "schedule:tick",
        )
        assert event.properties["catch_up"] == "false"
        assert event.properties["team"] == "ops"
        assert event.properties["fire_id"] == "tick@" + at(event).astimezone(UTC).isoformat(
            timespec="seconds"
        ).replace("+00:00", "Z")
        assert at(event) > started
    assert at(second) - at(first) == timedelta(seconds=1)
    assert ctx.stored_at_emit == [at(first), at(second)]


async def test_jittered_events_wait_their_drawn_delay(tmp_path: Path) -> None:
    ctx = context(tmp_path, {"name": "j", "cron": EVERY_SECOND, "text": "x", "jitterSeconds": 0.8})
    async with running(schedule.run, ctx):
        for _ in range(3):
            event = await ctx.next_event()
            arrived = datetime.now(UTC)
            delay = float(event.properties["delay_seconds"])
            assert 0 <= delay <= 0.8
            # Never early: the fire time plus its delay had passed when the event came.
            assert arrived >= at(event) + timedelta(seconds=delay - 0.001)


async def test_the_time_zone_decides_when_a_schedule_fires(tmp_path: Path) -> None:
    # An hour field read in Kathmandu (UTC+05:45) fires now; the same read in UTC does not.
    zone = ZoneInfo("Asia/Kathmandu")
    hour = datetime.now(zone).hour
    cron = f"* * {hour},{(hour + 1) % 24} * * *"
    ctx = context(
        tmp_path,
        {"name": "kathmandu", "cron": cron, "timezone": "Asia/Kathmandu", "text": "k"},
        {"name": "utc", "cron": cron, "text": "u"},
    )
    async with running(schedule.run, ctx):
        event = await ctx.next_event()
        await ctx.log.wait_for("schedule armed", count=2)
    assert event.properties["schedule"] == "kathmandu"
    assert event.properties["scheduled_at"].endswith("+05:45")
    armed = {e["schedule"]: e for e in ctx.log.named("schedule armed")}
    utc_next = datetime.fromisoformat(armed["utc"]["next_fire"])
    assert utc_next - datetime.now(UTC) > timedelta(hours=3)


async def test_a_first_start_catches_nothing_up(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    ctx = context(tmp_path, {"name": "h", "cron": far_hourly(now), "text": "x", "missed": "all"})
    async with running(schedule.run, ctx):
        await ctx.log.wait_for("schedule waiting")
    assert ctx.events.empty()
    assert stored_through(tmp_path, "h") >= now  # the start, recorded


@pytest.mark.parametrize(
    ("policy", "caught_up"), [("skip", 0), ("once", 1), ("all", 3)], ids=lambda v: str(v)
)
async def test_missed_fire_times_after_a_downtime(
    tmp_path: Path, policy: str, caught_up: int
) -> None:
    now = datetime.now(UTC)
    write_state(tmp_path, {"h": now - timedelta(hours=5, minutes=1)})  # 5 fire times missed
    item: dict[str, Any] = {"name": "h", "cron": far_hourly(now), "text": "x", "missed": policy}
    if policy == "all":
        item["maxCatchUp"] = 3
    ctx = context(tmp_path, item)
    async with running(schedule.run, ctx):
        await ctx.log.wait_for("schedule waiting")
    events = [ctx.events.get_nowait() for _ in range(ctx.events.qsize())]
    assert len(events) == caught_up
    assert all(e.properties["catch_up"] == "true" for e in events)
    newest = now.replace(minute=(now.minute + 30) % 60, second=0, microsecond=0)
    if newest > now:
        newest -= timedelta(hours=1)
    assert [at(e) for e in events] == [newest - timedelta(hours=h) for h in range(caught_up)][::-1]
    assert stored_through(tmp_path, "h") == newest  # dealt with, fired or not
    if policy == "skip":
        assert ctx.log.named("missed fire times skipped")
    if policy == "all":
        assert ctx.log.named(
            "more fire times missed than are caught up; the older ones are skipped"
        )


async def test_a_restart_never_fires_a_fire_time_twice(tmp_path: Path) -> None:
    item = {"name": "tick", "cron": EVERY_SECOND, "text": "x", "missed": "all"}
    first = context(tmp_path, item)
    async with running(schedule.run, first):
        before = await first.next_event()
    again = context(tmp_path, item)
    async with running(schedule.run, again):
        after = await again.next_event()
    assert at(after) > at(before)
    assert after.properties["fire_id"] != before.properties["fire_id"]


async def test_the_last_fire_is_kept_when_missed_times_are_skipped(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    write_state(tmp_path, {"h": now - timedelta(hours=2, minutes=1)})
    path = tmp_path / schedule.STATE_FILE
    data = json.loads(path.read_text())
    data["schedules"]["h"]["lastFired"] = data["schedules"]["h"]["through"]
    path.write_text(json.dumps(data))
    ctx = context(tmp_path, {"name": "h", "cron": far_hourly(now), "text": "x"})
    async with running(schedule.run, ctx):
        await ctx.log.wait_for("schedule waiting")
    entry = json.loads(path.read_text())["schedules"]["h"]
    assert entry["lastFired"] == data["schedules"]["h"]["lastFired"]
    assert entry["through"] != entry["lastFired"]  # the skipped ones were dealt with


async def test_schedules_no_longer_declared_are_forgotten(tmp_path: Path) -> None:
    write_state(tmp_path, {"gone": datetime(2026, 1, 1, tzinfo=UTC)})
    ctx = context(tmp_path, {"name": "kept", "cron": "0 9 * * *", "text": "x"})
    async with running(schedule.run, ctx):
        await ctx.log.wait_for("schedule waiting")
    data = json.loads((tmp_path / schedule.STATE_FILE).read_text())
    assert set(data["schedules"]) == {"kept"}


@pytest.mark.parametrize(
    "content",
    ['{"formatVersion": 1, "schedules": {"a": {"through": "yesterday"}}}', "not json"],
)
async def test_an_unreadable_state_file_stops_the_connector(tmp_path: Path, content: str) -> None:
    (tmp_path / schedule.STATE_FILE).write_text(content)
    ctx = context(tmp_path, {"name": "a", "cron": "0 9 * * *", "text": "x"})
    with pytest.raises(ConnectorError, match="is not a schedule state: move it away"):
        await schedule.run(ctx)


async def test_a_newer_state_format_is_refused(tmp_path: Path) -> None:
    (tmp_path / schedule.STATE_FILE).write_text('{"formatVersion": 99, "schedules": {}}')
    ctx = context(tmp_path, {"name": "a", "cron": "0 9 * * *", "text": "x"})
    with pytest.raises(ConnectorError, match="upgrade goondan"):
        await schedule.run(ctx)


# -- the manifest and the example ------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "tools_base" / "goondan.yaml"
EXAMPLE = ROOT / "examples" / "schedule" / "goondan.yaml"


def test_the_manifest_declares_what_the_connector_emits(tmp_path: Path) -> None:
    [connector] = [
        doc
        for doc in yaml.safe_load_all(MANIFEST.read_text())
        if doc["kind"] == "Connector" and doc["metadata"]["name"] == "schedule"
    ]
    entry = (MANIFEST.parent / connector["spec"]["entry"]).resolve()
    assert entry == Path(schedule.__file__).resolve()
    [event] = connector["spec"]["events"]
    assert event["name"] == schedule.EVENT
    assert set(event["properties"]) == set(BUILT_IN_PROPERTIES)


def test_the_example_validates_with_its_schedules_checked() -> None:
    loaded = load_bundle(EXAMPLE, check_handlers=True)
    [connection] = [r for r in loaded.resources if r.kind == "Connection"]
    text = connection.spec.config["schedules"].value
    schedules, problems = parse_schedules(text)
    assert problems == []
    assert [s.name for s in schedules] == ["heartbeat", "digest"]
