"""Durable Turns under fire: four clients keep asking while a random agent is SIGKILLed every
3–6 s; a crash must be a delay, not an error.

Every Turn has a non-idempotent tool on its path (``ledger__append``, one line per call in the
effects file, keyed by request). The agents use the ``openai`` provider against a local Chat
Completions server that counts every model call. Asserted: at least 99 % of the requests are
answered ok, no tool effect happens twice, and a model call is asked again (the same agent,
the same conversation) at most once per resumed Turn: a kill cuts every Turn its agent runs
(up to one per client here), each repeating at most its one call in flight.

The load runs ``GOONDAN_DURABLE_SECONDS`` (default 20, at most 45) so CI stays quick.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_process.conversation import ConversationStore
from ipc.delegation import DelegateAnswer
from orchestrator.daemon import Orchestrator
from orchestrator.status import ProcessStatus
from tests.support.ledger import effects, ledger_model, runtime_events, write_model_ledger_swarm
from tests.support.model_server import ModelServer, serve

pytestmark = pytest.mark.timeout(240)

SECONDS = min(45.0, float(os.environ.get("GOONDAN_DURABLE_SECONDS", "20")))
CLIENTS = 4


@pytest.fixture
def server() -> Iterator[ModelServer]:
    yield from serve(ledger_model)


async def test_durable_turns_under_random_kills(server: ModelServer, tmp_path: Path) -> None:
    rng = random.Random(20261202)
    path = write_model_ledger_swarm(tmp_path, server.url)
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
    supervisor = orchestrator.supervisor
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(30):
        await orchestrator.start()
        for name in ("front", "back"):
            await supervisor.ensure_running(name)
    deadline = loop.time() + SECONDS
    results: list[tuple[str, DelegateAnswer]] = []

    async def client(number: int) -> None:
        for i in range(10_000):
            if loop.time() >= deadline:
                return
            key = f"c{number}-{i}"
            agent = rng.choice(["front", "back"])
            text = f"relay {key}" if agent == "front" and i % 2 == 0 else f"work {key}"
            async with asyncio.timeout(150):  # bounded; the request's own timeout is 120 s
                reply = await orchestrator.request(
                    text, agent=agent, instance_key=f"client-{number}"
                )
            results.append((key, reply))

    async def killer() -> int:
        kills = 0
        while True:
            await asyncio.sleep(rng.uniform(3, 6))  # the fault schedule, not a synchronisation
            if loop.time() >= deadline:
                return kills
            victim = supervisor.handle(rng.choice(["front", "back"]))
            if victim.pid is None or victim.status not in (
                ProcessStatus.IDLE,
                ProcessStatus.PROCESSING,
            ):
                continue
            try:
                os.kill(victim.pid, signal.SIGKILL)
            except ProcessLookupError:
                continue  # dead already and not yet reaped: not a kill of this round
            kills += 1

    try:
        killing = asyncio.ensure_future(killer())
        await asyncio.gather(*(client(n) for n in range(CLIENTS)))
        kills = await killing
        assert not orchestrator.router.pending  # nobody left waiting
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()

    ok = [key for key, reply in results if reply.status == "ok"]
    failed = [(key, reply.error) for key, reply in results if reply.status != "ok"]
    print(f"durable turns: {len(results)} requests, {len(ok)} ok, {kills} kills, {failed[:5]}")
    assert kills >= SECONDS // 6 - 1
    assert len(results) >= 20
    assert len(ok) >= 0.99 * len(results), failed
    # No effect doubled: each request's non-idempotent call ran at most once.
    doubled = {k: n for k, n in Counter(effects(tmp_path)).items() if n > 1}
    assert doubled == {}
    # A model call asked again (same agent, same conversation) is the one call in flight of an
    # interrupted Turn: at most one per resumed attempt (one kill cuts every Turn the agent
    # runs, up to one per client), and none asked more often than there were kills.
    seen = Counter(
        (c.agent, json.dumps(c.body["messages"])) for c in server.calls if "messages" in c.body
    )
    repeated = sum(n - 1 for n in seen.values())
    resumed = [e for e in runtime_events(orchestrator, "turn.resumed") if not e["replayed"]]
    print(f"durable turns: {repeated} model calls repeated, {len(resumed)} Turns resumed")
    assert repeated <= len(resumed), (repeated, len(resumed))
    assert max(seen.values()) <= kills + 1
    # Every conversation still loads.
    for agent in ("front", "back"):
        for number in range(CLIENTS):
            directory = tmp_path / "state" / "agents" / agent / "instances" / f"client-{number}"
            if directory.exists():
                ConversationStore(directory / "conversation").load()
