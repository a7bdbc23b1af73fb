"""A running request's feed numbers its events, replays what came after a client's last one,
and holds a bounded amount however much text a Turn streams."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ipc.delegation import DelegateAnswer
from ipc.events import TextDelta
from ipc.runtime_events import AnyEvent
from orchestrator.requests import feed as feeds
from orchestrator.requests.feed import RequestFeed


@dataclass
class Seen:
    pieces: list[tuple[int, str]] = field(default_factory=list)

    def put(self, agent: str, delta: TextDelta, seq: int = 0) -> None:
        self.pieces.append((seq, delta.text))

    def notice(self, event: AnyEvent, seq: int = 0) -> None:
        self.pieces.append((seq, event.type or ""))


def delta(text: str) -> TextDelta:
    return TextDelta("c", text, "t", "default", "turn-1", "s0")


async def test_a_follower_gets_what_came_after_its_last_event_then_each_new_one() -> None:
    feed = RequestFeed("t")
    for text in ("a", "b", "c"):
        feed.delta("alpha", delta(text))
    late = Seen()
    feed.follow(late, after=1)
    feed.delta("alpha", delta("d"))
    assert late.pieces == [(2, "b"), (3, "c"), (4, "d")]
    feed.finish(DelegateAnswer("ok", "abcd"))
    feed.delta("alpha", delta("e"))  # after the answer: nothing more
    assert late.pieces[-1] == (4, "d")
    assert feed.answered.is_set()
    assert not feed.events


async def test_a_flood_of_text_keeps_the_feed_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feeds, "FEED_MAX_CHARS", 100)
    monkeypatch.setattr(feeds, "FEED_MAX_EVENTS", 10)
    feed = RequestFeed("t")
    live = Seen()
    feed.follow(live)
    for n in range(1000):
        feed.delta("alpha", delta(f"{n:04d}" * 5))  # 20 characters each
    assert feed.chars <= 100
    assert len(feed.events) <= 10
    assert len(live.pieces) == 1000  # a live follower missed nothing
    replayed = Seen()
    feed.follow(replayed)  # from the start: only what is kept
    assert [seq for seq, _ in replayed.pieces] == list(range(996, 1001))


async def test_the_feed_keeps_the_traces_steps_and_tool_calls_beside_its_approvals() -> None:
    from ipc.runtime_events.approvals import ApprovalRequestedEvent
    from ipc.runtime_events.work import (
        StepStartedEvent,
        ToolCalledEvent,
        TurnStartedEvent,
    )

    feed = RequestFeed("t")
    seen = Seen()
    feed.follow(seen)
    feed.notice(StepStartedEvent(agent_name="alpha", trace_id="t", step_id="s0"))
    feed.notice(ToolCalledEvent(agent_name="alpha", trace_id="t", tool_name="bash__exec"))
    feed.notice(ApprovalRequestedEvent(agent_name="alpha", trace_id="t"))
    feed.notice(TurnStartedEvent(agent_name="alpha", trace_id="t"))  # not followed
    feed.notice(ToolCalledEvent(agent_name="alpha", trace_id="other"))  # another trace
    assert seen.pieces == [(1, "step.started"), (2, "tool.called"), (3, "approval.requested")]
